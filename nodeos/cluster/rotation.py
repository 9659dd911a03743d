"""Rotating the cluster secret: the leader's procedure and each member's side of it.

Part of ClusterService (nodeos/cluster/service.py); the states and transitions are pure, in
nodeos/cluster/secretroll.py (read its docstring first). `nodeos cluster rotate-secret` on any
member runs `rotate_secret` at the leader:

- stage: a fresh secret, generation g+1, kept durably here first, then sent to every other
  member (`cluster.secret.stage`, wrapped under a key derived from secret g, inside the
  authenticated TLS peer link) and kept durably there. Any member that does not take it
  (down, cut off): unstaged everywhere, the command fails naming it, nothing changed.
- switch: `secret_roll {gen: g+1, phase: switch}` committed; each member's watcher sees it in
  its map and dials with g+1 (accepting both), its idle connections reconnecting with g+1.
- stable: once every member reports g+1 and no connection of g left (`cluster.secret.state`),
  `secret_roll {phase: stable}` is committed and each member drops g.

A leader killed after the switch leaves the roll to the next leader: the watcher of whichever
member leads finishes a roll it finds in phase switch. Secrets are never logged (only their
generations) and never put in the map (only a fingerprint).

Test-only (NODEOS_TEST_FAULTS=1): NODEOS_SECRET_CRASH_FILE names a file whose content is a step
(`staged`: a member, after keeping the new secret, before answering; `switched`: a member,
after it dials with the new one; `leader-switched`: the leader, once the switch is committed;
`ca-switched`, `ca-node-switched`: a CA roll's, see carotation.py);
the daemon exits 137 (as SIGKILL) there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from typing import TYPE_CHECKING, Any

from nodeos.cluster import secretroll
from nodeos.cluster import token as tokens
from nodeos.cluster.map import encode_command
from nodeos.cluster.raft import StateRole
from nodeos.cluster.secretroll import rotate_timeout
from nodeos.errors import BadInput, NodeosError, OperationFailed

if TYPE_CHECKING:
    from nodeos.cluster.driver import RaftDriver

log = logging.getLogger("nodeosd.cluster")
WATCH_S = 0.2  # how often a member compares its keys with the map's roll
CA_RECHECK_S = 5.0  # the CA roll's file checks at least this often, whatever moved
RESUME_EVERY_S = 3.0  # how often a leader retries finishing a roll it found half done


class SecretRotation:
    """Mixin of ClusterService: the attributes below are the service's."""

    identity: dict[str, Any] | None
    transport: Any
    driver: Any
    faults: bool

    if TYPE_CHECKING:  # provided by ClusterService

        def _member(self) -> dict[str, Any]: ...

        def _save_identity(self, ident: dict[str, Any] | None) -> None: ...

        async def _at_leader(
            self, method: str, params: dict[str, Any], timeout: float, idempotent: bool = False
        ) -> Any: ...

        def _reconcile_ca(self) -> None: ...  # CaRotation's: the watcher serves both rolls

        def _maybe_resume_ca(self) -> None: ...

        def maybe_datakey_round(self) -> None: ...  # DataKeyHolder's: the watcher serves it too

    _roll_lock: asyncio.Lock
    secret_problem: str | None = None
    _resume_at = 0.0
    _ca_seen: tuple[str, Any, Any] | None = None  # what the CA watch last acted on
    _ca_recheck_at = 0.0
    _resume_task: asyncio.Task[Any] | None = None

    # --- this member's keys ---
    def _keys(self) -> secretroll.MemberKeys:
        assert self.identity is not None
        return secretroll.keys_of(self.identity)

    def _set_keys(self, keys: secretroll.MemberKeys) -> None:
        """Keep `keys` durably (0600 identity record), then use them."""
        assert self.identity is not None
        self._save_identity(secretroll.with_keys(self.identity, keys))
        if self.transport is not None:
            self.transport.set_keys(keys.dial_gen, keys.secrets)

    def left_behind(self) -> bool:
        """Peers refuse this member's secret as rotated away: it missed a roll (see docs)."""
        return self.transport is not None and self.transport.rotated_away is not None

    def secret_status(self) -> dict[str, Any]:
        keys = self._keys()
        roll = secretroll.section(self.driver.map.state) if self.driver is not None else None
        return {
            "generation": keys.dial_gen,
            "accepted": sorted(keys.secrets),
            "roll": None if roll is None else {"gen": roll["gen"], "phase": roll["phase"]},
            "problem": self.secret_problem or self._left_behind_problem(),
        }

    def _left_behind_problem(self) -> str | None:
        if not self.left_behind():
            return None
        return (
            f"this member missed a rotation of the cluster secret ({self.transport.rotated_away}); "
            "once it is removed (`nodeos cluster remove ID` on a member), join it again with a "
            "fresh token: `nodeos cluster join ADDRESS --token-file FILE`"
        )

    def _secret_crash_point(self, step: str) -> None:
        path = os.environ.get("NODEOS_SECRET_CRASH_FILE")
        if not self.faults or not path:
            return
        with contextlib.suppress(OSError), open(path) as f:
            if f.read().strip() == step:
                log.error("test crash point %s: exiting as if killed", step)
                os._exit(137)

    # --- API (any member) ---
    async def api_rotate_secret(self, params: dict[str, Any]) -> dict[str, Any]:
        self._member()
        timeout = rotate_timeout(params)
        out: dict[str, Any] = await self._at_leader("rotate_secret", {"timeout": timeout}, timeout + 5.0)
        return out

    # --- the leader's procedure ---
    async def lead_rotation(self, d: RaftDriver, params: dict[str, Any], timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + rotate_timeout(params)
        async with self._roll_lock:  # one roll at a time on this leader
            roll = secretroll.section(d.map.state)
            if roll["phase"] == "stable":
                await self._stage_everywhere(d, roll["gen"] + 1, deadline)
                roll = secretroll.section(d.map.state)
            return await self._finish_roll(d, roll, deadline)

    def _others(self, d: RaftDriver) -> list[int]:
        return sorted((set(d.conf_state.voters) | set(d.conf_state.learners)) - {d.id})

    async def _ask_all(
        self, members: list[int], method: str, params: dict[str, Any], timeout: float
    ) -> dict[int, Any]:
        """Each member's answer, or the error it (or its silence) gave."""
        assert self.transport is not None
        res = await asyncio.gather(
            *(self.transport.request(m, method, params, timeout=timeout) for m in members),
            return_exceptions=True,
        )
        return dict(zip(members, res, strict=True))

    async def _stage_everywhere(self, d: RaftDriver, gen: int, deadline: float) -> None:
        keys = self._keys()
        if keys.dial_gen != gen - 1:
            raise OperationFailed(
                f"this leader dials with secret generation {keys.dial_gen} but the map is at {gen - 1}; "
                "nothing changed"
            )
        new = os.urandom(tokens.SECRET_BYTES)
        fp = secretroll.fingerprint(new)
        self._set_keys(secretroll.stage(keys, gen, new))
        members = self._others(d)
        params = {
            "gen": gen,
            "under": keys.dial_gen,
            "fp": fp,
            "wrapped": tokens.wrap_secret(secretroll.wrap_key(keys.dial, gen), new),
        }
        answers = await self._ask_all(members, "cluster.secret.stage", params, self._left(deadline, 10.0))
        failed = {m: a for m, a in answers.items() if isinstance(a, BaseException)}
        if failed:
            # Those that did not answer may hold it staged: harmless (the map never names it, and
            # the next roll replaces it), and asking them again would only wait on them.
            took = [m for m in members if m not in failed]
            await self._ask_all(took, "cluster.secret.unstage", {"gen": gen}, 2.0)
            self._set_keys(secretroll.unstage(self._keys(), gen))
            why = "; ".join(f"node {m}: {_reason(e)}" for m, e in sorted(failed.items()))
            raise OperationFailed(
                f"the cluster secret was not rotated, nothing changed: not every member took the new "
                f"secret ({why}); bring those members back (or remove them) and rotate again"
            )
        await d.propose(
            encode_command("secret_roll", {"gen": gen, "phase": "switch", "fp": fp}),
            self._left(deadline, 10.0),
        )
        log.info("cluster secret generation %d staged on every member; switching to it", gen)
        self._secret_crash_point("leader-switched")

    async def _finish_roll(self, d: RaftDriver, roll: dict[str, Any], deadline: float) -> dict[str, Any]:
        gen = roll["gen"]
        while True:
            self._reconcile_keys()  # the leader itself first: no need to wait for its watcher
            members = self._others(d)
            answers = await self._ask_all(members, "cluster.secret.state", {}, self._left(deadline, 2.0))
            waiting = [
                m
                for m, a in answers.items()
                if isinstance(a, BaseException) or a.get("generation") != gen or a.get("old_connections")
            ]
            if self.transport is not None and self.transport.old_connections():
                waiting.append(d.id)
            if not waiting:
                break
            if time.monotonic() >= deadline:
                raise OperationFailed(
                    f"the cluster secret generation {gen} is in use, but node(s) "
                    f"{', '.join(map(str, sorted(waiting)))} have not confirmed it yet; the old one is "
                    "still accepted until they do (the leader finishes the rotation when they come "
                    "back; `cluster rotate-secret` again waits for it)"
                )
            await asyncio.sleep(0.2)
        await d.propose(
            encode_command("secret_roll", {"gen": gen, "phase": "stable", "fp": roll["fp"]}),
            self._left(deadline, 10.0),
        )
        self._reconcile_keys()
        log.info("cluster secret rotated to generation %d; the old one is refused", gen)
        return {"generation": gen, "members": sorted([d.id, *self._others(d)])}

    @staticmethod
    def _left(deadline: float, cap: float) -> float:
        return max(0.5, min(cap, deadline - time.monotonic()))

    # --- a member's side ---
    async def secret_peer_request(self, frm: int, method: str, params: dict[str, Any]) -> Any:
        if method == "cluster.secret.stage":
            return self._stage_here(frm, params)
        if method == "cluster.secret.unstage":
            gen = params.get("gen")
            if type(gen) is not int:
                raise BadInput("gen must be an integer", field="gen")
            self._set_keys(secretroll.unstage(self._keys(), gen))
            return {"unstaged": gen}
        if method == "cluster.secret.state":
            self._reconcile_keys()
            t = self.transport
            return {
                "generation": self._keys().dial_gen,
                "old_connections": t.old_connections() if t is not None else 0,
            }
        raise BadInput(f"unknown peer method {method!r}", field="method")

    def _stage_here(self, frm: int, params: dict[str, Any]) -> dict[str, Any]:
        gen, under, fp = params.get("gen"), params.get("under"), params.get("fp")
        if type(gen) is not int or type(under) is not int or not isinstance(fp, bytes):
            raise BadInput("stage needs int gen and under, and bytes fp", field="gen")
        keys = self._keys()
        old = keys.secrets.get(under)
        if old is None:
            raise BadInput(f"this member holds no secret of generation {under}", field="under")
        new = tokens.unwrap_secret(secretroll.wrap_key(old, gen), params.get("wrapped"))
        if secretroll.fingerprint(new) != fp:
            raise BadInput("the new secret does not match its fingerprint", field="wrapped")
        self._set_keys(secretroll.stage(keys, gen, new))
        log.info("node %d handed this member cluster secret generation %d (accepted now)", frm, gen)
        self._secret_crash_point("staged")
        return {"staged": gen}

    def _reconcile_keys(self) -> None:
        d = self.driver
        if d is None or self.identity is None:
            return
        roll = secretroll.section(d.map.state)
        keys = self._keys()
        new, problem = secretroll.reconcile(keys, roll)
        if problem != self.secret_problem:
            if problem:
                log.error("%s", problem)
            self.secret_problem = problem
        if new != keys:
            self._set_keys(new)
            log.info(
                "cluster secret: dialling with generation %d, accepting %s",
                new.dial_gen,
                ", ".join(map(str, sorted(new.secrets))),
            )
            self._secret_crash_point("switched")

    async def _watch_secret(self) -> None:
        """Bring this member's keys to the map's roll; a leader finishes a roll left half done."""
        while True:
            await asyncio.sleep(WATCH_S)
            try:
                self._reconcile_keys()
                self._maybe_resume()
                self._watch_ca()
                self.maybe_datakey_round()
            except Exception:
                log.exception("secret roll watcher")

    def _watch_ca(self) -> None:
        """The CA roll's member side reads certificate files: only when the map's roll or this
        member's CA record moved, a peer staged something, or CA_RECHECK_S passed. At every
        WATCH_S tick those reads were a fifth of a loaded lab leader's event loop (TCG)."""
        d = self.driver
        if d is None or self.identity is None:
            return
        seen = (
            repr(secretroll.section_of(d.map.state, "ca")),
            self.identity.get("ca_gen"),
            self.identity.get("tls_new"),
        )
        now = time.monotonic()
        if seen == self._ca_seen and now < self._ca_recheck_at:
            return
        self._reconcile_ca()
        self._maybe_resume_ca()
        if self.identity is not None:  # its own steps move the record: seen again at the next tick
            self._ca_seen = seen
        self._ca_recheck_at = now + CA_RECHECK_S

    def _maybe_resume(self) -> None:
        d = self.driver
        if d is None or d.role is not StateRole.LEADER or self._roll_lock.locked():
            return
        if secretroll.section(d.map.state)["phase"] != "switch" or time.monotonic() < self._resume_at:
            return
        if self._resume_task is not None and not self._resume_task.done():
            return
        self._resume_at = time.monotonic() + RESUME_EVERY_S
        self._resume_task = asyncio.get_running_loop().create_task(self._resume(d))

    async def _resume(self, d: RaftDriver) -> None:
        try:
            await self.lead_rotation(d, {"timeout": RESUME_EVERY_S}, RESUME_EVERY_S)
        except NodeosError as err:
            log.info("secret roll not finished yet: %s", err.message)


def _reason(exc: BaseException) -> str:
    return exc.message if isinstance(exc, NodeosError) else f"{type(exc).__name__}: {exc}"
