"""A published volume's copy survives a daemon restart (nodeos/agent/published.py with
nodeos/node/pubcopy.py): its progress is recorded in the node's store (real LMDB, closed and
opened again as a restart does) and the copy resumes from it, still giving the source's sha256;
a record made for another size is not used, and a dropped one means a copy from zero."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from types import SimpleNamespace

from nodeos.agent.published import Published
from nodeos.daemon.main import NODE_DBS
from nodeos.node import pubcopy
from nodeos.store.lmdb_store import Store

UUID = "0b9c7d3e-1111-4222-8333-444455556666"


def _published(state: Path) -> tuple[Published, Store]:
    store = Store(state, dbs=NODE_DBS)
    return Published(SimpleNamespace(node=SimpleNamespace(store=store))), store


def test_a_copy_stopped_by_a_restart_resumes_from_the_store_and_verifies(tmp_path: Path) -> None:
    size = 3 * pubcopy.SEGMENT + pubcopy.CHUNK
    data = os.urandom(size)
    src, dst = tmp_path / "src", tmp_path / "lv"
    src.write_bytes(data)
    dst.write_bytes(b"\0" * size)
    pub, store = _published(tmp_path / "state")
    save = pub._checkpoint(UUID, size)
    stop = threading.Event()

    def checkpoint(digests: list[str]) -> None:
        save(digests)
        if len(digests) == 2:
            stop.set()  # the daemon stops after two segments

    failed: list[BaseException] = []

    def copy() -> None:  # in a worker thread, as the agent runs it: the store is written from there
        try:
            pubcopy.copy_and_hash(str(src), size, str(dst), cancel=stop, checkpoint=checkpoint)
        except BaseException as exc:
            failed.append(exc)

    worker = threading.Thread(target=copy)
    worker.start()
    worker.join(timeout=120)
    assert len(failed) == 1 and isinstance(failed[0], pubcopy.Cancelled), failed
    store.close()

    pub, store = _published(tmp_path / "state")  # the daemon starts again
    resume = pub._recorded(UUID, size)
    assert len(resume) == 2
    assert pub._recorded(UUID, size + pubcopy.CHUNK) == []  # made for another size: not trusted
    sha = pubcopy.copy_and_hash(
        str(src), size, str(dst), resume=resume, checkpoint=pub._checkpoint(UUID, size)
    )
    assert sha == hashlib.sha256(data).hexdigest() and dst.read_bytes() == data
    assert len(pub._recorded(UUID, size)) == 4  # the whole copy is recorded: a restart only reads it back
    pub._forget(UUID)  # unpublished, or found differing from the source
    assert pub._recorded(UUID, size) == []
    store.close()


def test_volume_show_gives_a_copys_progress_and_where_a_restarted_one_resumed() -> None:
    from nodeos.cli.publish import published_human

    rep = dict(node="s2", state="copying", progress=0.5, resumed=0.25, copy_from="s1", joined=False)
    view = dict(
        name="llama", state="publishing", size_bytes=1 << 30, nqn="nqn.x", checksum=None, health="1/2",
        replicas=[dict(node="s1", state="ready", joined=True, ana_state="optimized"), rep], hosts=[],
    )  # fmt: skip
    line = next(li for li in published_human(view).splitlines() if "s2" in li)
    assert "from s1" in line and "50%" in line and "resumed at 25%" in line, line
