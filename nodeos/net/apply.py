"""Appliers: carry out a plan's changes (pyroute2, DCB netlink, sysctls, configfs, sysfs),
then check the management path and roll everything back if it was lost.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from nodeos.errors import EnvironmentProblem, NodeosError, NotSupported, OperationFailed
from nodeos.net import dcb, marking, rdma
from nodeos.net.dcbsock import DcbSocket
from nodeos.net.mgmt import Health, management_health
from nodeos.net.model import NODEOS_RTPROTO, NetConfig
from nodeos.net.netns import run_in
from nodeos.net.observe import RTAX_FEATURE_ECN, sysctl_path
from nodeos.net.plan import Change, Plan

# Root qdiscs the kernel attaches by itself; going back to one means deleting ours.
DEFAULT_QDISCS = {"noqueue", "pfifo_fast", "mq", "noop", None}
TC_H_ROOT = 0xFFFFFFFF


@dataclass
class ApplyResult:
    applied: list[Change] = field(default_factory=list)
    rolled_back: bool = False
    health: Health | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "applied": [c.to_dict() for c in self.applied],
            "rolled_back": self.rolled_back,
            "management": None if self.health is None else self.health.to_dict(),
        }


class _Ctx:
    """Open handles for one apply, inside the target namespace."""

    def __init__(self) -> None:
        self.ipr = IPRoute()
        self._dcb: DcbSocket | None = None

    @property
    def dcb(self) -> DcbSocket:
        if self._dcb is None:
            self._dcb = DcbSocket()
        return self._dcb

    def index(self, name: str) -> int:
        found = self.ipr.link_lookup(ifname=name)
        if not found:
            raise OperationFailed(f"interface {name} disappeared during apply", field="interfaces.name")
        return int(found[0])

    def close(self) -> None:
        self.ipr.close()
        if self._dcb is not None:
            self._dcb.close()


def _tuple_fields(d: dict[str, Any]) -> dict[str, Any]:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}


def _route_args(ctx: _Ctx, target: str, r: dict[str, Any]) -> dict[str, Any]:
    args: dict[str, Any] = {"dst": r["dst"], "oif": ctx.index(target)}
    if r.get("gateway"):
        args["gateway"] = r["gateway"]
    if r.get("metric") is not None:
        args["priority"] = r["metric"]
    return args


def _apply_route(ctx: _Ctx, c: Change) -> None:
    if c.before is not None:
        try:
            ctx.ipr.route("del", **_route_args(ctx, c.target, c.before))
        except NetlinkError as exc:
            if exc.code != errno.ESRCH:
                raise
    if c.after is not None:
        args = _route_args(ctx, c.target, c.after)
        metrics: dict[str, Any] = {}
        if c.after.get("congctl"):
            metrics["RTAX_CC_ALGO"] = c.after["congctl"]
        if c.after.get("ecn"):
            metrics["RTAX_FEATURES"] = RTAX_FEATURE_ECN
        if metrics:
            args["metrics"] = metrics
        ctx.ipr.route("replace", proto=NODEOS_RTPROTO, **args)


def _apply_one(ctx: _Ctx, c: Change) -> None:
    k, n = c.kind, c.target
    if k == "sysctl":
        try:
            sysctl_path(n).write_text(f"{c.after}\n")
        except OSError as exc:
            hint = ""
            if exc.errno == errno.EPERM and n == "net.ipv4.tcp_congestion_control":
                hint = (
                    " (outside the initial network namespace only the algorithms in "
                    "net.ipv4.tcp_allowed_congestion_control may be chosen)"
                )
            raise OperationFailed(f"cannot set sysctl {n}={c.after}: {exc.strerror}{hint}") from None
    elif k == "mtu":
        ctx.ipr.link("set", index=ctx.index(n), mtu=c.after)
    elif k == "link":
        ctx.ipr.link("set", index=ctx.index(n), state=c.after)
    elif k in ("address_add", "address_del"):
        addr = c.after if k == "address_add" else c.before
        ip, plen = addr.split("/")
        try:
            ctx.ipr.addr(
                "add" if k == "address_add" else "del", index=ctx.index(n), address=ip, prefixlen=int(plen)
            )
        except NetlinkError as exc:
            # Already there / already gone: the change is idempotent.
            if exc.code not in (errno.EEXIST, errno.EADDRNOTAVAIL):
                raise
    elif k == "route":
        _apply_route(ctx, c)
    elif k == "qdisc":
        idx = ctx.index(n)
        if c.after in DEFAULT_QDISCS and (c.extra.get("reverse") or c.after == "noqueue"):
            try:
                ctx.ipr.tc("del", index=idx, parent=TC_H_ROOT)
            except NetlinkError as exc:
                if exc.code not in (errno.ENOENT, errno.EINVAL):
                    raise
        else:
            try:
                ctx.ipr.tc("replace", kind=c.after, index=idx, handle=0x10000, parent=TC_H_ROOT)
            except NetlinkError as exc:
                if exc.code == errno.ENOENT:
                    raise EnvironmentProblem(
                        f"qdisc {c.after} is not available in this kernel (needed on {n}); set "
                        "qos.qdisc to an available one",
                        field="qos.qdisc",
                    ) from None
                raise
    elif k == "dscp_mark":
        spec = marking.parse_comment(c.after) if isinstance(c.after, str) else None
        # A hand-edited table cannot be restored rule by rule; rolling back removes ours.
        marking.apply(*(spec if spec else (None, ())))
    elif k == "dcbx":
        ctx.dcb.set(n, lambda s: dcb.encode_dcbx(n, c.after, s), "DCBX mode")
    elif k == "ets":
        ets = dcb.Ets(**_tuple_fields(c.after or asdict_default(dcb.Ets)))
        ctx.dcb.set(n, lambda s: dcb.encode_set_ets(n, ets, s), "ETS")
    elif k == "pfc":
        pfc = dcb.Pfc(**_tuple_fields(c.after or asdict_default(dcb.Pfc)))
        ctx.dcb.set(n, lambda s: dcb.encode_set_pfc(n, pfc, s), "PFC")
    elif k == "dcb_app":
        entry = c.after if c.after is not None else c.before
        app = dcb.App(*entry)
        delete = c.after is None
        ctx.dcb.set(n, lambda s: dcb.encode_app(n, [app], delete=delete, seq=s), "DCB APP table")
    elif k == "trust":
        sel = tuple(c.after or ())
        ctx.dcb.set(n, lambda s: dcb.encode_trust(n, sel, s), "DCB APP trust")
    elif k == "roce_tos":
        device, port = n.split("/")
        if c.after is not None:
            rdma.write_roce_tos(device, int(port), int(c.after))
    elif k == "knob":
        try:
            Path(n).write_text(f"{c.after}\n")
        except OSError as exc:
            raise OperationFailed(f"cannot write ECN knob {n}: {exc.strerror}") from None
    else:  # pragma: no cover - the planner only emits the kinds above
        raise OperationFailed(f"unknown change kind {k}")


def asdict_default(cls: type) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(cls())


def _describe_error(c: Change, exc: BaseException) -> str:
    if isinstance(exc, NetlinkError):
        return f"{c.describe()}: kernel said {exc.args[-1] if exc.args else exc} (errno {exc.code})"
    if isinstance(exc, NodeosError):
        return f"{c.describe()}: {exc.message}"
    return f"{c.describe()}: {exc}"


def _run(ctx: _Ctx, changes: list[Change]) -> tuple[list[Change], BaseException | None, Change | None]:
    done: list[Change] = []
    for c in changes:
        try:
            _apply_one(ctx, c)
        except (NodeosError, NetlinkError, OSError) as exc:
            return done, exc, c
        done.append(c)
    return done, None, None


def _rollback(ctx: _Ctx, done: list[Change]) -> list[str]:
    errors = []
    for c in reversed(done):
        try:
            _apply_one(ctx, c.reverse())
        except (NodeosError, NetlinkError, OSError) as exc:
            errors.append(_describe_error(c.reverse(), exc))
    return errors


def raise_blockers(plan: Plan) -> None:
    if not plan.blockers:
        return
    b = plan.blockers[0]
    msg = "; ".join(x["message"] for x in plan.blockers) + " - nothing was changed"
    cls = {"not_supported": NotSupported, "environment": EnvironmentProblem}.get(b["code"], OperationFailed)
    raise cls(msg, field=b.get("item"))


def apply_plan(
    cfg: NetConfig,
    plan: Plan,
    netns: str | None = None,
    health_fn: Callable[[NetConfig], Health] | None = None,
) -> ApplyResult:
    """Apply every change; on a failure or a lost management path, undo what was done."""
    raise_blockers(plan)
    check = health_fn or (lambda c: management_health(c))

    def work() -> ApplyResult:
        result = ApplyResult()
        before = check(cfg) if cfg.management.interface or cfg.management.probe else None
        ctx = _Ctx()
        try:
            done, exc, failed = _run(ctx, plan.changes)
            if exc is not None and failed is not None:
                errors = _rollback(ctx, done)
                tail = f"; rollback problems: {'; '.join(errors)}" if errors else ""
                raise OperationFailed(
                    f"apply failed at {_describe_error(failed, exc)}; the "
                    f"{len(done)} change(s) made before it were rolled back{tail}",
                    field=getattr(exc, "field", None),
                )
            result.applied = done
            if before is not None and before.ok and done:
                after = _wait_healthy(check, cfg)
                result.health = after
                if not after.ok:
                    errors = _rollback(ctx, done)
                    tail = f"; rollback problems: {'; '.join(errors)}" if errors else ""
                    raise OperationFailed(
                        f"management path lost after apply ({'; '.join(after.problems)}); all "
                        f"{len(done)} change(s) were rolled back{tail}",
                        field="management",
                    )
            return result
        finally:
            ctx.close()

    return run_in(netns, work)


def _wait_healthy(check: Callable[[NetConfig], Health], cfg: NetConfig) -> Health:
    # Poll: a link coming up or a neighbour answering takes a moment after a change.
    deadline = time.monotonic() + cfg.management.timeout
    while True:
        h = check(cfg)
        if h.ok or time.monotonic() >= deadline:
            return h
        time.sleep(0.2)
