"""The rolling cluster upgrade, decided (pure: the map in, the next act out; no clock, no I/O).

`nodeos cluster upgrade BUNDLE` starts it; the leader drives it (nodeos/control/upgrade_loop.py)
and every step is a map command (nodeos/update/rolling_map.py), so a leader that dies mid-way
leaves the procedure in the map for the next one, which reads the same record and goes on.

The record (`st["upgrade"]`): the target `version`, the bundle (`sha256`, `size`, the `source`
node that holds it), the failure `domains` in order (each `{name, nodes}`), the current domain
`at` and its `step`, the nodes of that domain the update was `sent` to (with the boot id each
had then: a node that comes back with another boot id rebooted), `state` (running, paused,
stopped with a `reason`, aborted, done) and a short `history`.

Per domain, in order (the leader's own domain last, so leadership moves once):
  handover  every primary on the domain's nodes moves to an in-sync replica elsewhere (the
            planned ANA move of `node drain`; replicas stay, they are resynced after);
  release   (feature level 6: `upgrade_step` v2) the domain's nodes are released for their
            update: their replicas leave every in-sync set by plan and each primary cuts their
            legs out of its mirror at once, while the nodes are still alive, so no write blocks
            on a leg whose node reboots (before it, the legs stayed until the leader called the
            node down: a ~1 min write stall per reboot, docs/benchmarks.md "Updates"). What a
            partial resync needs stays: md's write-intent bitmap counts the writes the legs miss
            and their md superblock stays on the replica. The step waits until every primary
            reports those legs out of its mirror. Released nodes are not counted in sync nor
            re-added until the domain is past `rejoin` (nodeos/storage/failover_map.py
            `released_nodes`); a pause or a stop ends the release (the replicas are taken back
            while the upgrade waits for an operator), and after a resume the `update` step goes
            back to `release` while a node not yet handed its update is counted in sync again;
            a cluster below level 6 goes from handover to update as before;
  update    each node is handed the bundle: it copies it from the source node over the
            storage network, checks it, writes its other slot and reboots into it;
  rejoin    each node is back (another boot id) with the target version; one back on another
            version failed its health gate (the firmware booted the old slot): the upgrade stops
            naming it;
  sync      the release ended: the primaries re-add the legs (md: a re-add that copies only what
            the bitmap marks) and every volume with a replica on the domain is in sync again;
            then the next domain.

Checks before the start (and `--dry-run`): every member up and reporting, no node draining,
every volume ready and in sync, the voters spread so that one domain holds less than a majority
of them, and a version newer than every member's (older or equal only with `--allow-downgrade`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from nodeos.cluster import features
from nodeos.cluster.upgrade_map import ACTIVE
from nodeos.cluster.voters import LEVELS
from nodeos.storage.failover_map import health_of, in_sync_of
from nodeos.update import checks


@dataclass(frozen=True, slots=True)
class Act:
    """What the leader does next. kind: `step` (propose upgrade_step with `args`), `send` (hand
    the update to `node`), `transfer` (move leadership off this node first), `finish`
    (upgrade_state done), `stop` (upgrade_state stopped, `reason`), `wait` (`reason`)."""

    kind: str
    node: int | None = None
    args: Mapping[str, Any] | None = None
    reason: str = ""
    v: int = 1  # the version of `upgrade_step` a `step` is proposed as


def step_version(st: Mapping[str, Any]) -> int:
    """The `upgrade_step` version the leader proposes: 2 (with `release`, feature level 6) once
    every member knows it (the cluster's feature level), else 1."""
    return features.version_for(st, "upgrade_step")


def name_of(st: Mapping[str, Any], nid: int) -> str:
    return str((st["nodes"].get(nid) or {}).get("name") or f"node-{nid}")


def level_for(st: Mapping[str, Any], voters: int) -> str:
    """The failure-domain level the upgrade walks: the highest label level with at least as many
    domains as voters (as the voter keeper chooses), else node by node."""
    nodes = list(st["nodes"].values())
    for level in LEVELS[:-1]:
        values = {(n.get("labels") or {}).get(level) for n in nodes} - {None, ""}
        if len(values) >= max(2, voters):
            return level
    return "node"


def domain_name(st: Mapping[str, Any], nid: int, level: str) -> str:
    if level == "node":
        return name_of(st, nid)
    value = (st["nodes"][nid].get("labels") or {}).get(level)
    return f"{level}={value}" if value else f"node={name_of(st, nid)}"


def domains(st: Mapping[str, Any], voters: Iterable[int], leader: int) -> list[dict[str, Any]]:
    """The domains in the order they are upgraded: those without a voter first, then those with
    one, the leader's last; by name within each."""
    vs = set(voters)
    level = level_for(st, len(vs))
    groups: dict[str, list[int]] = {}
    for nid in sorted(st["nodes"]):
        groups.setdefault(domain_name(st, nid, level), []).append(int(nid))

    def rank(item: tuple[str, list[int]]) -> tuple[int, int, str]:
        name, nodes = item
        return (leader in nodes, bool(vs & set(nodes)), name)

    return [{"name": n, "nodes": ns} for n, ns in sorted(groups.items(), key=rank)]


def _not_newer(version: str, have: str) -> bool:
    try:
        return checks.version_key(version) <= checks.version_key(have)
    except ValueError:
        return False  # a release string this node cannot order: the bundle's own check decides


def precheck(
    st: Mapping[str, Any],
    version: str,
    voters: Iterable[int],
    allow_downgrade: bool = False,
) -> list[str]:
    """Why the upgrade cannot start now (empty: it can). Each reason names what to fix."""
    out: list[str] = []
    up = st.get("upgrade") or {}
    if up.get("state") in ACTIVE:
        out.append(f"upgrade {up['id']} to {up['version']} is {up['state']}: resume or abort it first")
    for nid in sorted(st["nodes"]):
        node, name = st["nodes"][nid], name_of(st, nid)
        if health_of(dict(st), nid) != "up":
            out.append(f"node {name} is down")
        if node.get("state") == "draining":
            out.append(f"node {name} is draining: undrain it or remove it first")
        have = node.get("release")
        if have and not allow_downgrade and _not_newer(version, str(have)):
            out.append(f"node {name} runs {have}, not older than {version} (--allow-downgrade to go back)")
    for uuid in sorted(st["volumes"]):
        vol = st["volumes"][uuid]
        if vol.get("state") != "ready":
            out.append(f"volume {vol.get('name') or uuid} is {vol.get('state')}, not ready")
        elif len(in_sync_of(vol)) < len(vol.get("placement") or []):
            out.append(f"volume {vol.get('name') or uuid} is not in sync on every replica")
    vs = sorted(set(voters))
    level = level_for(st, len(vs))
    for uuid in sorted(st["volumes"]):
        vol = st["volumes"][uuid]
        doms = {
            domain_name(st, s["node"], level) for s in vol.get("placement") or [] if s["node"] in st["nodes"]
        }
        if int(vol.get("replicas") or 1) > 1 and len(doms) == 1:
            out.append(
                f"volume {vol.get('name') or uuid} has every replica in {doms.pop()}: it would stop "
                "while that domain is upgraded"
            )
    per: dict[str, list[str]] = {}
    for v in vs:
        if v in st["nodes"]:
            per.setdefault(domain_name(st, v, level), []).append(name_of(st, v))
    for dom, names in sorted(per.items()):
        if len(vs) > 1 and len(names) * 2 >= len(vs):
            out.append(
                f"{dom} holds {len(names)} of the {len(vs)} voters ({', '.join(names)}): the cluster "
                "would lose its majority while it is upgraded (spread the voters: `cluster status`)"
            )
    return out


def _domain(up: Mapping[str, Any]) -> dict[str, Any]:
    return dict(up["domains"][up["at"]])


def primaries_on(st: Mapping[str, Any], nodes: Iterable[int]) -> list[str]:
    """Replicated volumes whose primary is on one of `nodes` (the handover's work left)."""
    ns = set(nodes)
    return sorted(
        str(v.get("name") or u)
        for u, v in st["volumes"].items()
        if int(v.get("replicas") or 1) > 1 and v.get("primary") in ns and v.get("state") == "ready"
    )


def out_of_sync(st: Mapping[str, Any], nodes: Iterable[int]) -> list[str]:
    """Volumes with a replica on `nodes` that is not (yet) in sync again."""
    ns = set(nodes)
    out = []
    for u, v in st["volumes"].items():
        placed = {s["node"] for s in v.get("placement") or []}
        if placed & ns and not (placed & ns) <= set(in_sync_of(v)):
            out.append(str(v.get("name") or u))
    return sorted(out)


def legs_held(st: Mapping[str, Any], nodes: Iterable[int]) -> list[str]:
    """Volumes whose primary still holds a leg of one of `nodes` in its mirror (its report at the
    volume's epoch calls it in sync or syncing; no such report yet: held): the release's work left."""
    ns = set(nodes)
    out = []
    for u, v in st["volumes"].items():
        if int(v.get("replicas") or 1) <= 1 or v.get("state") != "ready":
            continue
        on = ({int(s["node"]) for s in v.get("placement") or []} & ns) - {int(v["primary"])}
        if not on:
            continue
        rep = ((st["reports"].get(v["primary"]) or {}).get("replicas") or {}).get(u) or {}
        members = {int(k): m for k, m in (rep.get("members") or {}).items()}
        if int(rep.get("epoch") or 0) != int(v["epoch"]) or any(
            members.get(n) in ("in-sync", "syncing") for n in on
        ):
            out.append(str(v.get("name") or u))
    return sorted(out)


def counted_again(st: Mapping[str, Any], nodes: Iterable[int]) -> list[str]:
    """Volumes that count one of `nodes` in sync as a secondary beside their in-sync primary
    (a release would drop it): after a resume, the release's work to do again."""
    ns = set(nodes)
    out = []
    for u, v in st["volumes"].items():
        if int(v.get("replicas") or 1) <= 1 or v.get("state") != "ready":
            continue
        cur = set(in_sync_of(dict(v)))
        if int(v["primary"]) in cur and (cur & ns) - {int(v["primary"])}:
            out.append(str(v.get("name") or u))
    return sorted(out)


def _step(up: Mapping[str, Any], to_at: int, to_step: str, note: str, v: int = 1, **extra: Any) -> Act:
    args = {"id": up["id"], "at": up["at"], "step": up["step"], "to_at": to_at, "to_step": to_step}
    return Act("step", args={**args, "note": note, **extra}, v=v)


def decide(st: Mapping[str, Any], leader: int, seen: Mapping[int, Mapping[str, Any]]) -> Act:
    """The next act of a running upgrade. `seen`: what each node of the current domain answered
    the leader's `update.status` just now (`boot_id`, `release`); a node that did not answer is
    not in it. (Not the map: a node's release in the map may lag its restart.)"""
    up = st.get("upgrade") or {}
    if up.get("state") != "running":
        return Act("wait", reason=f"upgrade is {up.get('state') or 'not started'}")
    if up["at"] >= len(up["domains"]):
        return Act("finish")
    dom = _domain(up)
    nodes = [int(n) for n in dom["nodes"] if n in st["nodes"]]
    step, ver = up["step"], step_version(st)
    if step in ("handover", "release", "update"):
        # Taking a domain down while a node of another is down could take the voters' majority or
        # a volume's last in-sync replica with it: stop rather than go on.
        down = [
            name_of(st, n) for n in sorted(st["nodes"]) if n not in nodes and health_of(dict(st), n) != "up"
        ]
        if down:
            return Act("stop", reason=f"node {', '.join(down)} is down: {dom['name']} is not taken down too")
    if step == "handover":
        left = primaries_on(st, nodes)
        if left:
            return Act("wait", reason=f"{dom['name']}: primaries to hand over: {', '.join(left[:5])}")
        if ver >= 2:
            note = f"{dom['name']}: primaries handed over; its replicas released for its update"
            return _step(up, up["at"], "release", note, ver)
        return _step(up, up["at"], "update", f"{dom['name']}: primaries handed over")
    if step == "release":
        if counted_again(st, nodes):  # resumed after a pause or a stop, which ended the release
            note = f"{dom['name']}: resumed: its replicas released again for its update"
            return _step(up, up["at"], "release", note, ver)
        held = legs_held(st, nodes)
        if held:
            return Act(
                "wait", reason=f"{dom['name']}: primaries to cut the released legs of {', '.join(held[:5])}"
            )
        return _step(up, up["at"], "update", f"{dom['name']}: released legs cut by every primary", ver)
    sent = {int(k): v for k, v in (up.get("sent") or {}).items()}
    if step == "update":
        todo = [n for n in nodes if n not in sent]
        if ver >= 2 and todo and counted_again(st, todo):
            # Resumed after a pause or a stop (which ended the release: their replicas were taken
            # back meanwhile): released again before any of them is handed its update.
            note = f"{dom['name']}: resumed: its replicas released again for its update"
            return _step(up, up["at"], "release", note, ver)
        if not todo:
            return _step(up, up["at"], "rejoin", f"{dom['name']}: update handed to every node", ver)
        nid = todo[0]
        if nid == leader:
            return Act("transfer", node=nid, reason=f"{name_of(st, nid)} leads and is updated next")
        if health_of(dict(st), nid) != "up":
            return Act("stop", reason=f"node {name_of(st, nid)} is down before its update")
        return Act("send", node=nid)
    if step == "rejoin":
        waiting = []
        for nid in nodes:
            now = seen.get(nid) or {}
            if now.get("phase") == "failed" and now.get("boot_id") == sent.get(nid):
                return Act(
                    "stop", reason=f"node {name_of(st, nid)}: {now.get('error') or 'its update failed'}"
                )
            if not now or now.get("boot_id") == sent.get(nid):
                waiting.append(name_of(st, nid))
            elif now.get("release") != up["version"]:
                back_on = now.get("release") or "an older release"
                return Act(
                    "stop",
                    reason=f"node {name_of(st, nid)} came back on {back_on}, not {up['version']}: it "
                    "failed its health gate and the firmware booted its old slot",
                )
            elif health_of(dict(st), nid) != "up":
                waiting.append(name_of(st, nid))
        if waiting:
            return Act("wait", reason=f"{dom['name']}: waiting for {', '.join(waiting)} to come back")
        return _step(up, up["at"], "sync", f"{dom['name']}: every node back on {up['version']}", ver)
    if step == "sync":
        left = out_of_sync(st, nodes)
        if left:
            return Act("wait", reason=f"{dom['name']}: resyncing {', '.join(left[:5])}")
        nxt = up["at"] + 1
        return _step(up, nxt, "handover", f"{dom['name']}: upgraded, every replica in sync", ver)
    return Act("stop", reason=f"unknown step {step!r}")
