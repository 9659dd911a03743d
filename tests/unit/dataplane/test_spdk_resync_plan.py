"""The partial resync's pure parts on SPDK (issue 29): names, reading lvols, the chain walk, the
decision partial or full (anything doubtful is full), what to copy in which order, what to clean,
and the request shapes. Against a real SPDK: tests/spdk/test_spdk_partial_resync.py."""

from __future__ import annotations

import pytest

from nodeos.dataplane.ids import check_id
from nodeos.dataplane.spdk import resync
from nodeos.dataplane.spdk import resync_plan as rp
from nodeos.errors import BadInput
from tests.unit.dataplane.spdk_schema import cli_params

MIB = 1024 * 1024
CL = 4 * MIB
SIZE = 128 * MIB
LEG = "nodeos_rep_0123456789abcdef0123n1"
OTHER = "nodeos_rep_fedcba9876543210fedcn1"
T = rp.track_name(LEG)


def lv(name: str, parent: str | None, clusters: int = 0, size: int = SIZE) -> rp.Lvol:
    return rp.Lvol(name, parent, clusters, size)


def lvols(*items: rp.Lvol) -> dict[str, rp.Lvol]:
    return {x.name: x for x in items}


def test_names_never_clash_with_volume_ids_and_are_spdk_lvol_names() -> None:
    for n in (T, rp.step_name(LEG, 12)):
        assert rp.is_internal(n) and len(n) < 64 and "/" not in n
        with pytest.raises(BadInput):
            check_id(n, "vol_id")  # no volume or snapshot id of the product is one of these
    assert not rp.is_internal("v1") and rp.track_name(LEG) != rp.track_name(OTHER)
    assert rp.step_index(rp.step_name(LEG, 7), LEG) == 7
    assert rp.step_index(rp.step_name(LEG, 7), OTHER) is None and rp.step_index(T, LEG) is None


def test_lvol_read_from_bdev_get_bdevs() -> None:
    b = {
        "name": "0b1c-uuid",
        "aliases": ["nodeos_p/v1"],
        "block_size": 4096,
        "num_blocks": SIZE // 4096,
        "driver_specific": {"lvol": {"base_snapshot": T, "num_allocated_clusters": 3, "snapshot": False}},
    }
    assert rp.lvol_of(b) == rp.Lvol("v1", T, 3, SIZE)
    assert rp.lvol_of({"name": "Malloc0", "driver_specific": {}}) is None
    b2 = dict(b, driver_specific={"lvol": {"num_allocated_clusters": 1}})
    assert rp.lvol_of(b2) == rp.Lvol("v1", None, 1, SIZE)


def test_chain_nearest_first_and_survives_a_loop() -> None:
    ls = lvols(lv("v1", "s2"), lv("s2", T), lv(T, "u0"), lv("u0", None))
    assert rp.chain(ls, "v1") == ["s2", T, "u0"]
    assert rp.chain(lvols(lv("a", "b"), lv("b", "a")), "a") == ["b", "a"]  # never loops for ever


def test_partial_copies_every_snapshot_newer_than_the_tracking_one_oldest_first() -> None:
    # u0 (a user's, before the cut) <- T <- u1 (a user's, while away) <- step 1 <- v1
    s1 = rp.step_name(LEG, 1)
    ls = lvols(lv("u0", None, 30), lv(T, "u0", 5), lv("u1", T, 2), lv(s1, "u1", 3), lv("v1", s1, 1))
    p = rp.plan(ls, "v1", LEG, SIZE, SIZE, CL)
    assert p.partial and p.copies == ("u1", s1)
    assert p.bytes_estimate == (2 + 3 + 1) * CL  # what is newer than T, the live lvol's own included
    again = rp.plan(ls, "v1", LEG, SIZE, SIZE, CL, copied=("u1",))
    assert again.copies == (s1,)


@pytest.mark.parametrize(
    ("ls", "leg_bytes", "why"),
    [
        (lvols(lv("v1", None)), SIZE, "no tracking snapshot"),
        (lvols(lv(T, None), lv("v1", None)), SIZE, "not under the volume's lvol"),
        (lvols(lv(T, None, size=SIZE // 2), lv("v1", T)), SIZE, "changed size"),
        (lvols(lv(T, None), lv("v1", T, size=2 * SIZE)), SIZE, "changed size"),
        (lvols(lv(T, None), lv("v1", T)), SIZE - CL, "the leg is"),
        (lvols(lv(T, None)), SIZE, "not an lvol"),
    ],
)
def test_anything_doubtful_is_a_full_copy(ls: dict[str, rp.Lvol], leg_bytes: int, why: str) -> None:
    p = rp.plan(ls, "v1", LEG, SIZE, leg_bytes, CL)
    assert not p.partial and why in p.why and p.copies == ()


def test_another_legs_tracking_is_not_this_ones() -> None:
    ls = lvols(lv(rp.track_name(OTHER), None), lv("v1", rp.track_name(OTHER)))
    assert not rp.plan(ls, "v1", LEG, SIZE, SIZE, CL).partial


def test_leftovers_of_legs_in_sync_and_orphaned_steps() -> None:
    s_leg, s_other = rp.step_name(LEG, 1), rp.step_name(OTHER, 2)
    ls = lvols(lv(T, None), lv(s_leg, T), lv(s_other, s_leg), lv("v1", s_other))
    assert rp.leftovers(ls, []) == [s_other]  # OTHER has no tracking: its steps are orphans
    assert rp.leftovers(ls, [LEG]) == sorted([T, s_leg, s_other])
    assert rp.leftovers(ls, [OTHER]) == [s_other]  # LEG still away: its tracking stays


def test_steps_in_order_and_the_next_number() -> None:
    ls = lvols(*(lv(rp.step_name(LEG, k), None) for k in (2, 10, 1)), lv(rp.step_name(OTHER, 5), None))
    assert rp.steps_of(ls, LEG) == [rp.step_name(LEG, k) for k in (1, 2, 10)]
    assert rp.next_step(ls, LEG) == 11 and rp.next_step({}, LEG) == 1


def test_the_last_round_goes_under_a_freeze_when_little_is_left_or_rounds_run_out() -> None:
    assert rp.go_final(1, rp.CALM_BYTES)
    assert not rp.go_final(1, rp.CALM_BYTES + 1)
    assert rp.go_final(rp.MAX_ROUNDS, 10 * rp.CALM_BYTES)


def test_shallow_copy_requests_use_spdks_parameter_names() -> None:
    known = cli_params()  # the `spdk` package's CLI: what SPDK's RPCs are called with
    for m, params in (resync.shallow_copy("nodeos_p/@rsy.x.1", LEG), resync.check_shallow_copy(3)):
        assert set(params) == known[m], m
