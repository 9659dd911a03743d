"""A forwarded leader method that a starting daemon does not serve yet (nodeos/cluster/service.py,
`cluster.fwd`): its cluster member answers peers before the control service has registered
"control", and the soak of 2026-11-30 saw the console told `bad_input` (exit 2, "nothing
changed") for a create that an earlier try of the same request had made. Such a method is now
"not leader, nothing done" (the sender asks again); a method nobody serves stays bad input."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

from nodeos.cluster.errors import NotLeader
from nodeos.cluster.service import ClusterService
from nodeos.errors import BadInput


def _service(tmp_path: Path) -> ClusterService:
    return ClusterService(SimpleNamespace(state_dir=str(tmp_path), peer_listen=None, dataplane=None))


@pytest.mark.parametrize("inner", ["control", "lease"])
def test_a_service_method_asked_before_its_service_started_is_not_leader(tmp_path: Path, inner: str) -> None:
    svc = _service(tmp_path)
    with pytest.raises(NotLeader, match="starting"):
        asyncio.run(svc._on_request(2, "cluster.fwd", {"method": inner, "params": {}}))


def test_a_method_nobody_serves_is_bad_input_naming_the_field(tmp_path: Path) -> None:
    svc = _service(tmp_path)
    with pytest.raises(BadInput) as e:
        asyncio.run(svc._on_request(2, "cluster.fwd", {"method": "planet", "params": {}}))
    assert e.value.field == "method" and "planet" in e.value.message
