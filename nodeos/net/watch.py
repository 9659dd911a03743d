"""Watch: DCB change notifications, periodic re-verification, and counters -> alarms.

Counter evaluation (`evaluate`) is pure: two samples and the time between them in, alarms
out. The loop (`watch`) is the shell: it listens on the DCB multicast group (another agent
or the driver changing DCB shows up at once), samples ethtool and RDMA counters, and
re-verifies on every event and every interval.
"""

from __future__ import annotations

import re
import select
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nodeos.errors import EnvironmentProblem
from nodeos.net import rdma
from nodeos.net.dcb import DcbState
from nodeos.net.dcbsock import notifications, subscribe_socket
from nodeos.net.model import NetConfig, Thresholds
from nodeos.net.netns import run_in
from nodeos.net.observe import observe, read_dcb
from nodeos.net.verify import verify


@dataclass(frozen=True)
class Alarm:
    severity: str  # "critical", "warning", "info"
    kind: str  # pause_storm, heavy_pause, silent_loss, ecn_without_cnp, congestion
    target: str
    message: str
    delta: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "severity": self.severity,
            "kind": self.kind,
            "target": self.target,
            "message": self.message,
            "delta": self.delta,
        }


@dataclass
class Sample:
    at: float
    nic: dict[str, dict[str, int]] = field(default_factory=dict)  # netdev -> ethtool stats
    rdma: dict[str, dict[str, int]] = field(default_factory=dict)  # "dev/port" -> hw_counters


_STAT_RE = re.compile(r"^\s*([^:]+):\s+(-?\d+)\s*$")
# mlx5 / common ethtool names. Loss counters: a lossless class must never drop.
_STORM = re.compile(r"pause_storm")
_PRIO_PAUSE = re.compile(r"^(rx|tx)_prio(\d)_pause$")
_PRIO_PAUSE_DURATION = re.compile(r"^(rx|tx)_prio(\d)_pause_duration$")
_PRIO_DISCARD = re.compile(r"^rx_prio(\d)_(discards|buf_discard)$")
_NIC_LOSS = ("rx_discards_phy", "rx_out_of_buffer")
_RDMA_LOSS = (
    "out_of_sequence",
    "packet_seq_err",
    "local_ack_timeout_err",
    "out_of_buffer",
    "implied_nak_seq_err",
)


def parse_ethtool_stats(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        m = _STAT_RE.match(line)
        if m:
            out[m.group(1).strip()] = int(m.group(2))
    return out


def read_ethtool_stats(ifname: str, netns: str | None = None) -> dict[str, int]:
    cmd = ["ethtool", "-S", ifname]
    if netns:
        cmd = ["ip", "netns", "exec", netns, *cmd]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False)
    except FileNotFoundError:
        raise EnvironmentProblem("ethtool is not installed (needed to read NIC counters)") from None
    if res.returncode != 0:
        return {}  # the driver exposes no statistics
    return parse_ethtool_stats(res.stdout)


def sample(cfg: NetConfig, netns: str | None = None) -> Sample:
    s = Sample(at=time.monotonic())
    names = {i.name for i in cfg.interfaces}
    for n in sorted(names):
        s.nic[n] = read_ethtool_stats(n, netns)
    if cfg.qos.dcb is not None:
        dcb_states = run_in(netns, lambda: read_dcb(sorted(names)))
        for n, st in dcb_states.items():
            add_pfc_counters(s.nic.setdefault(n, {}), st)
    for p in rdma.inventory():
        if p.netdev in names:
            s.rdma[f"{p.device}/{p.port}"] = rdma.read_hw_counters(p.device, p.port)
    return s


def add_pfc_counters(stats: dict[str, int], state: DcbState | str) -> None:
    """Per-priority pause frames from the DCB netlink PFC attribute (requests = sent,
    indications = received), for drivers whose ethtool stats lack them."""
    if not isinstance(state, DcbState) or state.pfc is None:
        return
    for prio in range(8):
        stats.setdefault(f"tx_prio{prio}_pause", state.pfc.requests[prio])
        stats.setdefault(f"rx_prio{prio}_pause", state.pfc.indications[prio])


def _delta(prev: dict[str, int], cur: dict[str, int], name: str) -> int:
    if name not in cur or name not in prev:
        return 0
    return max(0, cur[name] - prev[name])  # a counter reset is not an event


def evaluate(prev: Sample, cur: Sample, lossless: tuple[int, ...], th: Thresholds) -> list[Alarm]:
    """Alarms for what happened between two samples."""
    alarms: list[Alarm] = []
    interval = max(cur.at - prev.at, 1e-6)
    for dev, stats in sorted(cur.nic.items()):
        old = prev.nic.get(dev, {})
        for name in sorted(stats):
            d = _delta(old, stats, name)
            if not d:
                continue
            if _STORM.search(name):
                alarms.append(
                    Alarm(
                        "critical",
                        "pause_storm",
                        dev,
                        f"{dev}: pause storm detected by the NIC ({name} +{d}); a stuck "
                        "receiver is back-pressuring the fabric",
                        d,
                    )
                )
            elif m := _PRIO_PAUSE.match(name):
                if d / interval >= th.pause_frames_per_s:
                    alarms.append(
                        Alarm(
                            "warning",
                            "heavy_pause",
                            dev,
                            f"{dev}: {d / interval:.0f} {m.group(1)} pause frames/s on priority {m.group(2)}",
                            d,
                        )
                    )
            elif m := _PRIO_PAUSE_DURATION.match(name):
                frac = d / 1e6 / interval  # the counter is in microseconds
                if frac >= th.paused_fraction:
                    alarms.append(
                        Alarm(
                            "critical",
                            "pause_storm",
                            dev,
                            f"{dev}: priority {m.group(2)} was paused ({m.group(1)}) "
                            f"{frac:.0%} of the last {interval:.0f}s",
                            d,
                        )
                    )
            elif (m := _PRIO_DISCARD.match(name)) and int(m.group(1)) in lossless and d >= th.loss_events:
                alarms.append(
                    Alarm(
                        "critical",
                        "silent_loss",
                        dev,
                        f"{dev}: {d} packets dropped on lossless priority {m.group(1)} "
                        f"({name}); PFC is not holding",
                        d,
                    )
                )
            elif name in _NIC_LOSS and d >= th.loss_events:
                alarms.append(
                    Alarm(
                        "critical",
                        "silent_loss",
                        dev,
                        f"{dev}: {name} +{d}: packets dropped without a pause",
                        d,
                    )
                )
    for key, stats in sorted(cur.rdma.items()):
        old = prev.rdma.get(key, {})
        for name in _RDMA_LOSS:
            d = _delta(old, stats, name)
            if d >= th.loss_events:
                alarms.append(
                    Alarm(
                        "critical",
                        "silent_loss",
                        key,
                        f"RDMA {key}: {name} +{d}: RoCE is retransmitting after loss",
                        d,
                    )
                )
        marked = _delta(old, stats, "np_ecn_marked_roce_packets")
        cnps = _delta(old, stats, "np_cnp_sent")
        if marked and not cnps and "np_cnp_sent" in stats:
            alarms.append(
                Alarm(
                    "warning",
                    "ecn_without_cnp",
                    key,
                    f"RDMA {key}: {marked} ECN-marked packets but no CNP sent: DCQCN "
                    "notification point is off",
                    marked,
                )
            )
        handled = _delta(old, stats, "rp_cnp_handled")
        if handled:
            alarms.append(
                Alarm(
                    "info",
                    "congestion",
                    key,
                    f"RDMA {key}: {handled} CNPs handled (DCQCN is slowing senders)",
                    handled,
                )
            )
    return alarms


def watch(
    cfg: NetConfig,
    emit: Callable[[dict[str, Any]], None],
    interval: float = 10.0,
    count: int | None = None,
    netns: str | None = None,
    th: Thresholds | None = None,
) -> None:
    """Run until `count` intervals have passed (forever when None), emitting events."""
    th = th or cfg.watch
    lossless = cfg.qos.dcb.pfc_enabled if cfg.qos.dcb else ()
    sock = run_in(netns, subscribe_socket)
    try:
        prev = sample(cfg, netns)
        done = 0
        last_drift: list[dict[str, Any]] | None = None
        while count is None or done < count:
            deadline = time.monotonic() + interval
            while (left := deadline - time.monotonic()) > 0:
                ready, _, _ = select.select([sock], [], [], left)
                if not ready:
                    break
                for st in notifications(sock.recv(65536)):
                    emit({"event": "dcb_changed", "interface": st.ifname})
                    last_drift = _reverify(cfg, netns, emit, last_drift, force=True)
            cur = sample(cfg, netns)
            for a in evaluate(prev, cur, lossless, th):
                emit({"event": "alarm", **a.to_dict()})
            prev = cur
            last_drift = _reverify(cfg, netns, emit, last_drift)
            done += 1
    finally:
        sock.close()


def _reverify(
    cfg: NetConfig,
    netns: str | None,
    emit: Callable[[dict[str, Any]], None],
    last: list[dict[str, Any]] | None,
    force: bool = False,
) -> list[dict[str, Any]]:
    drift, _plan = verify(cfg, observe(cfg, netns))
    items = [d.to_dict() for d in drift]
    if force or items != last:
        emit({"event": "drift" if items else "in_sync", "drift": items})
    return items
