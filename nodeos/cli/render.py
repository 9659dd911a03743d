"""Text the console prints, without click: the click commands and the start-up fast path
(nodeos.cli.fast) both use it, so `nodeos status` reads the same whichever path ran it."""

from __future__ import annotations

from nodeos.errors import NodeosError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the console's start-up
if TYPE_CHECKING:
    from typing import Any


def json_text(data: Any) -> str:
    import json  # only --json needs it

    return json.dumps(data, indent=2, sort_keys=True, default=str)


def error_text(err: NodeosError) -> str:
    where = f" (field: {err.field})" if err.field else ""
    allowed = f"; allowed: {err.allowed}" if err.allowed is not None else ""
    return f"error: {err.message}{where}{allowed}"


def status_human(d: dict[str, Any]) -> str:
    dp = d.get("dataplane", {})
    node = d.get("node", {})
    health = d.get("health") or {}
    lines = [f"FAILED    {k}: {v}" for k, v in sorted((health.get("failures") or {}).items())]
    lines += [
        f"node      {d.get('node_name')} ({d.get('node_id')})",
        f"version   {d.get('version')}   pid {d.get('pid')}   up {d.get('uptime_s')}s",
        f"dataplane {dp.get('name')} ({dp.get('reason')})",
        f"addresses {', '.join(d.get('storage_addresses') or []) or '(none)'}",
    ]
    dph = node.get("dataplane_health") or {}
    if dph.get("state") == "down":
        import time

        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(dph.get("since") or 0)))
        lines.insert(len(lines) - 1, f"DOWN      data plane since {since}: {dph.get('reason')}")
    lines[len(lines) - 1 : len(lines) - 1] = dataplane_errors(dp, node)  # before `addresses`
    lines += provision_lines(d.get("provision"))
    if node:
        lines.append(
            f"objects   pools {node.get('pools')}  volumes {node.get('volumes')}  "
            f"snapshots {node.get('snapshots')}  hosts {node.get('hosts')}"
        )
        for p in node.get("pending_intents", []):
            lines.append(f"PENDING   {p['op']} {p.get('name')} (intent {p['seq']})")
        for m in (node.get("reconcile") or {}).get("missing", []):
            lines.append(f"MISSING   volume {m} is not in the data plane")
    for svc in d.get("services", []):
        if svc != "node" and isinstance(d.get(svc), dict):
            lines.append(
                f"{svc:<9} "
                + ", ".join(
                    f"{k}={v}"
                    for k, v in d[svc].items()
                    if not isinstance(v, (dict, list)) and k != "warning"
                )
            )
            if d[svc].get("warning"):
                lines.append(f"WARNING   {svc}: {d[svc]['warning']}")
    return "\n".join(lines)


def provision_lines(p: Any) -> list[str]:
    """First-boot provisioning in `nodeos status`: an invalid or failed configuration says its
    field and what is allowed (nothing of it was applied); a good one, its source."""
    if not isinstance(p, dict):
        return []
    out = []
    err = p.get("error")
    if isinstance(err, dict):
        field = f" (field: {err['field']})" if err.get("field") else ""
        allowed = f"; allowed: {err['allowed']}" if err.get("allowed") is not None else ""
        head = "not applied" if p.get("result") == "invalid" else str(p.get("result"))
        out.append(
            f"ERROR     provisioning from {p.get('source')}, {head}: {err.get('message')}{field}{allowed}"
        )
    elif p.get("result") in ("applied", "unchanged"):
        out.append(f"provision {p.get('result')} from {p.get('applied_from') or p.get('source')}")
    elif p.get("applied_from"):
        out.append(f"provision no source at this boot; applied earlier from {p['applied_from']}")
    cl = p.get("cluster") or {}
    if cl.get("state") == "failed" and isinstance(cl.get("error"), dict):
        out.append(f"ERROR     provisioned cluster {cl.get('action')} failed: {cl['error'].get('message')}")
    return out


def dataplane_errors(dp: dict[str, Any], node: dict[str, Any]) -> list[str]:
    """The data plane's troubles that `status --json` holds, one line each: the target not
    answering, transports that could not be made, a reconcile that failed or left volumes out,
    operations whose recovery is still pending."""
    out = []
    if dp.get("error"):
        out.append(f"ERROR     data plane: {dp['error']}")
    for c in node.get("stuck_calls") or []:
        out.append(
            f"ERROR     data plane call {c['method']} stuck since {clock(c['since'])} (lane {c['lane']})"
        )
    for t, why in sorted((dp.get("transport_errors") or {}).items()):
        out.append(f"WARNING   transport {t}: {why}")
    rec = node.get("reconcile") or {}
    for e in rec.get("errors") or []:
        out.append(f"ERROR     reconcile{' failed' if rec.get('failed') else ''}: {e}")
    for r in node.get("recovery") or []:
        if r.get("result") != "ok" and r.get("error"):
            out.append(f"ERROR     {r.get('op')} {r.get('name')} ({r.get('result')}): {r['error']}")
    return out


def clock(epoch_s: int) -> str:
    import time

    return time.strftime("%H:%M:%S", time.localtime(epoch_s))
