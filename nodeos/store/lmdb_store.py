"""Node-local durable state in LMDB.

Every value is a record: msgpack of `[schema_version, crc32, payload_bytes]` where
payload_bytes is the msgpack of the caller's object. The checksum catches a torn or
corrupt record, which is reported (CorruptRecord), never silently used. The
environment is opened with sync on: a committed write transaction is on disk when
`commit` returns, so callers may acknowledge after it.

Named sub-databases keep unrelated state apart (e.g. "meta", "intents", "volumes",
"raft_log", "raft_state").

The state holds secrets (the cluster secret, DH-HMAC-CHAP keys): the environment's directory
is made 0700 and its files 0600 whatever the umask or a pre-existing directory said.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lmdb
import msgpack

from nodeos.errors import CorruptState, NodeosError, NoSpace, OperationFailed

LOG = logging.getLogger("nodeos.store")
SCHEMA_VERSION = 1
DEFAULT_MAP_SIZE = 1 << 30  # 1 GiB of address space; LMDB files are sparse
DIR_MODE = 0o700
FILE_MODE = 0o600


class CorruptRecord(CorruptState):
    """A stored record failed its checksum or could not be decoded."""

    def __init__(self, db: str, key: bytes, why: str) -> None:
        super().__init__(f"corrupt record in {db!r} at key {key!r}: {why}", field="state_dir")
        self.db = db
        self.key = key


def storage_error(exc: BaseException) -> NodeosError | None:
    """The operator-facing error for a failed LMDB/file operation; None if it is not one."""
    if isinstance(exc, NodeosError):
        return exc
    if isinstance(exc, lmdb.MapFullError):
        return NoSpace(f"the node's state database is full: {exc}", field="state_dir")
    text = str(exc)
    if (isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)) or (
        isinstance(exc, lmdb.Error) and "No space left" in text
    ):
        return NoSpace(f"no space left for the node's state: {text}", field="state_dir")
    if isinstance(exc, (lmdb.Error, OSError)):
        return OperationFailed(f"the node's state could not be read or written: {text}", field="state_dir")
    return None


def secure_dir(path: Path) -> None:
    """Create `path` 0700, or take group/other access away from an existing one (with a warning)."""
    path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    st = os.stat(path)
    if stat.S_IMODE(st.st_mode) & 0o077:
        LOG.warning("state directory %s was mode %04o; made it 0700", path, stat.S_IMODE(st.st_mode))
        os.chmod(path, stat.S_IMODE(st.st_mode) & ~0o077)


class UnknownSchema(Exception):
    """A record written by a newer nodeos than this one."""


def encode(obj: Any, version: int = SCHEMA_VERSION) -> bytes:
    payload = msgpack.packb(obj, use_bin_type=True)
    return msgpack.packb([version, zlib.crc32(payload), payload], use_bin_type=True)


def decode(raw: bytes, *, db: str = "?", key: bytes = b"") -> Any:
    try:
        version, crc, payload = msgpack.unpackb(raw, raw=False)
    except Exception as exc:
        raise CorruptRecord(db, key, f"envelope does not decode ({exc})") from None
    if not isinstance(payload, bytes) or zlib.crc32(payload) != crc:
        raise CorruptRecord(db, key, "checksum mismatch")
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise UnknownSchema(
            f"record in {db!r} has schema version {version}; this nodeos reads up to {SCHEMA_VERSION}"
        )
    return msgpack.unpackb(payload, raw=False, strict_map_key=False)


def key_bytes(key: str | bytes | int) -> bytes:
    """Keys: str as UTF-8, int as 8-byte big-endian (so they sort numerically)."""
    if isinstance(key, bytes):
        return key
    if isinstance(key, int):
        return key.to_bytes(8, "big")
    return key.encode()


class Txn:
    """A transaction over named sub-databases with record encoding."""

    def __init__(self, store: Store, txn: lmdb.Transaction) -> None:
        self._store = store
        self._txn = txn

    def get(self, db: str, key: str | bytes | int, default: Any = None) -> Any:
        k = key_bytes(key)
        raw = self._txn.get(k, db=self._store.db(db))
        if raw is None:
            return default
        return decode(raw, db=db, key=k)

    def put(self, db: str, key: str | bytes | int, value: Any) -> None:
        self._txn.put(key_bytes(key), encode(value), db=self._store.db(db))

    def delete(self, db: str, key: str | bytes | int) -> bool:
        return bool(self._txn.delete(key_bytes(key), db=self._store.db(db)))

    def items(self, db: str, start: str | bytes | int | None = None) -> Iterator[tuple[bytes, Any]]:
        """Records in key order, from `start` (inclusive) when given."""
        with self._txn.cursor(db=self._store.db(db)) as cur:
            ok = cur.set_range(key_bytes(start)) if start is not None else cur.first()
            while ok:
                k, raw = cur.item()
                yield bytes(k), decode(bytes(raw), db=db, key=bytes(k))
                ok = cur.next()

    def last_key(self, db: str) -> bytes | None:
        with self._txn.cursor(db=self._store.db(db)) as cur:
            return bytes(cur.key()) if cur.last() else None

    def delete_range(self, db: str, start: str | bytes | int, stop: str | bytes | int | None) -> int:
        """Delete keys in [start, stop); stop None means to the end. Returns the count."""
        lo = key_bytes(start)
        hi = key_bytes(stop) if stop is not None else None
        n = 0
        with self._txn.cursor(db=self._store.db(db)) as cur:
            ok = cur.set_range(lo)
            while ok and (hi is None or bytes(cur.key()) < hi):
                ok = cur.delete()
                n += 1
        return n


class Store:
    """An LMDB environment holding one node's state."""

    def __init__(
        self,
        path: str | Path,
        dbs: Iterable[str],
        *,
        map_size: int = DEFAULT_MAP_SIZE,
        max_dbs: int = 32,
    ) -> None:
        self.path = Path(path)
        secure_dir(self.path)
        # sync=True, metasync=True: commit returns only once data is on stable storage.
        self.env = lmdb.open(
            str(self.path),
            map_size=map_size,
            max_dbs=max_dbs,
            sync=True,
            metasync=True,
            subdir=True,
            lock=True,
            mode=FILE_MODE,
        )
        # `mode` only applies to files LMDB creates: files an older nodeos left 0644 are fixed here.
        for f in self.path.iterdir():
            if f.is_file() and stat.S_IMODE(f.stat().st_mode) & 0o077:
                os.chmod(f, FILE_MODE)
        # Sub-databases are opened up front: opening one later, inside a write
        # transaction of the same thread, would deadlock on LMDB's writer lock.
        self._dbs: dict[str, Any] = {name: self.env.open_db(name.encode(), create=True) for name in dbs}

    def names(self) -> tuple[str, ...]:
        """The sub-databases this store opened."""
        return tuple(self._dbs)

    def db(self, name: str) -> Any:
        try:
            return self._dbs[name]
        except KeyError:
            raise KeyError(f"sub-database {name!r} was not opened; pass it in Store(dbs=...)") from None

    @contextmanager
    def read(self) -> Iterator[Txn]:
        with self.env.begin(write=False) as txn:
            yield Txn(self, txn)

    @contextmanager
    def write(self) -> Iterator[Txn]:
        """A write transaction, committed (durably) on normal exit, aborted on error."""
        with self.env.begin(write=True) as txn:
            yield Txn(self, txn)

    def last_txn_id(self) -> int:
        """The id of the last committed write transaction (by any process): it changes with every
        commit, so a reader can tell whether what it read before is still current."""
        return int(self.env.info()["last_txnid"])

    def close(self) -> None:
        self.env.close()
