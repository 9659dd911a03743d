"""NVMe-oF exports on the kernel data plane: nvmet subsystems in configfs with their namespace,
allowed hosts (DH-HMAC-CHAP keys), ports, ANA states and the discovery ports' referrals. The
export half of KernelDataPlane (kernel/backend.py), which provides configfs, nvmet and the LVs."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Sequence

from nodeos import tlskey
from nodeos.dataplane.base import AnaState, ExportInfo, ExportSpec, Listener
from nodeos.dataplane.ids import check_nqn, normalize_nguid, normalize_uuid
from nodeos.dataplane.kernel import lvm, tlskeys
from nodeos.dataplane.kernel.configfs import ConfigFs
from nodeos.dataplane.kernel.nvmet import (
    ANCHOR_NQN,
    DEFAULT_ANA_GROUP,
    Nvmet,
    PortAddr,
    discovery_addrs,
    find_port,
)
from nodeos.dataplane.mirror_names import ANA_GROUP_INACCESSIBLE
from nodeos.dataplane.spec_checks import check_ana_state, check_export_spec, check_listener
from nodeos.errors import BadInput, NodeosError, NotFound, NotSupported, OperationFailed

LOG = logging.getLogger("nodeosd.dataplane")
QOS_UNSUPPORTED = "per-volume QoS is not supported by the kernel data plane"


class KernelExports:
    """The export half of KernelDataPlane (which provides _active())."""

    fs: ConfigFs
    nvmet: Nvmet
    lvm: lvm.LvmRunner
    discovery_svcid: str | None
    keyring: tlskeys.Keyring | None = None  # made on the first TLS host (a kernel without TLS never needs it)

    def _tls_key(
        self, nqn: str, host: str, key: str | None, derivation: tlskey.Derivation = "standard"
    ) -> None:
        """The host's TLS PSK on subsystem `nqn` in the .nvme keyring (tlshd finds it there);
        without a key, any it had is invalidated."""
        if key is None and self.keyring is None:
            return
        self.keyring = self.keyring or tlskeys.Keyring()
        if key is None:
            for n in (32, 48):
                self.keyring.drop(tlskeys.identity(host, nqn, n))
                self.keyring.drop_prefix(tlskeys.identity_v1_prefix(host, nqn, n))
            return
        psks = tlskeys.tls_psks(key, host, nqn, derivation)
        for ident, psk in psks:
            self.keyring.put(ident, psk)
        # An old key's names that the new one does not overwrite (a version-1 identity ends in
        # the key's digest; another hash, another version-0 name) are never left usable.
        for n in (32, 48):
            if tlskeys.identity(host, nqn, n) != psks[0][0]:
                self.keyring.drop(tlskeys.identity(host, nqn, n))
            self.keyring.drop_prefix(tlskeys.identity_v1_prefix(host, nqn, n), keep=psks[1][0])

    def _active(self, pool_id: str, lv: lvm.Lv) -> lvm.Lv:
        raise NotImplementedError

    def hold_listeners(self) -> None:
        """A restart's re-export begins: no port listens until release_listeners() (Nvmet.hold_links)."""
        if self.fs.usable():
            self.nvmet.hold_links()

    def release_listeners(self) -> None:
        """Every export the re-export made is reachable now, on its ports at once."""
        self.nvmet.release_links()

    def reapply_exports(self, specs: Sequence[ExportSpec]) -> None:
        """One `lvs` for all of them (not one per export), and no export read back."""
        have = {(lv.vg, lv.name): lv for lv in self.lvm.lvs()} if specs else {}
        first: NodeosError | None = None
        for spec in specs:
            try:
                self._apply(spec, have)
            except NodeosError as e:
                if first is not None:
                    LOG.error("export %s not re-applied: %s", spec.nqn, e.message)
                first = first or e
        if first is not None:
            raise first

    def apply_export(self, spec: ExportSpec) -> ExportInfo:
        return self._export_info(self._apply(spec))

    def _apply(self, spec: ExportSpec, have: dict[tuple[str, str], lvm.Lv] | None = None) -> str:
        """apply_export without the read back; `have`: every LV by (VG, name), listed just now."""
        check_export_spec(spec)
        if spec.qos_iops or spec.qos_mbps:
            raise NotSupported(QOS_UNSUPPORTED, field="qos_iops" if spec.qos_iops else "qos_mbps")
        self.fs.require()
        if spec.device is not None:
            # A mirror or a linear view: the device must be there, it is not ours to make here.
            if not os.path.exists(spec.device):
                raise NotFound(f"device {spec.device} does not exist", field="device")
            if not stat.S_ISBLK(os.stat(spec.device).st_mode):
                # nvmet would serve it through its file backend: the host's writes in a file.
                raise OperationFailed(f"{spec.device} is not a block device", field="device")
            device = spec.device
        else:
            if have is None:
                lv = self.lvm.require(spec.pool_id, spec.vol_id)
            else:
                found = have.get((lvm.vg_name(spec.pool_id), lvm.lv_name(spec.vol_id)))
                if found is None:
                    raise NotFound(f"no volume {spec.vol_id!r} in pool {spec.pool_id!r}", field="vol_id")
                lv = found
            if lv.kind == "snapshot":
                raise BadInput(f"{spec.vol_id!r} is a snapshot; export a clone of it", field="vol_id")
            device = self._active(spec.pool_id, lv).path
        n = self.nvmet
        nqn = spec.nqn
        fresh = not n.has_subsystem(nqn)
        n.ensure_subsystem(nqn, spec.serial, spec.cntlid_min, spec.cntlid_max)
        try:
            n.ensure_namespace(
                nqn,
                device,
                normalize_uuid(spec.uuid),
                normalize_nguid(spec.nguid),
                spec.ana_group,
                spec.ns_enabled,
            )
            # Hosts before ports: a subsystem is never reachable with a stale host list.
            for h in spec.hosts:
                n.ensure_host(h.host_nqn, h.dhchap_key)
                self._tls_key(nqn, h.host_nqn, h.tls_key, tlskey.check_derivation(h.tls_derivation))
                n.allow_host(nqn, h.host_nqn)
            self._drop_hosts(nqn, {h.host_nqn for h in spec.hosts})
            addrs = [PortAddr.of(li) for li in spec.listeners]
            addrs += discovery_addrs(spec.listeners, self.discovery_svcid)
            keep: set[int] = set()
            for a in addrs:
                pid = n.ensure_port(a)
                keep.add(pid)
                n.set_port_ana_state(pid, spec.ana_group, spec.ana_state)
                n.link_port(pid, nqn, a)
            for pid in sorted(n.ports()):
                if pid not in keep and nqn in n.port_subsystems(pid):
                    n.unlink_port(pid, nqn)
                    n.gc_port(pid)
        except Exception:
            if fresh:
                # A first export that failed half-way is taken down again: nothing leaks.
                n.remove_subsystem(nqn)
            raise
        return nqn

    def _drop_hosts(self, nqn: str, keep: set[str]) -> list[str]:
        """Every allowed host not in `keep` loses access, its key and its controllers."""
        n = self.nvmet
        dropped = []
        for host in n.allowed_hosts(nqn):
            if host not in keep:
                self._tls_key(nqn, host, None)
                n.disallow_host(nqn, host)
                n.disconnect_host(nqn, host)
                n.gc_host(host)
                dropped.append(host)
        # A revoked host keeps a live connection until its controllers are dropped; also
        # after a crash between the unlink above and the disconnect.
        for host in sorted({h for _, h in n.controllers(nqn)} - keep):
            n.disconnect_host(nqn, host)
        return dropped

    def revoke_hosts(self, nqn: str, keep: Sequence[str]) -> list[str]:
        check_nqn(nqn)
        if not self.fs.usable() or not self.nvmet.has_subsystem(nqn):
            raise NotFound(f"no export {nqn}", field="nqn")
        return self._drop_hosts(nqn, set(keep))

    def remove_export(self, nqn: str) -> None:
        check_nqn(nqn)
        if self.fs.usable():
            self.nvmet.remove_subsystem(nqn)

    def list_exports(self) -> list[ExportInfo]:
        if not self.fs.usable():
            return []
        return [self._export_info(nqn) for nqn in self.nvmet.subsystems() if nqn != ANCHOR_NQN]

    def export_info(self, nqn: str) -> ExportInfo | None:
        """One export by NQN (no scan of all subsystems); None when absent."""
        check_nqn(nqn)
        return self._export_info(nqn) if self.fs.usable() and self.nvmet.has_subsystem(nqn) else None

    def set_ana_state(self, nqn: str, ana_group: int, state: AnaState) -> None:
        check_nqn(nqn)
        check_ana_state(state)
        if not self.nvmet.has_subsystem(nqn):
            raise NotFound(f"no export {nqn}", field="nqn")
        for pid in sorted(self.nvmet.ports()):
            if nqn in self.nvmet.port_subsystems(pid):
                self.nvmet.set_port_ana_state(pid, ana_group, state)

    def fence_export(self, nqn: str, drop_hosts: bool = False) -> bool:
        """Move the namespace into the inaccessible ANA group (ANA groups are shared by every
        subsystem on a port, so the group's state is never flipped in place): the group is
        made inaccessible on the export's ports first, then the namespace joins it. The hosts'
        controllers are dropped on the way in, and every time with `drop_hosts` (a demote)."""
        check_nqn(nqn)
        if not self.fs.usable() or not self.nvmet.has_subsystem(nqn):
            return False
        grp = ANA_GROUP_INACCESSIBLE
        n = self.nvmet
        already = int(n.namespace(nqn).get("ana_grpid") or DEFAULT_ANA_GROUP) == grp
        ports = {pid: addr for pid, addr in sorted(n.ports().items()) if nqn in n.port_subsystems(pid)}
        for pid in ports:
            n.set_port_ana_state(pid, grp, "inaccessible")
        n.set_namespace_ana_group(nqn, grp)
        if drop_hosts or not already:
            # A write a host sent before the fence may be held here (a replica leg blocks) and
            # complete later on this node's leg alone, after the failover: the host must never
            # see it succeed. Dropping the hosts' controllers (the unlink deletes them, their
            # sockets shut at once) makes each host retry its outstanding I/O on another path;
            # it reconnects here to an inaccessible path. Only on the way in: the re-asserted
            # fence and the fence after the daemon stopped find the group already set. A demote
            # drops them every time: an export made inaccessible by apply_export (a handoff, a
            # fenced node's re-export) kept its hosts' controllers.
            for pid, addr in ports.items():
                n.unlink_port(pid, nqn)
                n.link_port(pid, nqn, addr)
        return True

    def _export_info(self, nqn: str) -> ExportInfo:
        n = self.nvmet
        ns = n.namespace(nqn)
        pool_id = vol_id = None
        dev = ns.get("device_path", "")
        if dev:
            vg, _, lvname = dev.removeprefix("/dev/").partition("/")
            pool_id, vol_id = lvm.pool_id_of(vg), lvm.vol_id_of(lvname)
        grp = int(ns.get("ana_grpid") or DEFAULT_ANA_GROUP)
        listeners: list[Listener] = []
        ana: str | None = None
        for pid, addr in sorted(n.ports().items()):
            if nqn not in n.port_subsystems(pid):
                continue
            if self.discovery_svcid and addr.trsvcid == self.discovery_svcid:
                continue
            listeners.append(addr.listener())
            ana = ana or n.port_ana_state(pid, grp)
        return ExportInfo(
            nqn=nqn,
            pool_id=pool_id,
            vol_id=vol_id,
            listeners=tuple(listeners),
            hosts=tuple(n.allowed_hosts(nqn)),
            ana_state=ana,
            connected_hosts=tuple(sorted({h for _, h in n.controllers(nqn)})),
            device=dev or None,
            ana_group=grp,
        )

    def set_referrals(self, port: Listener, referrals: tuple[Listener, ...]) -> None:
        check_listener(port)
        for r in referrals:
            check_listener(r)
        self.fs.require()
        addr = PortAddr.of(port)
        pid = self.nvmet.ensure_port(addr)
        refs = [PortAddr.of(r) for r in referrals if PortAddr.of(r) != addr]
        self.nvmet.set_referrals(pid, refs)
        # A port that refers hosts on listens whether or not a volume is linked to it.
        self.nvmet.anchor(pid, addr, bool(refs))
        self.nvmet.gc_port(pid)  # no referrals and no subsystem: the port goes again

    def list_referrals(self, port: Listener) -> list[Listener]:
        check_listener(port)
        pid = find_port(self.nvmet.ports(), PortAddr.of(port)) if self.fs.usable() else None
        return [] if pid is None else [a.listener() for _, a in sorted(self.nvmet.referrals(pid).items())]
