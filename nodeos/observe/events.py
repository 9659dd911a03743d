"""The cluster event log, pure part: what one event looks like, a bounded ring, text lines,
journald fields and the `since` cursor.

An event says what the cluster did and why, in one record:

    {"seq": 42, "at": 1763862000.5, "kind": "failover", "severity": "warning",
     "node": 2, "volume": "6f1c...", "epoch": 7, "message": "volume v1: primary 1 -> 2 (node 1 lost)"}

`seq` is the position in the log (assigned by whoever appends: the map for replicated
events, the local ring otherwise) and is what `nodeos events --since` and `--follow` use as
the cursor. `at` is wall-clock seconds (the proposer's clock: the map itself reads no clock).
Only the keys in EVENT_KEYS are kept, so an event never carries a secret by accident.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable
from typing import Any

from nodeos.errors import BadInput

KINDS = (
    "node_failed",
    "node_recovered",
    "node_joined",
    "node_left",
    "node_down",
    "node_suspect",
    "node_up",
    "leader_changed",
    "failover",
    "handoff",
    "rebuild_started",
    "rebuild_finished",
    "drive_failed",
    "drive_evacuated",
    "drift_found",
    "drift_cleared",
    "dataplane_down",
    "dataplane_up",
    "dataplane_call_stuck",
    "volume_created",
    "volume_ready",
    "volume_failed",
    "volume_deleted",
    "volume_published",
    "volume_unpublished",
    "publish_checksum_mismatch",
    "replica_degraded",
    "replica_failed",
    "replica_in_sync",
    "replica_out_of_sync",
    "replica_replaced",
    "replica_create_failed",
    "replica_orphan_removed",
    "pool_created",
    "pool_failed",
    "pool_deleted",
    "snapshot_taken",
    "snapshot_dropped",
    "host_granted",
    "host_revoked",
    "host_secret_unreadable",
    "host_tls_changed",
    "secret_rotated",
    "ca_rotated",
    "voters_set",
    "voter_changed",
    "mdns_failed",
    "mdns_recovered",
    "feature_level_raised",
    "node_stalled",
    "upgrade",
)
SEVERITIES = ("info", "warning", "critical")
# Optional context keys an event may carry (scalars only), besides seq/at/kind/severity/message.
CONTEXT_KEYS = ("node", "volume", "drive", "pool", "snapshot", "host", "step", "epoch", "term", "reason")
EVENT_KEYS = ("seq", "at", "kind", "severity", "message", *CONTEXT_KEYS)
MAX_MESSAGE = 512
DEFAULT_KEEP = 1000  # events kept in a ring (oldest dropped)


def make_event(
    kind: str, message: str, *, severity: str = "info", at: float | None = None, **context: Any
) -> dict[str, Any]:
    """A new event (without seq); BadInput names the field at fault."""
    ev: dict[str, Any] = {"kind": kind, "severity": severity, "message": message}
    ev["at"] = time.time() if at is None else at
    ev.update({k: v for k, v in context.items() if v is not None})
    return check_event(ev)


def check_event(ev: Any) -> dict[str, Any]:
    """Validate an event (as proposed or received); returns a copy holding only known keys."""
    if not isinstance(ev, dict):
        raise BadInput("an event must be a map", field="event")
    kind = ev.get("kind")
    if kind not in KINDS:
        raise BadInput(f"event kind {kind!r} is not known", field="kind", allowed=list(KINDS))
    sev = ev.get("severity", "info")
    if sev not in SEVERITIES:
        raise BadInput(f"event severity {sev!r} is not known", field="severity", allowed=list(SEVERITIES))
    msg = ev.get("message")
    if not isinstance(msg, str) or not msg or len(msg) > MAX_MESSAGE:
        raise BadInput(
            f"message must be a non-empty string of at most {MAX_MESSAGE} characters", field="message"
        )
    at = ev.get("at")
    if not isinstance(at, (int, float)) or isinstance(at, bool) or at < 0:
        raise BadInput("at must be a non-negative number of seconds since the epoch", field="at")
    unknown = sorted(set(ev) - set(EVENT_KEYS))
    if unknown:
        raise BadInput(f"unknown event key(s): {', '.join(unknown)}", field="event", allowed=list(EVENT_KEYS))
    for k in CONTEXT_KEYS:
        v = ev.get(k)
        if v is not None and (not isinstance(v, (str, int)) or isinstance(v, bool)):
            raise BadInput(f"{k} must be a string or an integer", field=k)
        if isinstance(v, str) and len(v) > 256:
            raise BadInput(f"{k} is longer than 256 characters", field=k)
    return {k: ev[k] for k in EVENT_KEYS if k in ev} | {"severity": sev}


def check_since(value: Any) -> int:
    """The `since` cursor: events with seq > since are returned (0: from the oldest kept)."""
    if value is None:
        return 0
    if type(value) is not int or value < 0:
        raise BadInput("since must be a non-negative integer (an event seq)", field="since")
    return value


def append(log: list[dict[str, Any]], next_seq: int, ev: dict[str, Any], keep: int) -> int:
    """Append `ev` as number `next_seq` to a list kept to `keep` entries; returns the next seq.

    Pure over plain lists so the replicated map can hold the log as msgpack data.
    """
    log.append({**ev, "seq": next_seq})
    del log[:-keep]
    return next_seq + 1


def after(events: Iterable[dict[str, Any]], since: int, limit: int | None = None) -> list[dict[str, Any]]:
    out = [e for e in events if int(e.get("seq", 0)) > since]
    return out if limit is None else out[:limit]


class EventRing:
    """The node-local log: events this node saw itself (leader changes, members lost, its
    data plane), kept until the replicated map carries them."""

    def __init__(self, keep: int = DEFAULT_KEEP) -> None:
        self.keep = keep
        self.events: deque[dict[str, Any]] = deque(maxlen=keep)
        self.next_seq = 1

    def add(self, ev: dict[str, Any]) -> dict[str, Any]:
        rec = {**check_event(ev), "seq": self.next_seq}
        self.next_seq += 1
        self.events.append(rec)
        return rec

    def since(self, since: int, limit: int | None = None) -> list[dict[str, Any]]:
        return after(self.events, since, limit)

    @property
    def last_seq(self) -> int:
        return self.next_seq - 1


def format_line(ev: dict[str, Any]) -> str:
    """One human line: time, severity, kind, message, then the context as key=value."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(ev.get("at", 0))))
    ctx = " ".join(f"{k}={ev[k]}" for k in CONTEXT_KEYS if ev.get(k) is not None)
    line = (
        f"{stamp} #{ev.get('seq', '-')} {ev.get('severity', 'info'):<8} {ev.get('kind')}: {ev.get('message')}"
    )
    return f"{line} [{ctx}]" if ctx else line


def journal_fields(ev: dict[str, Any]) -> dict[str, Any]:
    """Structured fields for the journal (logsetup turns them into NODEOS_EVENT_KIND=...)."""
    out: dict[str, Any] = {"event_kind": ev["kind"], "event_severity": ev.get("severity", "info")}
    if "seq" in ev:
        out["event_seq"] = ev["seq"]
    for k in CONTEXT_KEYS:
        if ev.get(k) is not None:
            out[k] = ev[k]
    return out


class RateLimit:
    """At most `burst` events per source (e.g. one member's liveness, the network's drift) in
    any `window_s`; a flapping source is held back, not lost: the next event let through says
    how many were held, and `flush` brings out the last held one once the source may speak
    again, if it says something else than the last one recorded (so the log ends in the
    source's real state)."""

    def __init__(self, burst: int = 5, window_s: float = 60.0) -> None:
        self.burst, self.window_s = burst, window_s
        self._sent: dict[str, deque[float]] = {}
        self._last_kind: dict[str, str] = {}
        self._held: dict[str, tuple[dict[str, Any], int]] = {}

    def _may_send(self, source: str, now: float) -> bool:
        sent = self._sent.setdefault(source, deque())
        while sent and now - sent[0] >= self.window_s:
            sent.popleft()
        return len(sent) < self.burst

    def _send(self, source: str, event: dict[str, Any], now: float, held: int) -> dict[str, Any]:
        self._sent[source].append(now)
        self._last_kind[source] = event["kind"]
        if held:
            note = f" ({held} similar event(s) held back)"
            event = {**event, "message": (event["message"] + note)[-MAX_MESSAGE:]}
        return event

    def offer(self, source: str, event: dict[str, Any], now: float) -> dict[str, Any] | None:
        """The event to record now, or None while the source is over its rate."""
        if not self._may_send(source, now):
            held = self._held.get(source, (event, 0))[1]
            self._held[source] = (event, held + 1)
            return None
        held = self._held.pop(source, (event, 0))[1]
        return self._send(source, event, now, held)

    def flush(self, now: float) -> list[dict[str, Any]]:
        out = []
        for source in sorted(self._held):
            if not self._may_send(source, now):
                continue
            event, held = self._held.pop(source)
            if event["kind"] != self._last_kind.get(source):
                out.append(self._send(source, event, now, held - 1))
        return out
