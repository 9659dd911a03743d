"""md's write serialization for the mirrors (raid1 `serialize_policy`, Linux >= 5.8).

With it on, md raid1 sends a write to a leg only once that leg finished every earlier write
overlapping it (an interval check per member device, in raid1_write_request); off, two writes
to one block in flight on a leg together may land in either order: NVMe/TCP, nvmet and the
replica's backing device order nothing. That is pitfall 1 inside one primary: a host times a
write out, tears its connection down and retries on a new one; the first attempt is already
in md and its leg write to a replica is still in flight; the retry and a newer write to the
same block are acknowledged, then the first attempt's leg write lands over the newer one and
an in-sync replica holds stale data (the failover simulator's 5-node seed 4646). Serialized,
the retry's leg write waits for the first attempt's, and the newer write for the retry's.

md keeps the setting in memory only (not in the superblock): it is set at every assembly,
before the front end exports the array, and an array whose kernel cannot set it is not
exported. md suspends the array to turn it on, which waits for the in-flight I/O (a leg
holding its I/O holds the store): the store runs in a thread waited on for a bound, one at a
time per array.

A member added to the running array (mdadm --add / --re-add) gets no serialization state of its
own while the policy is on: md's bind_rdev_to_array sets it up only for write-mostly members
with write-behind, and raid1_write_request would then look a write up in the member's missing
interval trees. So a member is added with the array's writes held (md's suspend range) and the
policy off, and the policy is turned on again (which sets up every member) before the writes
flow (`MdMirrors._reconcile_members`; writes already held by a snapshot's freeze stay held).
"""

from __future__ import annotations

import threading
from pathlib import Path

from nodeos.errors import EnvironmentProblem, OperationFailed
from nodeos.sysfs import read_attr

SERIALIZE_ATTR = "serialize_policy"
SERIALIZE_WAIT_S = 10.0


def writes_serialized(text: str) -> bool:
    """md's serialize_policy reads "1" on; "0" off, "n/a" for a level other than raid1, and the
    attribute is missing before Linux 5.8 (read as "")."""
    return text.strip() == "1"


def _store(path: Path, value: str, done: threading.Event, errors: list[str]) -> None:
    try:
        path.write_text(value + "\n")
    except OSError as exc:
        errors.append(exc.strerror or str(exc))
    done.set()


class WriteSerializer:
    def __init__(self) -> None:
        self._stores: dict[str, tuple[threading.Event, list[str]]] = {}  # mirror id -> store

    def ensure(self, md_sysdir: Path, mirror_id: str, wait_s: float = SERIALIZE_WAIT_S) -> None:
        """Serialization on for the array whose /sys/block/mdX/md is `md_sysdir`, or an error:
        EnvironmentProblem without the attribute, OperationFailed when md refused it or did not
        finish the store within `wait_s` (a later call waits for that same store)."""
        attr = md_sysdir / SERIALIZE_ATTR
        if writes_serialized(read_attr(attr)):
            return
        if not attr.exists():
            raise EnvironmentProblem(
                f"{attr} is missing: this kernel's md cannot serialize writes to a block (Linux 5.8 "
                "and later can); without it a retried write may land on a replica under an older one"
            )
        self._set(attr, mirror_id, "1", wait_s)

    def disable(self, md_sysdir: Path, mirror_id: str, wait_s: float = SERIALIZE_WAIT_S) -> None:
        """Serialization off (for adding a member to the running array: see adding_members)."""
        attr = md_sysdir / SERIALIZE_ATTR
        if writes_serialized(read_attr(attr)):
            self._set(attr, mirror_id, "0", wait_s)

    def _set(self, attr: Path, mirror_id: str, value: str, wait_s: float) -> None:
        store = self._stores.get(mirror_id)
        if store is None or store[0].is_set():
            store = self._stores[mirror_id] = (threading.Event(), [])
            threading.Thread(
                target=_store, args=(attr, value, *store), name=f"md-serialize-{mirror_id}", daemon=True
            ).start()
        done, errors = store
        if not done.wait(wait_s):
            raise OperationFailed(
                f"md did not finish setting {SERIALIZE_ATTR} of {mirror_id} within {wait_s:.0f} s "
                "(it waits for the array's in-flight I/O)",
                field="mirror_id",
            )
        # Kept only while it runs (a later call waits for it): not one entry per array ever made.
        if self._stores.get(mirror_id) is store:
            del self._stores[mirror_id]
        got = read_attr(attr)
        if errors or writes_serialized(got) != (value == "1"):
            why = errors[0] if errors else f"{attr} reads {got!r}"
            raise OperationFailed(
                f"md refused {SERIALIZE_ATTR}={value} for {mirror_id}: {why}", field="mirror_id"
            )
