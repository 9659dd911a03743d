"""Forming a lab's storage VMs into one nodeos cluster, through the `nodeos` CLI inside them.

Every storage VM's nodeosd already listens for peers on its lab address (lab-init writes its
config: `peer_listen = ADDR:7100`, `node_name = VM name`), so forming is only CLI calls: s1
`cluster init`, the others `cluster join` with s1's address and token, then
`node label NODE KEY=VALUE...` per VM. The join token (a short-lived credential, not the cluster
secret) goes to `cluster join` on its stdin: it is never on a command line, printed, logged or
put into an error message.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nodeos.errors import EnvironmentProblem, OperationFailed
from nodeos_devtools.lab.plan import init_argv, join_argv, label_argv, missing_members

if TYPE_CHECKING:
    from nodeos_devtools.lab.lab import Lab

# Bounds, not waits: under TCG on a busy host one CLI call has taken a minute.
FORM_TIMEOUT = 900.0
CALL_TIMEOUT = 600.0


def label_command_available() -> bool:
    """Whether this build's `nodeos` has `node label` (the image carries the same package)."""
    import click

    from nodeos.cli.main import cli

    ctx = click.Context(cli)
    node = cli.get_command(ctx, "node")
    if not isinstance(node, click.Group):
        return False
    return node.get_command(click.Context(node, parent=ctx), "label") is not None


def need_label_command() -> None:
    if not label_command_available():
        raise EnvironmentProblem(
            "cannot label cluster members: this nodeos build has no `nodeos node label` command yet "
            "(the control-plane work adds it); form the cluster without labels (--no-labels)",
            field="label",
        )


def _json_call(
    lab: Lab, vm: str, argv: list[str], what: str, secret: str = "", stdin: str | None = None
) -> tuple[int, Any]:
    r = lab.exec(vm, argv, timeout=CALL_TIMEOUT, input=stdin)
    try:
        out = json.loads(r.stdout)
    except ValueError:
        out = None
    if r.rc != 0:
        text = (r.stdout + r.stderr)[-1500:]
        if secret:
            text = text.replace(secret, "<token>")
        return r.rc, text
    if out is None:
        raise OperationFailed(f"{vm}: {what} printed no JSON: {r.stdout[-500:]!r}")
    return 0, out


def cluster_status(lab: Lab, vm: str) -> dict[str, Any]:
    rc, out = _json_call(lab, vm, ["nodeos", "cluster", "status", "--json"], "cluster status")
    if rc != 0:
        raise OperationFailed(f"{vm}: `nodeos cluster status` exited {rc}: {out}")
    return dict(out)


def form(
    lab: Lab,
    names: list[str],
    labels: dict[str, dict[str, str]],
    progress: Callable[[str], None],
    timeout: float = FORM_TIMEOUT,
) -> dict[str, Any]:
    """init on names[0], join the others, wait until all are members, label; returns the status."""
    if labels:
        need_label_command()
    t0 = time.monotonic()
    deadline = t0 + timeout
    first = names[0]
    rc, init = _json_call(lab, first, init_argv(), "cluster init")
    if rc != 0:
        raise OperationFailed(f"{first}: `nodeos cluster init` exited {rc}: {init}")
    token, address = str(init["token"]), str(init["address"])
    progress(f"cluster {init['cluster_id']}: created on {first} ({address})")
    for vm in names[1:]:
        _join(lab, vm, address, token, deadline)
        progress(f"cluster: {vm} joined")
    status = _wait_members(lab, first, names, deadline)
    for vm in names:
        if vm in labels:
            rc, out = _json_call(lab, first, label_argv(vm, labels[vm]), "node label")
            if rc != 0:
                raise OperationFailed(f"`nodeos node label {vm}` exited {rc}: {out}")
    if labels:
        progress("cluster: labels " + "; ".join(f"{vm} {labels[vm]}" for vm in names if vm in labels))
    progress(f"cluster: {len(names)} member(s) after {time.monotonic() - t0:.0f} s")
    return status


def _join(lab: Lab, vm: str, address: str, token: str, deadline: float) -> None:
    """Join, retrying failures that changed nothing (exit 1: peer not answering yet)."""
    while True:
        rc, out = _json_call(lab, vm, join_argv(address), "cluster join", secret=token, stdin=token)
        if rc == 0:
            return
        # A join whose reply was lost may still have happened: a member must not join again.
        if cluster_status(lab, vm).get("member"):
            return
        if rc != 1 or time.monotonic() > deadline:
            raise OperationFailed(f"{vm}: `nodeos cluster join {address}` exited {rc}: {out}")
        time.sleep(2)


def _wait_members(lab: Lab, vm: str, names: list[str], deadline: float) -> dict[str, Any]:
    while True:
        status = cluster_status(lab, vm)
        missing = missing_members(status, names)
        if not missing:
            return status
        if time.monotonic() > deadline:
            raise OperationFailed(f"cluster: {', '.join(missing)} not members of {vm}'s cluster in time")
        time.sleep(2)
