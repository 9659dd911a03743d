"""Error codes survive the trip daemon -> API -> console: a script can tell them apart."""

from __future__ import annotations

import json

import lmdb
import pytest
from click.testing import CliRunner

from nodeos.cli.output import command_runner, json_option
from nodeos.cluster.errors import NotLeader, OutcomeUnknown
from nodeos.errors import NodeosError, error_from_dict
from nodeos.store.lmdb_store import CorruptRecord, storage_error


@pytest.mark.parametrize(
    "code", ["not_leader", "unknown_outcome", "corrupt_record", "no_space", "peer_unreachable"]
)
def test_every_code_is_kept_through_rpc(code: str) -> None:
    err = error_from_dict({"code": code, "message": "m", "field": "f"})
    assert err.to_dict() == {"code": code, "message": "m", "field": "f"}
    assert err.exit_code == 1


@pytest.mark.parametrize("err", [NotLeader("nothing done"), OutcomeUnknown("may be applied")])
def test_console_json_keeps_the_cluster_codes(err: NodeosError) -> None:
    import click

    @click.command()
    @json_option
    @command_runner
    def cmd(as_json: bool) -> None:
        raise error_from_dict(err.to_dict())  # as the API client rebuilds it

    r = CliRunner().invoke(cmd, ["--json"])
    assert r.exit_code == 1
    assert json.loads(r.output)["error"]["code"] == err.code


def test_storage_failures_get_their_own_codes() -> None:
    full = storage_error(lmdb.DiskError("mdb_txn_commit: No space left on device"))
    assert full is not None and full.code == "no_space"
    assert storage_error(lmdb.MapFullError("full")).code == "no_space"  # type: ignore[union-attr]
    assert CorruptRecord("meta", b"identity", "checksum mismatch").to_dict()["code"] == "corrupt_record"
    assert storage_error(ValueError("a bug")) is None


def test_a_placement_refusal_keeps_exit_code_2_across_rpc() -> None:
    from nodeos.errors import EXIT_BAD_INPUT, error_from_dict
    from nodeos.storage.placement import PlacementRefused

    err = error_from_dict(
        PlacementRefused("3 replicas spread by rack need 3 racks", field="replicas").to_dict()
    )
    assert err.exit_code == EXIT_BAD_INPUT and err.code == "placement_refused" and err.field == "replicas"
