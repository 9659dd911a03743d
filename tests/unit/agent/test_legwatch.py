"""The primary holds its writes while its mirror lost a leg the map still counts in sync: which
legs are pending, from the map and the mirror's leg states (pure)."""

from __future__ import annotations

from nodeos.agent.legwatch import pending


def vol(primary: int = 1, epoch: int = 2, in_sync: list[int] | None = None) -> dict:
    return {
        "uuid": "5b0e7c1d-2a3f-4e5d-8c7b-6a5f4e3d2c1b",
        "primary": primary,
        "epoch": epoch,
        "in_sync": [1, 2, 3] if in_sync is None else in_sync,
        "placement": [{"node": n, "pool_id": f"p{n}"} for n in (1, 2, 3)],
    }


def test_a_lost_leg_the_map_counts_in_sync_is_pending_until_the_map_drops_it() -> None:
    rec = {"epoch": 2}
    assert pending(vol(), rec, 1, {2: "failed", 3: "in-sync"}) == [2]
    assert pending(vol(in_sync=[1, 3]), rec, 1, {2: "failed", 3: "in-sync"}) == []
    assert pending(vol(), rec, 1, {2: "syncing", 3: "in-sync"}) == []  # rebuilding: not lost


def test_only_the_current_primary_at_its_epoch_holds() -> None:
    assert pending(vol(primary=2), {"epoch": 2}, 1, {2: "failed"}) == []
    assert pending(vol(epoch=3), {"epoch": 2}, 1, {2: "failed"}) == []
    assert pending(None, {"epoch": 2}, 1, {2: "failed"}) == []
