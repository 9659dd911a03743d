"""nvmet configfs layout and the operations on it.

Layout (kernel 6.12): subsystems/<nqn>/{attr_*, allowed_hosts/<hostnqn> -> hosts/<hostnqn>,
namespaces/<nsid>/{device_path, device_uuid, device_nguid, ana_grpid, enable, revalidate_size}},
ports/<id>/{addr_*, subsystems/<nqn> -> subsystems/<nqn>, ana_groups/<grp>/ana_state} (the TLS
port: addr_tsas tls1.3, addr_treq required; hosts' PSKs are in the .nvme keyring: tlskeys.py),
hosts/<hostnqn>/{dhchap_key, dhchap_ctrl_key, dhchap_hash, dhchap_dhgroup}.

The pure helpers at the top decide (which port serves a listener, which id a new port
gets, what the ANA state is called); `Nvmet` carries the decisions out through ConfigFs.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from nodeos.dataplane.base import Listener, is_tls
from nodeos.dataplane.kernel.configfs import ConfigFs
from nodeos.errors import EnvironmentProblem, NodeosError, OperationFailed

LOG = logging.getLogger("nodeosd.dataplane")

NSID = 1
DEFAULT_ANA_GROUP = 1  # every port has ana_groups/1; other groups are made on demand
MAX_PORT_ID = 0xFFFE
DEBUGFS_NVMET = Path("/sys/kernel/debug/nvmet")
# nvmet listens on a port only while a subsystem is linked to it, so a node that exported nothing
# (new, drained, or its volumes moved away) answered no discovery at all: a host's persistent
# discovery controller to it was refused and, after its loss timeout, gone for good. This
# subsystem keeps a discovery port listening. No host may use it (no namespace, no allowed host,
# allow_any_host 0): it is in no host's discovery log and a connect to it is refused.
ANCHOR_NQN = "nqn.2014-08.io.nodeos:discovery-anchor"
ANCHOR_SERIAL = "nodeos-discovery"


@dataclass(frozen=True)
class PortAddr:
    trtype: str
    adrfam: str
    traddr: str
    trsvcid: str

    @classmethod
    def of(cls, listener: Listener) -> PortAddr:
        return cls(listener.trtype, listener.adrfam, listener.traddr, str(listener.trsvcid))

    def listener(self) -> Listener:
        return Listener(trtype=self.trtype, traddr=self.traddr, trsvcid=self.trsvcid, adrfam=self.adrfam)  # type: ignore[arg-type]


def find_port(ports: dict[int, PortAddr], want: PortAddr) -> int | None:
    for pid, addr in sorted(ports.items()):
        if addr == want:
            return pid
    return None


def _port_of(link: tuple[int, str, PortAddr]) -> int:
    return link[0]


def free_port_id(ports: dict[int, PortAddr] | set[int]) -> int:
    used = set(ports)
    for pid in range(1, MAX_PORT_ID + 1):
        if pid not in used:
            return pid
    raise OperationFailed("nvmet: no free port id left")


def nguid_for_configfs(nguid32: str) -> str:
    """configfs parses hex pairs and skips '-'; write it in the UUID form it prints back."""
    n = nguid32
    return f"{n[0:8]}-{n[8:12]}-{n[12:16]}-{n[16:20]}-{n[20:32]}"


def referral_name(addr: PortAddr) -> str:
    """configfs directory name of a referral: readable, unique per address, no '/'."""
    return f"{addr.trtype}-{addr.traddr}-{addr.trsvcid}".replace(":", "_")


def discovery_addrs(listeners: tuple[Listener, ...], svcid: str | None) -> list[PortAddr]:
    """One discovery port per distinct (trtype, adrfam, traddr) of the export's listeners.

    nvmet serves a discovery controller on every port and its log page lists only the
    subsystems linked to that port that the asking host is allowed to see, so the 8009
    ports carry the same subsystem links as the I/O ports. Which makes each of them an I/O
    port too: a TLS listener gets none, or a volume whose hosts require TLS would take a
    plain-text connect on 8009 (the lab found it). Such a volume is not in 8009's log; the
    host connects to the TLS port itself (docs/operations.md, "TLS on NVMe/TCP").
    """
    if not svcid:
        return []
    seen: list[PortAddr] = []
    for li in listeners:
        if is_tls(li):
            continue
        a = PortAddr(li.trtype, li.adrfam, li.traddr, svcid)
        if a not in seen and str(li.trsvcid) != svcid:
            seen.append(a)
    return seen


class Nvmet:
    def __init__(self, fs: ConfigFs, debugfs: Path = DEBUGFS_NVMET) -> None:
        self.fs = fs
        self.debugfs = debugfs
        # (port, subsystem) -> address: links noted while held (hold_links), made by release_links
        self._held: dict[tuple[int, str], PortAddr] | None = None

    # ---- ports -----------------------------------------------------------------------
    def ports(self) -> dict[int, PortAddr]:
        out: dict[int, PortAddr] = {}
        for name in self.fs.listdir("ports"):
            if not name.isdigit():
                continue
            r = self.fs.read_or
            out[int(name)] = PortAddr(
                r("", "ports", name, "addr_trtype"),
                r("", "ports", name, "addr_adrfam"),
                r("", "ports", name, "addr_traddr"),
                r("", "ports", name, "addr_trsvcid"),
            )
        return out

    def ensure_port(self, addr: PortAddr) -> int:
        ports = self.ports()
        pid = find_port(ports, addr)
        if pid is not None:
            return pid
        for old, a in ports.items():
            # A crash half-way through an earlier ensure_port leaves an unaddressed port.
            if not (a.trtype and a.traddr and a.trsvcid) and not self.port_subsystems(old):
                self.gc_port(old)
        ports = self.ports()
        pid = free_port_id(ports)
        p = str(pid)
        self.fs.mkdir("ports", p)
        try:
            self.fs.write(addr.adrfam, "ports", p, "addr_adrfam")
            self.fs.write(addr.trtype, "ports", p, "addr_trtype")
            self.fs.write(addr.traddr, "ports", p, "addr_traddr")
            self.fs.write(addr.trsvcid, "ports", p, "addr_trsvcid")
            if is_tls(addr.listener()):
                self._tls_port(p)
        except OperationFailed:
            self.fs.rmdir("ports", p)
            raise
        return pid

    def _tls_port(self, p: str) -> None:
        """TLS 1.3 required on port `p` (before a subsystem is linked: the port is enabled then)."""
        try:
            self.fs.write("tls1.3", "ports", p, "addr_tsas")
            self.fs.write("required", "ports", p, "addr_treq")
        except OperationFailed as err:
            raise OperationFailed(
                f"nvmet refused TLS on a port ({err.message}): the kernel needs "
                "CONFIG_NVME_TARGET_TCP_TLS (Linux 6.7+), and tlshd must run",
                field="listeners",
            ) from None

    def port_subsystems(self, pid: int) -> list[str]:
        """The subsystems linked to port `pid`, and those whose link is held (hold_links)."""
        linked = self.fs.listdir("ports", str(pid), "subsystems")
        held = [nqn for p, nqn in self._held or () if p == pid and nqn not in linked]
        return linked + held

    def hold_links(self) -> None:
        """Until release_links(), links to ports are noted, not made. A port listens from its
        first link on, and a host that reconnects to a subsystem not linked yet is refused with
        DNR (Linux's target), which a Linux host (6.12) takes as final: it removes that path for
        good. So a re-export after a reboot links every subsystem at the end, at once."""
        if self._held is None:
            self._held = {}

    def release_links(self) -> None:
        """Make the links noted while held; each one's trouble is logged, the first raised.

        Everything is read first, then the links are made back to back, port by port: a port
        listens from its first link on, and any configfs read between its links (slow in a
        loaded VM: the rolling upgrade's lab run lost two paths at once to one node) would widen
        the window in which a host's reconnect meets its port without its subsystem (DNR)."""
        held, self._held = self._held or {}, None
        if not held:
            return
        ports, subsystems = set(self.ports()), set(self.subsystems())
        todo = sorted(
            ((p, n, a) for (p, n), a in held.items() if n in subsystems and p in ports), key=_port_of
        )
        first: NodeosError | None = None
        started = time.monotonic()
        for pid, nqn, addr in todo:
            try:
                self._link(pid, nqn, addr)
            except NodeosError as err:
                LOG.error("subsystem %s not linked to port %d: %s", nqn, pid, err.message)
                first = first or err
        LOG.info(
            "held exports linked: %d link(s) to %d port(s) in %.1f ms",
            len(todo),
            len({p for p, _, _ in todo}),
            1000 * (time.monotonic() - started),
        )
        if first is not None:
            raise first

    def link_port(self, pid: int, nqn: str, addr: PortAddr) -> None:
        if self.fs.exists("ports", str(pid), "subsystems", nqn):
            return
        if self._held is not None:
            self._held[(pid, nqn)] = addr
            return
        self._link(pid, nqn, addr)

    def _link(self, pid: int, nqn: str, addr: PortAddr) -> None:
        try:
            # The first link enables the port: this is where a missing transport shows.
            self.fs.link(("subsystems", nqn), "ports", str(pid), "subsystems", nqn)
        except OperationFailed as e:
            hint = ""
            if addr.trtype == "rdma":
                hint = (
                    " (RDMA: is there an RDMA device on this address? For Soft-RoCE: modprobe "
                    "crc32_generic rdma_rxe; rdma link add rxe0 type rxe netdev <if>)"
                )
            raise EnvironmentProblem(
                f"nvmet could not listen on {addr.trtype} {addr.traddr}:{addr.trsvcid}{hint}: {e.message}"
            ) from None

    def unlink_port(self, pid: int, nqn: str) -> None:
        held = self._held is not None and self._held.pop((pid, nqn), None) is not None
        if held and not self.fs.exists("ports", str(pid), "subsystems", nqn):
            return  # only noted, never made
        # Dropping the link makes the kernel delete this subsystem's controllers on the port.
        self.fs.unlink("ports", str(pid), "subsystems", nqn)

    def ensure_ana_group(self, pid: int, grp: int) -> None:
        if grp != DEFAULT_ANA_GROUP:
            self.fs.mkdir("ports", str(pid), "ana_groups", str(grp))

    def set_port_ana_state(self, pid: int, grp: int, state: str) -> None:
        self.ensure_ana_group(pid, grp)
        path = ("ports", str(pid), "ana_groups", str(grp), "ana_state")
        if self.fs.read_or("", *path) != state:
            self.fs.write(state, *path)

    def port_ana_state(self, pid: int, grp: int) -> str | None:
        v = self.fs.read_or("", "ports", str(pid), "ana_groups", str(grp), "ana_state")
        return v or None

    # ---- referrals (a discovery log entry pointing at another node's discovery port) ---
    def referrals(self, pid: int) -> dict[str, PortAddr]:
        out = {}
        for name in self.fs.listdir("ports", str(pid), "referrals"):
            r = self.fs.read_or
            base = ("ports", str(pid), "referrals", name)
            out[name] = PortAddr(
                r("", *base, "addr_trtype"), r("", *base, "addr_adrfam"),
                r("", *base, "addr_traddr"), r("", *base, "addr_trsvcid"),
            )  # fmt: skip
        return out

    def set_referrals(self, pid: int, want: list[PortAddr]) -> None:
        have = self.referrals(pid)
        names = {referral_name(a): a for a in want}
        for name, addr in have.items():
            if names.get(name) != addr:
                self.fs.write("0", "ports", str(pid), "referrals", name, "enable")
                self.fs.rmdir("ports", str(pid), "referrals", name)
        have = self.referrals(pid)
        for name, addr in names.items():
            if name in have:
                continue
            base = ("ports", str(pid), "referrals", name)
            self.fs.mkdir(*base)
            try:
                # Address attributes are refused while the referral is enabled: enable last.
                self.fs.write(addr.adrfam, *base, "addr_adrfam")
                self.fs.write(addr.trtype, *base, "addr_trtype")
                self.fs.write(addr.traddr, *base, "addr_traddr")
                self.fs.write(addr.trsvcid, *base, "addr_trsvcid")
                self.fs.write("1", *base, "enable")
            except OperationFailed:
                self.fs.rmdir(*base)
                raise

    def anchor(self, pid: int, addr: PortAddr, on: bool) -> None:
        """Keep discovery port `pid` listening with no volume linked (ANCHOR_NQN), or let it go."""
        if on:
            if not self.has_subsystem(ANCHOR_NQN):
                self.ensure_subsystem(ANCHOR_NQN, ANCHOR_SERIAL, 1, 0xFFEF)
            self.link_port(pid, ANCHOR_NQN, addr)
            return
        if ANCHOR_NQN in self.port_subsystems(pid):
            self.unlink_port(pid, ANCHOR_NQN)
        if self.has_subsystem(ANCHOR_NQN) and not any(
            ANCHOR_NQN in self.port_subsystems(p) for p in self.ports()
        ):
            self.remove_subsystem(ANCHOR_NQN)

    def gc_port(self, pid: int) -> None:
        """Remove a port that no subsystem uses any more (frees the TCP/RDMA listener)."""
        if self.port_subsystems(pid) or self.fs.listdir("ports", str(pid), "referrals"):
            return
        for grp in self.fs.listdir("ports", str(pid), "ana_groups"):
            if grp != str(DEFAULT_ANA_GROUP):
                self.fs.rmdir("ports", str(pid), "ana_groups", grp)
        self.fs.rmdir("ports", str(pid))

    # ---- subsystems ------------------------------------------------------------------
    def subsystems(self) -> list[str]:
        return self.fs.listdir("subsystems")

    def has_subsystem(self, nqn: str) -> bool:
        return self.fs.exists("subsystems", nqn)

    def ensure_subsystem(self, nqn: str, serial: str, cntlid_min: int, cntlid_max: int) -> None:
        self.fs.mkdir("subsystems", nqn)
        self._set("0", "subsystems", nqn, "attr_allow_any_host")
        self._set(serial, "subsystems", nqn, "attr_serial")
        cur_max = int(self.fs.read_or(str(0xFFEF), "subsystems", nqn, "attr_cntlid_max") or 0xFFEF)
        # The kernel refuses min > max at every step, so order the two writes.
        if cntlid_min <= cur_max:
            self._set(str(cntlid_min), "subsystems", nqn, "attr_cntlid_min")
            self._set(str(cntlid_max), "subsystems", nqn, "attr_cntlid_max")
        else:
            self._set(str(cntlid_max), "subsystems", nqn, "attr_cntlid_max")
            self._set(str(cntlid_min), "subsystems", nqn, "attr_cntlid_min")

    def _set(self, value: str, *path: str) -> None:
        if self.fs.read_or("\0", *path) != value:
            self.fs.write(value, *path)

    def ensure_namespace(
        self, nqn: str, device: str, uuid: str, nguid32: str, ana_grp: int, enable: bool = True
    ) -> None:
        """Namespace 1 as given; `enable` False: configured but withheld from the hosts."""
        ns = ("subsystems", nqn, "namespaces", str(NSID))
        self.fs.mkdir(*ns)
        want = {
            "device_path": device,
            "device_uuid": uuid,
            "device_nguid": nguid_for_configfs(nguid32),
        }
        have = {k: self.fs.read_or("", *ns, k) for k in want}
        enabled = self.fs.read_or("0", *ns, "enable") == "1"
        if enabled and not enable:
            self.fs.write("0", *ns, "enable")  # the hosts' controllers get a namespace-changed event
            enabled = False
        if have != want:
            if enabled:
                # These attributes are refused (EBUSY) while the namespace is enabled.
                self.fs.write("0", *ns, "enable")
                enabled = False
            for k, v in want.items():
                if have[k] != v:
                    self.fs.write(v, *ns, k)
        self.set_namespace_ana_group(nqn, ana_grp)
        if enable and not enabled:
            self.fs.write("1", *ns, "enable")

    def set_namespace_ana_group(self, nqn: str, grp: int) -> None:
        """The namespace's ANA group (allowed while it is enabled; connected hosts get an ANA
        change event). No namespace: nothing to do."""
        ns = ("subsystems", nqn, "namespaces", str(NSID))
        if self.fs.exists(*ns):
            self._set(str(grp), *ns, "ana_grpid")

    def namespace(self, nqn: str) -> dict[str, str]:
        ns = ("subsystems", nqn, "namespaces", str(NSID))
        keys = ("device_path", "device_uuid", "device_nguid", "ana_grpid", "enable")
        return {k: self.fs.read_or("", *ns, k) for k in keys}

    def revalidate(self, nqn: str) -> None:
        """Tell connected hosts the namespace changed size (an AEN makes them rescan)."""
        if self.fs.exists("subsystems", nqn, "namespaces", str(NSID), "revalidate_size"):
            self.fs.write("1", "subsystems", nqn, "namespaces", str(NSID), "revalidate_size")

    def remove_subsystem(self, nqn: str) -> None:
        if not self.has_subsystem(nqn):
            return
        for pid, _ in sorted(self.ports().items()):
            if nqn in self.port_subsystems(pid):
                self.unlink_port(pid, nqn)
                self.gc_port(pid)
        for host in self.allowed_hosts(nqn):
            self.fs.unlink("subsystems", nqn, "allowed_hosts", host)
            self.gc_host(host)
        for nsid in self.fs.listdir("subsystems", nqn, "namespaces"):
            if self.fs.read_or("0", "subsystems", nqn, "namespaces", nsid, "enable") == "1":
                self.fs.write("0", "subsystems", nqn, "namespaces", nsid, "enable")
            self.fs.rmdir("subsystems", nqn, "namespaces", nsid)
        self.fs.rmdir("subsystems", nqn)

    # ---- hosts -----------------------------------------------------------------------
    def allowed_hosts(self, nqn: str) -> list[str]:
        return self.fs.listdir("subsystems", nqn, "allowed_hosts")

    def ensure_host(self, host: str, dhchap_key: str | None) -> None:
        if self.fs.exists("hosts", host):
            current = self.fs.read_or("", "hosts", host, "dhchap_key") or None
            if current == dhchap_key or (dhchap_key is None and current in (None, "", "(null)")):
                return
            if dhchap_key is not None:
                self.fs.write(dhchap_key, "hosts", host, "dhchap_key", secret=True)
                return
            # A key cannot be cleared in place: recreate the host and restore its links.
            users = [s for s in self.subsystems() if host in self.allowed_hosts(s)]
            for s in users:
                self.fs.unlink("subsystems", s, "allowed_hosts", host)
            self.fs.rmdir("hosts", host)
            self.fs.mkdir("hosts", host)
            for s in users:
                self.fs.link(("hosts", host), "subsystems", s, "allowed_hosts", host)
            return
        self.fs.mkdir("hosts", host)
        if dhchap_key is not None:
            try:
                self.fs.write(dhchap_key, "hosts", host, "dhchap_key", secret=True)
            except OperationFailed:
                self.fs.rmdir("hosts", host)
                raise OperationFailed(
                    f"nvmet refused the DH-HMAC-CHAP key of host {host} (expected DHHC-1:xx:<base64>:)",
                    field="dhchap_key",
                ) from None

    def allow_host(self, nqn: str, host: str) -> None:
        self.fs.link(("hosts", host), "subsystems", nqn, "allowed_hosts", host)

    def disallow_host(self, nqn: str, host: str) -> None:
        self.fs.unlink("subsystems", nqn, "allowed_hosts", host)

    def gc_host(self, host: str) -> None:
        if not any(host in self.allowed_hosts(s) for s in self.subsystems()):
            self.fs.rmdir("hosts", host)

    # ---- controllers (debugfs, kernel >= 6.9 with CONFIG_NVME_TARGET_DEBUGFS) ----------
    def controllers(self, nqn: str) -> list[tuple[Path, str]]:
        """(debugfs dir, host NQN) of each live controller of the subsystem, when visible."""
        base = self.debugfs / nqn
        out: list[tuple[Path, str]] = []
        try:
            names = sorted(os.listdir(base))
        except OSError:
            return out
        for name in names:
            if not name.startswith("ctrl"):
                continue
            try:
                host = (base / name / "hostnqn").read_text().strip()
            except OSError:
                continue
            out.append((base / name, host))
        return out

    def disconnect_host(self, nqn: str, host: str, settle_s: float = 2.0) -> None:
        """Drop the host's live controllers on this subsystem.

        Preferred: debugfs `state` <- "fatal" on just that host's controllers, then check they
        are gone (the kernel tears them down asynchronously). Where debugfs is absent, a write
        is refused or a controller outlives `settle_s`: unlink and relink the subsystem on every
        port: the kernel deletes all of the subsystem's controllers; allowed hosts reconnect by
        themselves, the revoked one is refused.
        """
        ctrls = self.controllers(nqn)
        targeted = [d for d, h in ctrls if h == host]
        done = True
        for d in targeted:
            try:
                (d / "state").write_text("fatal")
            except OSError:
                done = False
        if ctrls and done:
            deadline = time.monotonic() + settle_s
            while any(h == host for _, h in self.controllers(nqn)):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            else:
                return
        for pid, addr in sorted(self.ports().items()):
            if nqn in self.port_subsystems(pid):
                self.unlink_port(pid, nqn)
                self.link_port(pid, nqn, addr)
