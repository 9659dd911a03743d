"""Rotating the cluster CA: the CA node's procedure and each member's side of it.

Part of ClusterService (nodeos/cluster/service.py); a member's steps are pure, in
nodeos/cluster/caroll.py. `nodeos cluster rotate-ca` runs on any member: that member makes the
new CA and holds its key from then on (the map's `ca.holder`), so a cluster whose CA's node is
lost for good gets a CA again (`cluster remove` of the CA's node does it on the member that ran
it). The new CA is trusted through the existing authenticated, encrypted peer links; no key
travels.

- stage: a new CA key and certificate (generation g+1, kept in `ca-new.key`); every member,
  this one too, gets the new CA certificate (public) and trusts it beside the old one, makes a
  new key (it never leaves the member) and sends a certificate request; the CA's node signs it
  with the new CA and sends the certificate back. Anyone failing: unstaged everywhere, the
  command fails naming it, nothing changed.
- switch: `ca_roll {gen, phase: switch, fp}` committed; each member's watcher presents its new
  certificate (both CAs still trusted) and hands its connections over.
- stable: once every member presents it and has no connection of its old identity left, `ca_roll
  {phase: stable}`; each member trusts only the new CA, whose key replaces the old on the new
  CA's node; a member holding the old CA's key deletes it. Connections whose peer certificate
  came from the old CA are closed.

A member stages one roll at a time (caroll.stage_refusal): two members rotating at once fail,
nothing changed, rather than mix.

Joins and join tokens wait while a roll is under way (the joiner would get the old CA).
Test-only (NODEOS_TEST_FAULTS=1): NODEOS_SECRET_CRASH_FILE's step `ca-switched` kills a member
right after it presents its new certificate, `ca-node-switched` the CA's node once the switch
is committed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from nodeos.cluster import caroll, secretroll, tlsca
from nodeos.errors import BadInput, NodeosError, OperationFailed
from nodeos.storage.lookup import health_of

if TYPE_CHECKING:
    from nodeos.cluster.driver import RaftDriver

log = logging.getLogger("nodeosd.cluster")


class CaRotation:
    """Mixin of ClusterService: the attributes below are the service's."""

    identity: dict[str, Any] | None
    transport: Any
    driver: Any
    tls: tlsca.TlsFiles

    if TYPE_CHECKING:  # provided by ClusterService and its other mixins

        def _drv(self) -> RaftDriver: ...

        def _save_identity(self, ident: dict[str, Any] | None) -> None: ...

        def _secret_crash_point(self, step: str) -> None: ...

        def _others(self, d: RaftDriver) -> list[int]: ...

        async def _ask_all(
            self, members: list[int], method: str, params: dict[str, Any], timeout: float
        ) -> dict[int, Any]: ...

        async def _at_leader(
            self, method: str, params: dict[str, Any], timeout: float, idempotent: bool = False
        ) -> Any: ...

    _ca_lock: asyncio.Lock
    _ca_seen: tuple[str, Any, Any] | None
    ca_problem: str | None = None
    _ca_resume_at = 0.0

    # --- this member's side ---
    def _member_ca(self) -> caroll.MemberCa:
        assert self.identity is not None
        t = self.tls
        new_fp = tlsca.cert_fp(t.ca_new.read_bytes()) if t.ca_new.exists() else None
        ready = (
            new_fp is not None
            and t.key_new.exists()
            and t.cert_new.exists()
            and tlsca.issued_by(t.cert_new.read_bytes(), t.ca_new.read_bytes(), t.key_new.read_bytes())
        )
        # Presenting the new certificate: said so, or already its own (a finish cut short by a crash).
        presenting = bool(self.identity.get("tls_new")) or (
            new_fp is not None and tlsca.issued_by(t.cert.read_bytes(), t.ca_new.read_bytes())
        )
        return caroll.MemberCa(int(self.identity.get("ca_gen", 0)), new_fp, ready, presenting)

    def _ca_identity(self, **fields: Any) -> None:
        assert self.identity is not None
        self._save_identity({**self.identity, **fields})

    def _reload_tls(self) -> None:
        if self.transport is None or not self.tls.present():
            return
        new = bool((self.identity or {}).get("tls_new"))
        self.transport.set_tls(
            self.tls.server_context(new), self.tls.client_context(new), self.tls.trusted_cns()
        )

    def ca_roll_under_way(self) -> bool:
        d = self.driver
        staged = self.tls.ca_new.exists() and self.tls.ca_key_new.exists()
        return staged or (d is not None and secretroll.section_of(d.map.state, "ca")["phase"] == "switch")

    def _reconcile_ca(self) -> None:
        d = self.driver
        if d is None or self.identity is None or not self.tls.present():
            return
        roll = secretroll.section_of(d.map.state, "ca")
        steps, problem = caroll.actions(self._member_ca(), roll)
        if problem != self.ca_problem:
            if problem:
                log.error("%s", problem)
            self.ca_problem = problem
        for step in steps:
            getattr(self, f"_ca_{step}")(roll)

    def _ca_present_new(self, roll: dict[str, Any]) -> None:
        self._ca_identity(tls_new=True)
        self._reload_tls()
        log.info("cluster CA generation %d: presenting this member's new certificate", roll["gen"])
        self._secret_crash_point("ca-switched")

    def _ca_finish(self, roll: dict[str, Any]) -> None:
        # Each write is atomic and each step can run again after a crash (caroll.actions).
        t = self.tls
        if self.identity and self.identity.get("tls_new"):
            t.write("node.key", t.key_new.read_bytes())
            t.write("node.pem", t.cert_new.read_bytes())
            self._ca_identity(tls_new=False)
            t.remove(t.key_new, t.cert_new)
        if t.ca_key_new.exists():
            t.write("ca.key", t.ca_key_new.read_bytes())
            t.remove(t.ca_key_new)
        elif t.ca_key.exists() and not tlsca.key_matches(t.ca_new.read_bytes(), t.ca_key.read_bytes()):
            t.remove(t.ca_key)  # the old CA's key (another member drove the roll): worth nothing now
            log.info("cluster CA generation %d: this member does not hold the CA any more", roll["gen"])
        t.write("ca.pem", t.ca_new.read_bytes())
        self._ca_identity(ca_gen=roll["gen"])
        t.remove(t.ca_new)
        self._reload_tls()
        log.info("cluster CA generation %d: the old CA is not trusted any more", roll["gen"])

    def _ca_cleanup(self, roll: dict[str, Any]) -> None:
        self.tls.remove(self.tls.ca_new)

    async def ca_peer_request(self, frm: int, method: str, params: dict[str, Any]) -> Any:
        self._ca_seen = None  # a peer stages or asks: the watcher looks at the files again
        gen = params.get("gen")
        if type(gen) is not int or gen < 1:
            raise BadInput("gen must be a positive integer", field="gen")
        if method == "cluster.ca.stage":
            return await self._ca_stage_here(gen, params.get("ca"), frm)
        if method == "cluster.ca.cert":
            return self._ca_install_cert(gen, params.get("cert"))
        if method == "cluster.ca.unstage":
            self._ca_unstage(gen, params.get("fp"))
            return {"unstaged": gen}
        if method == "cluster.ca.state":
            self._reconcile_ca()
            m = self._member_ca()
            t = self.transport
            return {
                "presenting": gen if (m.presenting_new or m.gen >= gen) else m.gen,
                "old_connections": t.old_connections() if t is not None else 0,
            }
        raise BadInput(f"unknown peer method {method!r}", field="method")

    async def _ca_stage_here(self, gen: int, ca: Any, frm: int) -> dict[str, Any]:
        # A roll right after another: this member may not have applied the last one's end yet.
        deadline = time.monotonic() + 3.0
        while True:
            self._reconcile_ca()
            m = self._member_ca()
            if gen != m.gen + 2 or time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.05)
        if gen != m.gen + 1 or m.presenting_new:
            raise BadInput(f"CA generation {gen} does not follow this member's ({m.gen})", field="gen")
        if not isinstance(ca, bytes) or not self.tls.present():
            raise BadInput("ca must be a PEM certificate (and this member must use TLS)", field="ca")
        try:
            fp = tlsca.cert_fp(ca)
        except ValueError:
            raise BadInput("ca must be a PEM certificate", field="ca") from None
        assert self.identity is not None
        ident = self.identity
        if m.new_fp is not None:
            age = time.time() - self.tls.ca_new.stat().st_mtime
            d = self._drv()
            by = ident.get("ca_staged_by")
            why = caroll.stage_refusal(m.new_fp, by, age, fp, frm, {d.id, *self._others(d)})
            if why:
                raise BadInput(why, field="cluster")
        key, csr = await asyncio.to_thread(tlsca.make_request, ident["raft_id"], ident["cluster_id"])
        self.tls.write("node-new.key", key)
        self.tls.remove(self.tls.cert_new)
        self._ca_identity(ca_staged_by=frm)
        self.tls.write("ca-new.pem", ca)
        self._reload_tls()  # trust both CAs from now on
        return {"csr": csr}

    def _ca_install_cert(self, gen: int, cert: Any) -> dict[str, Any]:
        t = self.tls
        ok = (
            isinstance(cert, bytes)
            and t.ca_new.exists()
            and t.key_new.exists()
            and tlsca.issued_by(cert, t.ca_new.read_bytes(), t.key_new.read_bytes())
        )
        if not ok:
            raise BadInput("the certificate is not of the new CA for this member's new key", field="cert")
        assert isinstance(cert, bytes)
        t.write("node-new.pem", cert)
        return {"installed": gen}

    def _ca_unstage(self, gen: int, fp: Any = None) -> None:
        m = self._member_ca()
        if m.presenting_new or gen != m.gen + 1:
            return  # the roll went on (or never reached here): nothing to take back
        if fp is not None and m.new_fp != fp:
            return  # staged by another roll (or not at all): not this roller's to take back
        self.tls.remove(self.tls.ca_new, self.tls.key_new, self.tls.cert_new, self.tls.ca_key_new)
        self._reload_tls()

    def ca_holder(self) -> int | None:
        """The member holding the key of the newest cluster CA (None: a map from before it was kept)."""
        d = self.driver
        return None if d is None else secretroll.section_of(d.map.state, "ca").get("holder")

    def ca_status(self) -> dict[str, Any]:
        d = self.driver
        roll = secretroll.section_of(d.map.state, "ca") if d is not None else None
        holder = self.ca_holder()
        warning = None
        if d is not None and holder is not None:
            members = set(d.conf_state.voters) | set(d.conf_state.learners)
            down = health_of(d.map.state, holder) == "down"
            warning = caroll.holder_warning(holder, members, down)
        return {
            "generation": int((self.identity or {}).get("ca_gen", 0)),
            "roll": None if roll is None else {"gen": roll["gen"], "phase": roll["phase"]},
            "holder": holder,
            "problem": self.ca_problem or warning,
        }

    def ca_summary(self) -> dict[str, Any]:
        """For `nodeos status`: where the cluster CA is and, when it cannot sign joins, what to do."""
        st = self.ca_status()
        out: dict[str, Any] = {"ca_holder": st["holder"]}
        if st["problem"]:
            out["warning"] = st["problem"]
        return out

    def _maybe_resume_ca(self) -> None:
        """The CA's node finishes a roll it finds half done (after it was restarted, say)."""
        d = self.driver
        if (
            d is None
            or not self.tls.ca_key_new.exists()  # the roll's new CA is this member's
            or self._ca_lock.locked()
            or time.monotonic() < self._ca_resume_at
        ):
            return
        if secretroll.section_of(d.map.state, "ca")["phase"] != "switch":
            return
        self._ca_resume_at = time.monotonic() + 3.0

        async def resume() -> None:
            try:
                await self.api_rotate_ca({"timeout": 3}, finish_only=True)
            except NodeosError as err:
                log.info("CA roll not finished yet: %s", err.message)

        asyncio.get_running_loop().create_task(resume())

    async def _move_ca_here(self, d: RaftDriver, gone: int) -> dict[str, Any]:
        """The removed member held the cluster CA: a new CA on this member (its key stays here), so
        joins keep working and the removed member's CA is trusted no more."""
        deadline = time.monotonic() + 10.0
        while gone in self._others(d) and time.monotonic() < deadline:  # this member applies the removal
            await asyncio.sleep(0.05)
        try:
            rolled = await self.api_rotate_ca({"timeout": 20})
        except NodeosError as err:
            log.error("the cluster CA did not move here after node %d was removed: %s", gone, err.message)
            return {
                "moved": False,
                "problem": f"{err.message}; no node can join until `nodeos cluster rotate-ca` succeeds "
                "on a member",
            }
        return {"moved": True, "holder": d.id, "generation": rolled["generation"]}

    # --- the member driving a roll ---
    async def api_rotate_ca(self, params: dict[str, Any], finish_only: bool = False) -> dict[str, Any]:
        """`finish_only`: finish a roll under way, start none (this member's map may not have
        applied the end of the roll it drove when it looked: it must not start another)."""
        timeout = secretroll.rotate_timeout(params)
        d = self._drv()
        if not self.tls.present():
            raise BadInput("this member has no TLS identity (a cluster made before TLS)", field="cluster")
        deadline = time.monotonic() + timeout
        async with self._ca_lock:
            roll = secretroll.section_of(d.map.state, "ca")
            if roll["phase"] == "stable" and finish_only:
                return {"generation": roll["gen"], "members": sorted([d.id, *self._others(d)])}
            if roll["phase"] == "stable":
                # This node's map may apply the switch after the leader answered: go by what was committed.
                roll = await self._ca_stage_everywhere(d, roll["gen"] + 1, deadline)
                return await self._ca_finish_roll(d, roll, deadline)
            done = await self._ca_finish_roll(d, roll, deadline)
            holder = self.ca_holder()
            if holder is None or holder in {d.id, *self._others(d)}:
                return done
            # The roll's driver is no longer a member (lost at its switch): its CA's key went with
            # it, so a new CA here.
            log.info(
                "cluster CA generation %d: its node %d is gone; a new CA here", done["generation"], holder
            )
            roll = await self._ca_stage_everywhere(d, done["generation"] + 1, deadline)
            return await self._ca_finish_roll(d, roll, deadline)

    async def _ca_stage_everywhere(self, d: RaftDriver, gen: int, deadline: float) -> dict[str, Any]:
        assert self.identity is not None
        ca_key, ca_cert = await asyncio.to_thread(tlsca.make_ca, self.identity["cluster_id"], gen)
        self.tls.write("ca-new.key", ca_key)
        members = self._others(d)
        left = max(0.5, min(10.0, deadline - time.monotonic()))
        failed: dict[int, BaseException] = {}
        try:
            mine = await self._ca_stage_here(gen, ca_cert, d.id)
            self._ca_install_cert(gen, tlsca.sign_request(ca_key, ca_cert, mine["csr"], d.id))
        except NodeosError as err:
            failed[d.id] = err
        staged = await self._ask_all(members, "cluster.ca.stage", {"gen": gen, "ca": ca_cert}, left)
        certs: dict[int, Any] = {}
        for m, a in staged.items():
            try:
                if isinstance(a, BaseException):
                    raise a
                certs[m] = tlsca.sign_request(ca_key, ca_cert, a["csr"], m)
            except (NodeosError, KeyError, TypeError) as err:
                failed[m] = err
        sent = await asyncio.gather(
            *(
                self.transport.request(m, "cluster.ca.cert", {"gen": gen, "cert": cert}, timeout=left)
                for m, cert in certs.items()
            ),
            return_exceptions=True,
        )
        for m, a in zip(certs, sent, strict=True):
            if isinstance(a, BaseException):
                failed[m] = a
        fp = tlsca.cert_fp(ca_cert)
        if failed:
            took = [m for m in members if m not in failed]
            await self._ask_all(took, "cluster.ca.unstage", {"gen": gen, "fp": fp}, 2.0)
            self._ca_unstage(gen, fp)
            self.tls.remove(self.tls.ca_key_new)
            why = "; ".join(f"node {m}: {getattr(e, 'message', e)}" for m, e in sorted(failed.items()))
            raise OperationFailed(
                f"the cluster CA was not rotated, nothing changed: not every member took a certificate "
                f"of the new CA ({why}); bring those members back (or remove them) and rotate again"
            )
        cmd = {"cmd": "ca_roll", "args": {"gen": gen, "phase": "switch", "fp": fp, "holder": d.id}}
        await self._at_leader("command", cmd, max(0.5, min(10.0, deadline - time.monotonic())))
        log.info("cluster CA generation %d: every member holds a certificate of it; switching", gen)
        self._secret_crash_point("ca-node-switched")
        return {"gen": gen, "phase": "switch", "fp": fp}

    async def _ca_finish_roll(self, d: RaftDriver, roll: dict[str, Any], deadline: float) -> dict[str, Any]:
        gen = roll["gen"]
        while True:
            self._reconcile_ca()
            members = self._others(d)
            left = max(0.5, min(2.0, deadline - time.monotonic()))
            answers = await self._ask_all(members, "cluster.ca.state", {"gen": gen}, left)
            waiting = [
                m
                for m, a in answers.items()
                if isinstance(a, BaseException) or a.get("presenting") != gen or a.get("old_connections")
            ]
            if not self._member_ca().presenting_new and self._member_ca().gen < gen:
                waiting.append(d.id)
            if self.transport is not None and self.transport.old_connections():
                waiting.append(d.id)
            if not waiting:
                break
            if time.monotonic() >= deadline:
                raise OperationFailed(
                    f"the cluster CA generation {gen} is in use, but node(s) "
                    f"{', '.join(map(str, sorted(set(waiting))))} have not confirmed it yet; the old CA "
                    "is still trusted until they do (`cluster rotate-ca` again finishes the rotation)"
                )
            await asyncio.sleep(0.2)
        cmd = {"cmd": "ca_roll", "args": {"gen": gen, "phase": "stable", "fp": roll["fp"]}}
        await self._at_leader("command", cmd, max(0.5, min(10.0, deadline - time.monotonic())))
        self._reconcile_ca()
        log.info("cluster CA rotated to generation %d; the old CA is not trusted", gen)
        return {"generation": gen, "members": sorted([d.id, *self._others(d)])}
