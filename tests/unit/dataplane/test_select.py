"""Choosing the backend: auto, spdk, kernel, none (the witness)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeos.dataplane.select import NoDataPlane, choose, spdk_answers
from nodeos.dataplane.spdk.backend import SpdkDataPlane
from nodeos.errors import BadInput, EnvironmentProblem, NotSupported
from tests.unit.dataplane.spdk_replay import ReplayedSpdkTarget, load_transcript


@pytest.fixture
def replay(shared_dir: Path, tmp_path: Path) -> Iterator[ReplayedSpdkTarget]:
    t = ReplayedSpdkTarget(load_transcript(shared_dir), tmp_path / "spdk.sock")
    yield t
    t.close()


def test_auto_picks_spdk_when_its_socket_answers(replay: ReplayedSpdkTarget, tmp_path: Path) -> None:
    assert spdk_answers(str(replay.sock_path))
    dp = choose("auto", spdk_socket=str(replay.sock_path), configfs_root=tmp_path / "no-nvmet")
    assert isinstance(dp, SpdkDataPlane)


def test_auto_without_spdk_or_nvmet_says_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentProblem) as e:
        choose("auto", spdk_socket=str(tmp_path / "none.sock"), configfs_root=tmp_path / "no-nvmet")
    assert "modprobe nvmet" in e.value.message and "none.sock" in e.value.message


def test_socket_that_is_not_spdk_does_not_count(tmp_path: Path) -> None:
    p = tmp_path / "file.sock"
    p.write_text("")
    assert not spdk_answers(str(p))


def test_kernel_chosen_explicitly_needs_nvmet(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentProblem) as e:
        choose("kernel", configfs_root=tmp_path / "no-nvmet")
    assert "nvmet" in e.value.message


def test_unknown_backend_is_bad_input() -> None:
    with pytest.raises(BadInput) as e:
        choose("zfs")
    assert e.value.field == "dataplane" and "kernel" in e.value.allowed


def test_witness_refuses_changes_and_lists_nothing() -> None:
    dp = choose("none")
    assert isinstance(dp, NoDataPlane)
    assert dp.list_pools() == [] and dp.list_volumes() == [] and dp.list_exports() == []
    with pytest.raises(NotSupported) as e:
        dp.create_pool("p1", ["/dev/nvme0n1"])
    assert "witness" in e.value.message


def test_spdk_key_files_go_under_the_daemons_state_dir(replay: ReplayedSpdkTarget, tmp_path: Path) -> None:
    state = tmp_path / "state"
    dp = choose("spdk", spdk_socket=str(replay.sock_path), state_dir=state)
    assert isinstance(dp, SpdkDataPlane)
    assert dp.keys_dir == state / "spdk-keys"
