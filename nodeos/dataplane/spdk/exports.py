"""NVMe-oF exports on the SPDK data plane: one subsystem per exported volume (or mirror, or a
secondary's stand-in) with namespace 1, its hosts (DH-HMAC-CHAP keys in SPDK's keyring), listeners
and their ANA states, QoS limits on the bdev, and the discovery subsystem's listeners. The export
half of SpdkDataPlane (spdk/backend.py), which provides the RPC, the volumes and the transports.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nodeos.dataplane.base import AnaState, ExportInfo, ExportSpec, Listener
from nodeos.dataplane.ids import check_nqn, normalize_nguid, normalize_uuid
from nodeos.dataplane.mirror_names import check_mirror_id
from nodeos.dataplane.spdk import parse
from nodeos.dataplane.spdk import requests as rq
from nodeos.dataplane.spdk.client import SpdkRpc, SpdkRpcError
from nodeos.dataplane.spdk.errors import map_error
from nodeos.dataplane.spdk.freeze import home_group, is_freeze_group
from nodeos.dataplane.spdk.mirror import SpdkMirrors
from nodeos.dataplane.spdk.mirror_plan import is_stand_in, raid_of
from nodeos.dataplane.spdk.names import LVS_PREFIX, alias
from nodeos.dataplane.spdk.tls import PskTable, Table
from nodeos.dataplane.spec_checks import check_ana_state, check_export_spec
from nodeos.errors import AlreadyExists, BadInput, NodeosError, NotFound, NotSupported, OperationFailed

MODEL = "nodeos volume"
UNSENT = object()  # a request _send_rounds did not send (its plan failed before it)


class SpdkExports(SpdkMirrors):
    """The export half of SpdkDataPlane (which provides _require() and ensure_transports())."""

    rpc: SpdkRpc
    keys_dir: Path
    discovery_svcid: str | None
    transport_errors: dict[str, str]
    _transports_checked_on: int | None
    front_ends: dict[str, str]
    _discovery_on: tuple[int, set[Listener]]  # discovery listeners made, and on which connection
    _queue: list[rq.Request] | None = None  # a re-export's planned changes of one export
    _psks: PskTable | None = None  # hosts' TLS PSK key names (spdk/tls.py)

    def _require(self, pool_id: str, vol_id: str, field: str = "vol_id") -> dict[str, Any]:
        raise NotImplementedError

    def ensure_transports(self) -> dict[str, str]:
        raise NotImplementedError

    def _subsystem(self, nqn: str) -> dict[str, Any] | None:
        found = self._maybe(rq.get_subsystems(nqn))
        return next((s for s in found or [] if s.get("nqn") == nqn), None)

    def _key_name(self, host: str, key: str) -> str:
        # Named by host and secret, so a changed secret is a new key and the old one can go.
        return "nodeos-" + hashlib.sha256(f"{host}\0{key}".encode()).hexdigest()[:20]

    def _ensure_key(self, host: str, key: str) -> str:
        name = self._key_name(host, key)
        path = self.keys_dir / name
        if not path.exists():
            self.keys_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, key.encode())
            finally:
                os.close(fd)
        with contextlib.suppress(AlreadyExists):
            self.call(rq.keyring_add(name, str(path)))
        return name

    def _psk_table(self) -> Table:
        self._psks = self._psks or PskTable()
        return self._psks.get(self.rpc.connections, lambda: self._maybe(rq.get_config("nvmf")))

    def apply_export(self, spec: ExportSpec) -> ExportInfo:
        if not spec.ns_enabled:
            # Only a grow withholds a namespace (a lagging secondary's front end), and SPDK's
            # mirrors do not grow (SPDK_MIRROR_CAPS.grow is False): never asked here.
            raise NotSupported(
                "a withheld namespace (the SPDK data plane does not grow mirrors)", field="ns_enabled"
            )
        info = self._apply_export(spec, None)
        assert info is not None
        return info

    def revoke_hosts(self, nqn: str, keep: Sequence[str]) -> list[str]:
        check_nqn(nqn)
        sub = self._subsystem(nqn)
        if sub is None:
            raise NotFound(f"no export {nqn}", field="nqn")
        dropped = sorted(set(parse.subsystem_hosts(sub)) - set(keep))
        for host in dropped:
            self.call(rq.remove_host(nqn, host))  # SPDK disconnects the host's controllers
            if self._psks is not None:
                self._psk_table().pop((nqn, host), None)
        return dropped

    def _plan_new_export(self, spec: ExportSpec) -> tuple[list[rq.Request], ExportInfo | None]:
        """The requests that export a volume create_volumes is about to make (no subsystem yet,
        nothing to read), and the export they make; none for a mirror's export."""
        if spec.device is not None:
            return [], None
        a = alias(spec.pool_id, spec.vol_id)
        self._queue = []
        try:
            # Named by its alias until SPDK answers its UUID: the ExportInfo only takes the pool
            # and volume from it.
            info = self._apply_export(spec, None, new_lvol={"name": a, "aliases": [a]})
            return self._queue, info
        finally:
            self._queue = None

    def _send_rounds(
        self, plans: Sequence[list[list[rq.Request]]], after_first: Callable[[], None] | None = None
    ) -> list[list[Any]]:
        """Each plan's rounds in order, the plans side by side: round k of every plan pipelined
        together (SPDK answers what it read in one poll; a round's requests must not need each
        other's answers). A plan whose request failed sends no more. `after_first` runs once the
        first round was answered. Returned: per plan, each request's answer (in the order of its
        rounds), its SpdkRpcError, or UNSENT."""
        out: list[list[Any]] = [[UNSENT] * sum(map(len, p)) for p in plans]
        stopped: set[int] = set()
        for k in range(max(map(len, plans), default=0)):
            going: list[tuple[int, int, rq.Request]] = []  # plan, index of the request in it, request
            for n, p in enumerate(plans):
                if n not in stopped and len(p) > k:
                    base = sum(map(len, p[:k]))
                    going += [(n, base + j, req) for j, req in enumerate(p[k])]
            for (n, j, _), res in zip(going, self.rpc.call_many([req for *_, req in going]), strict=True):
                out[n][j] = res
                if isinstance(res, SpdkRpcError):
                    stopped.add(n)
            if k == 0 and after_first is not None:
                after_first()
        return out

    def reapply_exports(self, specs: Sequence[ExportSpec]) -> None:
        """A restart's re-export (nodeosd's, or the target's): the bdevs and subsystems listed once
        for all of them; each export's changes are planned against the listing (an unchanged one
        needs only its ANA state, a vanished one is made again), then sent in waves (_send_rounds;
        SPDK answers an RPC at its next 4 ms poll: one at a time, every request costs ~8 ms;
        10,000 volumes were ~320 s)."""
        if not specs:
            return
        bdevs: dict[str, dict[str, Any]] = {}
        for b in self.call(rq.get_bdevs()) or []:
            for key in (b.get("name"), *(b.get("aliases") or [])):
                bdevs[str(key)] = b
        subs = {str(x.get("nqn")): x for x in self.call(rq.get_subsystems()) or []}
        plans: list[tuple[ExportSpec, list[rq.Request]]] = []
        failed: dict[str, NodeosError] = {}  # one export's trouble does not hold up the others
        try:
            for spec in specs:
                self._queue = []
                try:
                    self._apply_export(spec, (bdevs, subs))
                except NodeosError as e:
                    failed[spec.nqn] = e
                    continue
                plans.append((spec, self._queue))
        finally:
            self._queue = None
        for (spec, _), res in zip(
            plans, self._send_rounds([[[req] for req in q] for _, q in plans]), strict=True
        ):
            err = next((r for r in res if isinstance(r, SpdkRpcError)), None)
            if err is not None:
                failed[spec.nqn] = map_error(err.method, err.params, err.code, err.message)
        if failed:
            if self._psks is not None:
                self._psks.forget()
            sent = {spec.nqn for spec, q in plans if q}
            for nqn in failed:
                if nqn in sent and nqn not in subs:
                    self._maybe(rq.delete_subsystem(nqn))  # nothing half-made is left behind
            raise next(iter(failed.values()))  # the first; the others were made meanwhile

    def _send(self, req: rq.Request) -> None:
        """A change: sent now, or planned into its export's requests (reapply_exports)."""
        if self._queue is not None:
            self._queue.append(req)
        else:
            self.call(req)

    def _apply_export(
        self,
        spec: ExportSpec,
        listed: tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]] | None,
        new_lvol: dict[str, Any] | None = None,
    ) -> ExportInfo | None:
        """apply_export; with `listed` (bdevs by name and alias, subsystems by NQN, as listed just
        now) nothing is looked up again and nothing is read back (None); `new_lvol`: the volume's
        lvol as made just now (no QoS limit, no subsystem yet: nothing is read)."""
        mirror = spec.device is not None
        check_export_spec(dataclasses.replace(spec, device=None))  # here a device is a mirror's bdev
        stand_in = mirror and is_stand_in(str(spec.device))
        if stand_in and spec.ana_state != "inaccessible":
            raise NotSupported(
                f"{spec.device} stands in for a secondary's front end: it is exported ANA inaccessible only",
                field="ana_state",
            )
        if (
            mirror
            and not stand_in
            and not raid_of(self._mirror_bdev(check_mirror_id(str(spec.device), "device")))
        ):
            raise NotSupported("SPDK exports lvols, its mirrors and stand-ins only", field="device")
        if spec.ana_state not in rq.ANA_TO_SPDK:
            raise NotSupported(
                f"ANA state {spec.ana_state!r} is not supported by the SPDK data plane",
                field="ana_state",
                allowed=sorted(rq.ANA_TO_SPDK),
            )
        iops, mbps = rq.check_qos(spec.qos_iops, spec.qos_mbps)
        bdev = str(spec.device) if mirror else alias(spec.pool_id, spec.vol_id)
        made = None if mirror else new_lvol
        b = made or (listed[0].get(bdev) if listed else None)
        b = b or (self._mirror_bdev(bdev) if mirror else self._require(spec.pool_id, spec.vol_id))
        if (parse.bdev_lvol(b) or {}).get("snapshot"):
            raise BadInput(f"{spec.vol_id!r} is a snapshot; export a clone of it", field="vol_id")
        limits = b.get("assigned_rate_limits") or {}
        if (int(limits.get("rw_ios_per_sec", 0)), int(limits.get("rw_mbytes_per_sec", 0))) != (iops, mbps):
            self._send(rq.set_qos_limit(bdev, iops, mbps))
        for li in spec.listeners:
            if li.trtype in self.transport_errors or self._transports_checked_on != self.rpc.connections:
                self.ensure_transports()
            if li.trtype in self.transport_errors:
                raise NotSupported(
                    f"cannot listen on {li.trtype}: {self.transport_errors[li.trtype]}", field="listeners"
                )
        nqn = spec.nqn
        # A volume made just now has no subsystem yet: made at once, looked for only if refused.
        sub = None if made else listed[1].get(nqn) if listed else self._subsystem(nqn)
        fresh = sub is None
        if sub is None:
            try:
                self._send(
                    rq.create_subsystem(
                        nqn,
                        spec.serial,
                        MODEL,
                        allow_any_host=False,
                        ana_reporting=True,
                        min_cntlid=spec.cntlid_min,
                        max_cntlid=spec.cntlid_max,
                    )
                )
                sub = {"nqn": nqn, "namespaces": [], "hosts": [], "listen_addresses": []}
            except OperationFailed:
                sub = self._subsystem(nqn) if made else None
                if sub is None:
                    raise
                fresh = False
        if mirror and not stand_in:
            self.front_ends[bdev] = nqn
        try:
            changed = self._apply_into(spec, sub, bdev, str(b.get("name")))
        except Exception:
            if self._psks is not None:
                self._psks.forget()  # a PSK change may or may not have been made
            if fresh:
                self._maybe(rq.delete_subsystem(nqn))  # nothing half-made is left behind
            raise
        if listed:
            return None
        if fresh:  # made from nothing by this call: all of it is what was just set, no read back
            hosts = {
                h.host_nqn: self._key_name(h.host_nqn, h.dhchap_key) if h.dhchap_key else None
                for h in spec.hosts
            }
            after = parse.made_subsystem(nqn, str(b.get("name")), spec.ana_group, spec.listeners, hosts)
        else:
            after = self._subsystem(nqn) if changed else sub  # read back what changed
        if after is None:
            raise NotFound(f"no export {nqn}", field="nqn")
        if mirror:
            return self._info_from(after)
        # What this call set needs no reading back: the lvol behind the namespace, the ANA state.
        ana = spec.ana_state if spec.listeners else None
        return self._info_from(after, known=(str(b.get("name")), bdev), ana=ana, fresh=fresh)

    def _apply_into(self, spec: ExportSpec, sub: dict[str, Any], bdev: str, bdev_name: str) -> bool:
        """Make `sub` what `spec` asks for; whether the subsystem changed (namespace, hosts,
        listeners). `bdev_name`: `bdev`'s own name (an lvol's UUID), as namespaces name it."""
        nqn = spec.nqn
        changed = False
        ns = parse.subsystem_ns1(sub)
        uuid, nguid = normalize_uuid(spec.uuid), normalize_nguid(spec.nguid)
        want_ns = (uuid, nguid, spec.ana_group)
        group = int((ns or {}).get("anagrpid", 1))  # a frozen namespace stays frozen (spdk/freeze.py)
        if ns is not None:
            have = (str(ns.get("uuid", "")).lower(), str(ns.get("nguid", "")).lower(), home_group(group))
            same_bdev = bdev in (ns.get("bdev_name"), ns.get("name")) or ns.get("bdev_name") == bdev_name
            if have != want_ns or not same_bdev:
                self._send(rq.remove_ns(nqn, 1))
                ns, group = None, spec.ana_group
        if ns is None:
            self._send(rq.add_ns(nqn, bdev, 1, uuid=uuid, nguid=nguid, anagrpid=spec.ana_group))
            changed = True
        # Hosts before listeners: the subsystem is never reachable with a stale host list.
        have_hosts = parse.subsystem_hosts(sub)
        compat = sorted(h.host_nqn for h in spec.hosts if h.tls_key and h.tls_derivation != "standard")
        if compat:
            # SPDK derives the standard TLS PSK itself: such a host's handshake could never succeed.
            raise OperationFailed(
                f"host {compat[0]} derives its TLS PSK the compat way (older nvme-cli), which SPDK "
                "cannot serve: upgrade the host's nvme-cli and set `nodeos host update "
                f"{compat[0]} --tls-derivation standard`",
                field="tls_derivation",
            )
        psks = self._psk_table() if have_hosts or any(h.tls_key for h in spec.hosts) else {}
        for h in spec.hosts:
            key = self._ensure_key(h.host_nqn, h.dhchap_key) if h.dhchap_key else None
            psk = self._ensure_key(h.host_nqn, h.tls_key) if h.tls_key else None
            have = (have_hosts.get(h.host_nqn), psks.get((nqn, h.host_nqn)))
            if h.host_nqn in have_hosts and have != (key, psk):
                self._send(rq.remove_host(nqn, h.host_nqn))
                del have_hosts[h.host_nqn]
                psks.pop((nqn, h.host_nqn), None)
            if h.host_nqn not in have_hosts:
                self._send(rq.add_host(nqn, h.host_nqn, key, psk))
                if psk:
                    psks[(nqn, h.host_nqn)] = psk
                changed = True
        wanted = {h.host_nqn for h in spec.hosts}
        for host in have_hosts:
            if host not in wanted:
                self._send(rq.remove_host(nqn, host))  # SPDK disconnects the host's controllers
                psks.pop((nqn, host), None)
                changed = True
        have_l = {parse.listener_of(a) for a in sub.get("listen_addresses") or []}
        for li in spec.listeners:
            if _norm(li) not in have_l:  # in the wanted ANA state from the start, in every group
                self._send(rq.add_listener(nqn, li, spec.ana_state))
                changed = True
            else:
                self._send(rq.set_ana_state(nqn, li, spec.ana_state, spec.ana_group))
            if is_freeze_group(group):  # a listener added while frozen holds the writes too
                self._send(rq.set_ana_state(nqn, li, "inaccessible", group))
        for li in have_l - {_norm(x) for x in spec.listeners}:
            self._send(rq.remove_listener(nqn, li))
            changed = True
        self._ensure_discovery(spec.listeners)
        return changed

    def _ensure_discovery(self, listeners: tuple[Listener, ...]) -> None:
        """SPDK's discovery subsystem lists, per host, only the subsystems it may see."""
        if not self.discovery_svcid:
            return
        want = {
            Listener(trtype=li.trtype, traddr=li.traddr, trsvcid=self.discovery_svcid, adrfam=li.adrfam)
            for li in listeners
        }
        on, made = self._discovery_on
        if on == self.rpc.connections and want <= made:
            return  # made on this connection (a restarted target is reached on a new one)
        have = {
            parse.listener_of(x.get("address") or {})
            for x in self._maybe(rq.get_listeners(rq.DISCOVERY_NQN)) or []
        }
        for d in sorted(want - have, key=str):
            self.call(rq.add_listener(rq.DISCOVERY_NQN, d))
        self._discovery_on = (self.rpc.connections, (made if on == self.rpc.connections else set()) | want)

    def list_referrals(self, port: Listener) -> list[Listener]:
        """SPDK's referrals belong to its discovery subsystem, not to one port: the same on
        every discovery listener (`port` only names one of them)."""
        return sorted(
            (parse.listener_of(r.get("address") or {}) for r in self._maybe(rq.get_referrals()) or []),
            key=str,
        )

    def set_referrals(self, port: Listener, referrals: tuple[Listener, ...]) -> None:
        """The target's discovery log page refers to exactly `referrals` among those of the
        port's transport (SPDK's are the discovery subsystem's: TCP's and RDMA's are set apart)."""
        want = {_norm(r) for r in referrals if r.trtype == port.trtype}
        have = {r for r in self.list_referrals(port) if r.trtype == port.trtype}
        for r in sorted(want - have, key=str):
            self.call(rq.add_referral(r))
        for r in sorted(have - want, key=str):
            self.call(rq.remove_referral(r))

    def remove_export(self, nqn: str) -> None:
        check_nqn(nqn)
        if self._subsystem(nqn) is not None:
            self.call(rq.delete_subsystem(nqn))

    def export_info(self, nqn: str) -> ExportInfo | None:
        check_nqn(nqn)
        return self._export_info(nqn) if self._subsystem(nqn) else None

    def list_exports(self) -> list[ExportInfo]:
        """Two listings whatever the count: the subsystems, then the bdevs (not one lookup per
        namespace). Without the ANA state and the connected hosts (None, ()): those cost two
        RPCs per subsystem (10,000 volumes: 20,000 RPCs, ~160 s on an interrupt-mode target)
        and no caller of the listing (re-export, orphan scan, stop fence) uses them;
        export_info(nqn) has them."""
        subs = [s for s in self.call(rq.get_subsystems()) or [] if s.get("subtype") == "NVMe"]
        bdevs = {str(b.get("name")): b for b in (self.call(rq.get_bdevs()) or []) if subs}
        return [self._info_from(s, bdevs=bdevs, listed=True) for s in subs]

    def _export_info(self, nqn: str) -> ExportInfo:
        sub = self._subsystem(nqn)
        if sub is None:
            raise NotFound(f"no export {nqn}", field="nqn")
        return self._info_from(sub)

    def _info_from(
        self,
        sub: dict[str, Any],
        known: tuple[str, str] | None = None,
        ana: str | None = None,
        fresh: bool = False,
        bdevs: dict[str, dict[str, Any]] | None = None,
        listed: bool = False,
    ) -> ExportInfo:
        """The export as SPDK shows it. Known to the caller, not asked again: `known` the lvol
        (bdev name, alias) apply_export put in it, `ana` the state it set, `fresh` no host can
        have connected yet; `bdevs` every bdev by name (list_exports). `listed`: only what the
        subsystem listing shows (no ANA state, no connected hosts)."""
        nqn = str(sub["nqn"])
        ns = parse.subsystem_ns1(sub) or {}
        pool_id = vol_id = None
        if known is not None and ns.get("bdev_name") in known:
            b: list[dict[str, Any]] | None = [{"name": known[0], "aliases": [known[1]]}]
        elif bdevs is not None:
            found = bdevs.get(str(ns.get("bdev_name")))
            b = [found] if found else None
        else:
            b = self._maybe(rq.get_bdevs(str(ns["bdev_name"]))) if ns.get("bdev_name") else None
        a = parse.lvol_alias(b[0]) if b else None
        if a and a.startswith(LVS_PREFIX):
            lvs, _, vol_id = a.partition("/")
            pool_id = lvs[len(LVS_PREFIX) :]
        grp = home_group(int(ns.get("anagrpid", 1)))  # a freeze is not a state of the export
        listeners = tuple(parse.listener_of(x) for x in sub.get("listen_addresses") or [])
        if ana is None and listeners and not listed:
            for entry in self._maybe(rq.get_listeners(nqn)) or []:
                ana = ana or parse.listener_ana(entry, grp)
        ctrls = [] if fresh or listed else self._maybe(rq.get_controllers(nqn)) or []
        return ExportInfo(
            nqn=nqn,
            pool_id=pool_id,
            vol_id=vol_id,
            listeners=listeners,
            hosts=tuple(parse.subsystem_hosts(sub)),
            ana_state=ana,
            connected_hosts=tuple(sorted({str(c.get("hostnqn")) for c in ctrls if c.get("hostnqn")})),
            device=str(ns["bdev_name"])
            if ns.get("bdev_name") and b and (raid_of(b[0]) or is_stand_in(str(ns["bdev_name"])))
            else None,
        )

    def set_ana_state(self, nqn: str, ana_group: int, state: AnaState) -> None:
        check_nqn(nqn)
        check_ana_state(state)
        if state not in rq.ANA_TO_SPDK:
            raise NotSupported(
                f"ANA state {state!r} is not supported by the SPDK data plane",
                field="ana_state",
                allowed=sorted(rq.ANA_TO_SPDK),
            )
        sub = self._subsystem(nqn)
        if sub is None:
            raise NotFound(f"no export {nqn}", field="nqn")
        for a in sub.get("listen_addresses") or []:
            self.call(rq.set_ana_state(nqn, parse.listener_of(a), state, ana_group))

    def fence_export(self, nqn: str, drop_hosts: bool = False) -> bool:
        """SPDK keeps ANA states per subsystem and listener: the namespace's own group goes
        inaccessible on each of the subsystem's listeners (no other subsystem is touched).
        `drop_hosts` (a demote): then every host with a controller is removed and added back with
        its key: SPDK has no RPC that only disconnects, and removing a host disconnects its
        controllers (an I/O they had in flight is never answered to it: its host retries it on
        another path); added back at once, it may reconnect, to an inaccessible path."""
        check_nqn(nqn)
        sub = self._subsystem(nqn)
        if sub is None:
            return False
        grp = int((parse.subsystem_ns1(sub) or {}).get("anagrpid", 1))
        for a in sub.get("listen_addresses") or []:
            # the home group too while frozen (spdk/freeze.py): a thaw lands in a fenced group
            for g in sorted({grp, home_group(grp)}):
                self.call(rq.set_ana_state(nqn, parse.listener_of(a), "inaccessible", g))
        if drop_hosts:
            connected = {str(c.get("hostnqn")) for c in self._maybe(rq.get_controllers(nqn)) or []}
            psks = self._psk_table()
            for host, key in parse.subsystem_hosts(sub).items():
                if host in connected:
                    self.call(rq.remove_host(nqn, host))
                    self.call(rq.add_host(nqn, host, key, psks.get((nqn, host))))
        return True


def _norm(li: Listener) -> Listener:
    return Listener(trtype=li.trtype, traddr=li.traddr, trsvcid=str(li.trsvcid), adrfam=li.adrfam)
