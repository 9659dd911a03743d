"""The cluster data key on a member: keeping it, handing it to members, sealing host secrets.

Part of ClusterService (nodeos/cluster/service.py); the key and the sealed format are pure, in
nodeos/cluster/datakey.py (read its docstring first).

- A new cluster (`cluster init`, a node's cluster of one) makes its key at bootstrap; a joiner
  gets every key in the join reply, wrapped under its token's key (nodeos/cluster/credentials.py).
- A cluster from before sealing has none: the leader makes one the first time it needs one
  (a host added with a secret, or plain secrets to re-seal) and hands it to every other member
  (`cluster.datakey.stage`, wrapped under a key derived from the cluster secret, inside the
  TLS peer link) before it seals anything with it. A member that does not take it: the host
  add is refused and nothing is sealed with the key.
- Every DATAKEY_EVERY_S while the map holds host secrets, the leader asks each member which keys
  it holds (`cluster.datakey.held`), hands the missing ones over (a member that joined through
  one that lacked a key), and once every member holds its current key re-seals the secrets
  still in plain text in the map (from before) with one `host_seal` command. A member from
  before does not answer the question, so nothing is re-sealed while one is in the cluster:
  it could not open what it is given. Rotating the cluster secret leaves the data key as it is.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import time
from typing import TYPE_CHECKING, Any

from nodeos.cluster import datakey, secretroll
from nodeos.cluster.map import encode_command
from nodeos.cluster.raft import StateRole
from nodeos.errors import BadInput, NodeosError, OperationFailed

if TYPE_CHECKING:
    from nodeos.cluster.driver import RaftDriver

log = logging.getLogger("nodeosd.cluster")
DATAKEY_EVERY_S = 10.0  # how often a leader checks members' keys and plain secrets in the map
SEAL_AT_ONCE = 200  # plain secrets one host_seal command re-seals
RECHECK_S = 600.0  # a member seen holding the keys is asked again after this long


class DataKeyHolder:
    """Mixin of ClusterService: the attributes below are the service's."""

    identity: dict[str, Any] | None
    transport: Any
    driver: Any
    ctx: Any

    if TYPE_CHECKING:  # provided by ClusterService and SecretRotation

        def _save_identity(self, ident: dict[str, Any] | None) -> None: ...

        def _others(self, d: RaftDriver) -> list[int]: ...

        async def _ask_all(
            self, members: list[int], method: str, params: dict[str, Any], timeout: float
        ) -> dict[int, Any]: ...

    _datakey_lock: asyncio.Lock | None = None
    _datakey_at = 0.0
    _datakey_task: asyncio.Task[Any] | None = None
    _datakey_note: str | None = None  # the last reason nothing was re-sealed (logged once)
    _datakey_seen: tuple[Any, set[int]] = (None, set())  # members seen holding the keys

    # --- this member's keys ---
    def data_keys(self) -> datakey.DataKeys:
        return datakey.keys_of(self.identity)

    def _set_data_keys(self, keys: datakey.DataKeys) -> None:
        assert self.identity is not None
        self._save_identity(datakey.with_keys(self.identity, keys))

    def data_key_status(self) -> dict[str, Any]:
        """For `cluster status`: the key ids this member holds (ids only, never a key)."""
        keys = self.data_keys()
        return {"current": keys.current, "held": sorted(keys.keys)}

    # --- the leader's side ---
    async def seal_host_secret(
        self, d: RaftDriver, nqn: str, secret: str, field: str = "dhchap_secret"
    ) -> str:
        """A host secret sealed for the map (the leader, before it proposes `host_add`);
        `field`: which of the host's secrets (dhchap_secret, tls_key)."""
        return datakey.seal(await self.ensure_data_key(d), nqn, secret, field)

    def open_tls_keys(self, hosts: dict[str, Any]) -> dict[str, str]:
        """The hosts' TLS keys opened (the leader: a key given to a second host is refused);
        those that do not open are left out."""
        only = {n: {"tls_key": h.get("tls_key")} for n, h in hosts.items()}
        opened = datakey.open_hosts(only, self.data_keys())
        return {n: h["tls_key"] for n, h in opened.items() if h.get("tls_key")}

    async def ensure_data_key(self, d: RaftDriver) -> datakey.DataKeys:
        """This leader's keys, with a current one: made and handed to every member if missing."""
        keys = self.data_keys()
        if keys.current is not None:
            return keys
        if self._datakey_lock is None:
            self._datakey_lock = asyncio.Lock()
        async with self._datakey_lock:
            keys = self.data_keys()
            if keys.current is not None:
                return keys
            key = os.urandom(datakey.KEY_BYTES)
            # Kept here first, not yet current: a crash now leaves a key nothing is sealed with.
            self._set_data_keys(datakey.add_key(keys, key, current=False))
            new = datakey.add_key(keys, key, current=True)
            failed = await self._stage_keys(self._others(d), new)
            if failed:
                why = "; ".join(f"node {m}: {e}" for m, e in sorted(failed.items()))
                raise OperationFailed(
                    "no cluster data key to seal the host secret with, and not every member took a "
                    f"new one ({why}); nothing was sealed: bring those members back (or remove them) "
                    "and try again",
                    field="dhchap_secret",
                )
            self._set_data_keys(new)
            log.info("cluster data key %s made and held by every member", new.current)
            return new

    async def _stage_keys(self, members: list[int], keys: datakey.DataKeys) -> dict[int, str]:
        """Hand `keys` to `members`; those that did not keep them, with why."""
        if not members:
            return {}
        assert self.identity is not None
        sec = secretroll.keys_of(self.identity)
        params = {
            "under": sec.dial_gen,
            "wrapped": datakey.wrap_keys(datakey.stage_wrapping_key(sec.dial), keys),
        }
        answers = await self._ask_all(members, "cluster.datakey.stage", params, 5.0)
        return {m: _reason(a) for m, a in answers.items() if isinstance(a, BaseException)}

    def maybe_datakey_round(self) -> None:
        """Called by the member's watcher: on the leader, now and then, a datakey_round."""
        d = self.driver
        if d is None or d.role is not StateRole.LEADER or time.monotonic() < self._datakey_at:
            return
        if self._datakey_task is not None and not self._datakey_task.done():
            return
        self._datakey_at = time.monotonic() + DATAKEY_EVERY_S
        self._datakey_task = asyncio.get_running_loop().create_task(self._datakey_round_logged(d))

    async def _datakey_round_logged(self, d: RaftDriver) -> None:
        try:
            note = await self.datakey_round(d)
        except NodeosError as err:
            note = err.message
        if note != self._datakey_note and note:
            log.warning("host secrets: %s", note)
        self._datakey_note = note

    async def datakey_round(self, d: RaftDriver) -> str | None:
        """Members get the keys they lack; plain secrets in the map get sealed once every member
        holds the current key. Returns why something was left undone (None: nothing is)."""
        hosts = d.map.state["hosts"]
        if not any((h or {}).get("dhchap_secret") or (h or {}).get("tls_key") for h in hosts.values()):
            return None
        plain = datakey.plain_hosts(hosts)
        keys = await self.ensure_data_key(d) if plain else self.data_keys()
        if keys.current is None:
            return 'this leader holds no cluster data key (see docs/cluster.md, "Host secrets")'
        # Members seen holding every key are not asked again (a thousand members would cost the
        # leader a hundred requests a second), until the keys change or RECHECK_S has passed.
        mark = (tuple(sorted(keys.keys)), int(time.monotonic() // RECHECK_S))
        if self._datakey_seen[0] != mark:
            self._datakey_seen = (mark, set())
        seen = self._datakey_seen[1]
        members = [m for m in self._others(d) if m not in seen]
        held = await self._ask_all(members, "cluster.datakey.held", {}, 5.0) if members else {}
        lacking = [
            m
            for m, a in held.items()
            if not isinstance(a, BaseException) and set(keys.keys) - set(a.get("held") or [])
        ]
        failed = await self._stage_keys(lacking, keys) if lacking else {}
        for m in lacking:
            if m not in failed:
                log.info("handed cluster data key(s) to node %d, which lacked them", m)
        silent = {m: _reason(a) for m, a in held.items() if isinstance(a, BaseException)} | failed
        seen.update(m for m in held if m not in silent)
        if not plain:
            return None
        if silent:
            why = "; ".join(f"node {m}: {e}" for m, e in sorted(silent.items()))
            return f"{len(plain)} secret(s) left in plain text until every member holds the data key ({why})"
        batch = [
            {
                "nqn": n,
                "added": hosts[n].get("added"),
                "sealed": datakey.seal(keys, n, hosts[n]["dhchap_secret"]),
            }
            for n in plain[:SEAL_AT_ONCE]
        ]
        out = await d.propose(encode_command("host_seal", {"hosts": batch}), 10.0)
        n = out.get("sealed") if isinstance(out, dict) else out
        log.info("sealed %s plain host secret(s) in the map under data key %s", n, keys.current)
        return None

    async def api_test_host_keys(self, params: dict[str, Any]) -> dict[str, Any]:
        """Test-only (NODEOS_TEST_FAULTS=1): what this node's export specs would carry for each
        host, through the node service's own opening of the map (a loopback node has no data
        plane to look at): a SHA-256 of the opened secret, never the secret, or why it failed."""
        d = self.driver
        if d is None:
            raise OperationFailed("this node is not a cluster member", field="cluster")
        node = self.ctx.services.get("node")
        hosts = d.map.state["hosts"]
        opened = node.open_hosts(hosts) if node is not None else datakey.open_hosts(hosts, self.data_keys())

        def digest(value: Any) -> str | None:
            return hashlib.sha256(value.encode()).hexdigest() if value else None

        return {
            nqn: {
                "sha256": digest(h.get("dhchap_secret")),
                "error": h.get("dhchap_error"),
                "tls_sha256": digest(h.get("tls_key")),
                "tls_error": h.get("tls_error"),
            }
            for nqn, h in opened.items()
        }

    # --- a member's side ---
    async def datakey_peer_request(self, frm: int, method: str, params: dict[str, Any]) -> Any:
        if method == "cluster.datakey.held":
            return {"held": sorted(self.data_keys().keys)}
        if method == "cluster.datakey.stage":
            return self._take_keys(frm, params)
        raise BadInput(f"unknown peer method {method!r}", field="method")

    def _take_keys(self, frm: int, params: dict[str, Any]) -> dict[str, Any]:
        under = params.get("under")
        if type(under) is not int:
            raise BadInput("under must be a secret generation", field="under")
        assert self.identity is not None
        secret = secretroll.keys_of(self.identity).secrets.get(under)
        if secret is None:
            raise BadInput(f"this member holds no secret of generation {under}", field="under")
        theirs = datakey.unwrap_keys(datakey.stage_wrapping_key(secret), params.get("wrapped"))
        mine = self.data_keys()
        new = datakey.merge(mine, theirs)
        if new != mine:
            self._set_data_keys(new)
            log.info("node %d handed this member cluster data key(s) %s", frm, ", ".join(sorted(theirs.keys)))
        return {"held": sorted(new.keys)}


def _reason(exc: Any) -> str:
    return exc.message if isinstance(exc, NodeosError) else f"{type(exc).__name__}: {exc}"
