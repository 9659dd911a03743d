"""SPDK's -17 "File exists" to bdev_raid_create, mapped to what happened (errors.raid_conflict).

The answers below were recorded against a real SPDK v26.05 nvmf_tgt (interrupt mode, AIO
drives, 2026-11-27; docs/spdk.md): a raid0 with superblock made over two AIO drives, the target
killed, and then (1) the drives re-created with new random UUIDs: bdev_raid_create answers -17
and the target's log says "Superblock of a different raid bdev found on bdev aio0"; (2) one
drive re-created with its old UUID: SPDK assembles the raid from its superblock, left in state
"configuring" (not a bdev yet, so a lookup by name misses it), and -17 is "Duplicate raid bdev
name"."""

from __future__ import annotations

from nodeos.dataplane.spdk.errors import map_error, raid_conflict
from nodeos.errors import AlreadyExists, OperationFailed

PARAMS = {
    "name": "nodeos_q_raid0",
    "raid_level": "raid0",
    "strip_size_kb": 64,
    "base_bdevs": ["aio0", "aio1"],
}
ANSWER = (-17, "Failed to create RAID bdev nodeos_q_raid0: File exists")
CONFIGURING = {
    "name": "nodeos_q_raid0",
    "uuid": "cbf13ccc-364f-47e6-a836-b09afc606aa3",
    "strip_size_kb": 64,
    "state": "configuring",
    "raid_level": "raid0",
    "superblock": True,
    "num_base_bdevs": 2,
    "num_base_bdevs_discovered": 1,
    "num_base_bdevs_operational": 2,
    "base_bdevs_list": [
        {"name": "aio0", "uuid": "57025168-8e66-500c-9685-b0f112b7ad50", "is_configured": True},
        {"name": None, "uuid": "96d6f2a4-d758-5253-8b51-36527031cd3c", "is_configured": False},
    ],
}


def _err() -> AlreadyExists:
    e = map_error("bdev_raid_create", PARAMS, *ANSWER)
    assert isinstance(e, AlreadyExists)
    return e


def test_a_superblock_of_another_raid_is_not_reported_as_exists_already() -> None:
    e = raid_conflict("nodeos_q_raid0", ["aio0", "aio1"], [], _err())
    assert isinstance(e, OperationFailed) and e.field == "drives"
    assert "exists already" not in e.message
    assert "holds the superblock of a different raid" in e.message and "aio0, aio1" in e.message
    assert e.message.endswith(
        "(SPDK bdev_raid_create: -17 Failed to create RAID bdev nodeos_q_raid0: File exists)"
    )


def test_a_raid_waiting_for_its_drives_names_what_it_has_and_what_is_missing() -> None:
    e = raid_conflict("nodeos_q_raid0", ["aio0", "m1"], [CONFIGURING], _err())
    assert e.field == "drives" and "state configuring" in e.message
    assert "1 of 2 members (aio0" in e.message and "96d6f2a4-d758-5253-8b51-36527031cd3c" in e.message


def test_a_drive_of_another_raid_names_that_raid() -> None:
    other = dict(CONFIGURING, name="nodeos_x_raid0")
    e = raid_conflict("nodeos_q_raid0", ["aio0", "m1"], [other], _err())
    assert e.field == "drives" and "aio0 is a member of another raid, nodeos_x_raid0" in e.message
