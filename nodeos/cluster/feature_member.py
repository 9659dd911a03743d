"""The cluster feature level inside nodeosd (the pure rules: nodeos/cluster/features.py).

- `GatedDriver`: the Raft driver of the daemon, whose `propose` refuses, before Raft, a command
  this node does not know or one above the cluster's feature level (every proposal of every
  service goes through it), and refuses every proposal while this node's map has stopped.
- `FeatureMember`, a mixin of ClusterService: says what this member knows (its release and
  level, in `node_update` when the map holds something else, e.g. after an upgrade), raises the
  level at the leader (`cluster set feature-level N`), and reports a map that stopped applying:
  status, health (not ready), a critical event in the journal; a stopped leader hands over.

Test tooling: NODEOS_TEST_KNOWN_LEVEL=N makes this node know only the map commands of levels up
to N, as a release from before them would (read here only; used by
tests/process/test_cluster_versions.py to run an "older" node beside a newer one).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import TYPE_CHECKING, Any

import msgpack

from nodeos.cluster import commands, features
from nodeos.cluster.driver import RaftDriver
from nodeos.cluster.errors import NotLeader
from nodeos.cluster.map import ClusterMap, encode_command
from nodeos.cluster.raft import StateRole
from nodeos.errors import BadInput, NodeosError
from nodeos.observe.events import make_event
from nodeos.observe.journal import log_event

if TYPE_CHECKING:
    from nodeos.cluster.transport import PeerTransport

log = logging.getLogger("nodeosd.cluster")

TEST_KNOWN_LEVEL_ENV = "NODEOS_TEST_KNOWN_LEVEL"  # test tooling only: see the module's docstring


def known_level_from_env(env: dict[str, str] | None = None) -> int:
    """The feature level this node knows: this release's, or less under the test override."""
    raw = (env if env is not None else os.environ).get(TEST_KNOWN_LEVEL_ENV)
    if not raw:
        return features.LEVEL
    level = int(raw)
    if not 1 <= level <= features.LEVEL:
        raise ValueError(f"{TEST_KNOWN_LEVEL_ENV} must be 1..{features.LEVEL}")
    log.warning("test tooling: this node knows only feature level %d (%s)", level, TEST_KNOWN_LEVEL_ENV)
    return level


def command_of(data: bytes) -> tuple[Any, Any]:
    """(name, version) of an encoded map command, or (None, None) if it is not one."""
    name, version, _ = _decoded(data)
    return name, version


def _decoded(data: bytes) -> tuple[Any, Any, Any]:
    try:
        obj = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception:
        return None, None, None
    return (obj.get("cmd"), obj.get("v"), obj.get("args", {})) if isinstance(obj, dict) else (None,) * 3


class GatedDriver(RaftDriver[ClusterMap]):
    """The daemon's driver: no proposal above the cluster's feature level, and none whose
    arguments break its command's typed record (nodeos/cluster/command_args.py), reaches Raft."""

    async def propose(self, command: bytes, timeout: float = 5.0) -> Any:
        if self.map.stalled is not None:
            raise NotLeader(f"node {self.id} stopped applying the map: {self.map.stalled['message']}")
        name, version, args = _decoded(command)
        if name is not None:  # not a command at all: the map rejects it the same everywhere
            features.check_proposal(self.map.state, name, version, self.map.known_level)
            commands.check_args(name, version, args)
        return await super().propose(command, timeout)


class FeatureMember:
    """Mixin of ClusterService: the attributes below are the service's."""

    driver: RaftDriver[ClusterMap] | None
    transport: PeerTransport | None
    known_level: int
    _stall_reported: str | None

    if TYPE_CHECKING:

        async def _at_leader(
            self, method: str, params: dict[str, Any], timeout: float, idempotent: bool = False
        ) -> Any: ...

    def feature_status(self) -> dict[str, Any]:
        d = self.driver
        stalled = d.map.stalled if d is not None else None
        return {
            "release": features.member_report(self.known_level)["release"],
            "knows_level": self.known_level,
            "feature_level": features.cluster_level(d.map.state) if d is not None else None,
            "stalled": None if stalled is None else dict(stalled),
        }

    def stall_failure(self) -> str | None:
        """Why this node is not ready because of its map (None: it applies the log)."""
        d = self.driver
        if d is None or d.map.stalled is None:
            return None
        return f"cluster map stopped: {d.map.stalled['message']}"

    async def lead_feature_level(self, d: RaftDriver, params: dict[str, Any], timeout: float) -> Any:
        """At the leader: raise the level if every member (map and Raft) knows it, else refuse."""
        members = set(d.conf_state.voters) | set(d.conf_state.learners)
        level = features.check_raise(d.map.state, params.get("level"), members)
        return await d.propose(encode_command(features.RAISE_COMMAND, {"level": level}), timeout)

    async def api_set_feature_level(self, level: Any, timeout: float) -> dict[str, Any]:
        if type(level) is not int or level < 1:
            raise BadInput("feature_level must be a positive integer", field="feature_level")
        return await self._at_leader("feature_level", {"level": level}, timeout)

    async def api_kv_delete(self, params: dict[str, Any]) -> dict[str, Any]:
        """`cluster kv delete`: a command of feature level 2, refused before Raft below it."""
        key = params.get("key")
        if not isinstance(key, str) or not 0 < len(key) <= 256:
            raise BadInput("key must be 1..256 characters", field="key")
        timeout = float(params.get("timeout") or 5.0)
        return await self._at_leader("command", {"cmd": "kv_delete", "args": {"key": key}}, timeout)

    async def _watch_features(self) -> None:
        """Say what this member knows once per start of its member; report a stopped map."""
        reported_for: object = None
        while True:
            d = self.driver
            if d is not None:
                self._check_stall(d)
                if reported_for is not d and d.map.stalled is None:
                    with contextlib.suppress(NodeosError):
                        if await self._report_knowledge(d):
                            reported_for = d
            changed = d.map_changed if d is not None else None
            if changed is None:
                await asyncio.sleep(1.0)
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), 1.0)

    async def _report_knowledge(self, d: RaftDriver) -> bool:
        """node_update with this release and level when the map holds other ones; True when done."""
        node = d.map.nodes.get(d.id)
        if node is None:
            return False  # not in the map yet (joining): add_node carries the report
        want = features.member_report(self.known_level)
        if all(node.get(k) == v for k, v in want.items()):
            return True
        await self._at_leader("command", {"cmd": "node_update", "args": {"node_id": d.id, **want}}, 10)
        log.info("told the cluster this member runs %s (feature level %d)", want["release"], self.known_level)
        return True

    def _check_stall(self, d: RaftDriver) -> None:
        stalled = d.map.stalled
        if stalled is None:
            return
        if self._stall_reported != stalled["message"]:
            self._stall_reported = stalled["message"]
            rec = make_event(
                "node_stalled",
                f"node {d.id} stopped applying the cluster map: {stalled['message']}",
                severity="critical",
                node=d.id,
            )
            log_event(rec)
        if d.role is StateRole.LEADER:
            # A leader whose map stopped cannot answer for it: another voter takes over.
            st = d.node.status()
            others = [(pr.match, n) for n, pr in st.progress.items() if n != d.id and not pr.is_learner]
            if others and st.lead_transferee == 0:
                d.transfer_leadership(max(others)[1])
