"""The control API of hosts: register one (with a DH-HMAC-CHAP secret and TLS, issue 28) or
many, and change a host's TLS. A collaborator of the control service:
`ControlService.methods()` takes `HostApi(service).methods()`.

Secrets: a TLS key the operator gives arrives in the request (from a file, never the command
line); one the appliance makes is made here, on the node the console asked, and handed back
once in the reply (never again: `host list` says only the policy). The leader seals both
kinds before it proposes (nodeos/cluster/datakey.py), so the Raft log and every map hold only
sealed forms; no secret is logged.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from nodeos import tlskey
from nodeos.control.params import param
from nodeos.errors import BadInput, NotFound
from nodeos.node import crash

LOG = logging.getLogger("nodeosd.control")
Command = tuple[str, dict[str, Any]]


# --- decisions at the leader (pure) ------------------------------------------------------------


def tcp_reachable(st: dict[str, Any]) -> bool:
    """Whether hosts can reach the cluster over NVMe/TCP (TLS needs it: RDMA has none). Until a
    member has reported its listeners nothing is known, and nothing is refused."""
    seen = [
        li
        for rep in st["reports"].values()
        for li in (((rep or {}).get("dataplane") or {}).get("listeners") or [])
    ]
    return not seen or any(li.get("trtype") == "tcp" for li in seen)


def _check_tls(st: dict[str, Any], policy: str) -> None:
    if policy != "off" and not tcp_reachable(st):
        raise BadInput(
            "TLS is NVMe/TCP's, and no storage node listens on TCP (RDMA only): configure the "
            "nodes' tcp transport first, or register the host without --tls",
            field="tls",
            allowed=["off"],
        )


def _standard_dropped(p: dict[str, Any]) -> dict[str, Any]:
    """`tls_derivation` standard is every host's default: left out, so the command stays at the
    version an older member knows (command_version)."""
    return {k: v for k, v in p.items() if not (k == "tls_derivation" and v in (None, "standard"))}


def decide_host_add(st: dict[str, Any], p: dict[str, Any]) -> Command:
    _check_tls(st, p.get("tls") or "off")
    if p.get("tls_derivation") not in (None, "standard") and (p.get("tls") or "off") == "off":
        raise BadInput(
            "a TLS PSK derivation with TLS off: give --tls required or allowed",
            field="tls_derivation",
            allowed=["required", "allowed"],
        )
    return "host_add", _standard_dropped(p)


def decide_host_update(st: dict[str, Any], p: dict[str, Any]) -> Command:
    if p["nqn"] not in st["hosts"]:
        raise NotFound(f"host {p['nqn']!r} is not registered", field="host")
    policy = p.get("tls") or tlskey.host_policy(st["hosts"][p["nqn"]])
    _check_tls(st, policy)
    if p.get("tls_derivation") is not None and policy == "off":
        raise BadInput(
            f"host {p['nqn']!r} has TLS off: a PSK derivation needs --tls required or allowed",
            field="tls_derivation",
            allowed=["required", "allowed"],
        )
    args = {k: v for k, v in p.items() if k in ("nqn", "tls", "tls_key", "tls_derivation")}
    old = tlskey.host_derivation(st["hosts"][p["nqn"]])
    if args.get("tls_derivation") in (None, "standard") and old == "standard":
        args.pop("tls_derivation", None)  # nothing to change: the version older members know
    return "host_update", args


def command_version(cmd: str, args: dict[str, Any]) -> int:
    """host_add with TLS is version 2, with a PSK derivation 3; host_update with a derivation
    2: a member that does not know the version refuses it rather than register the host
    without TLS or derive its key the other way (docs/api.md, "Compatibility")."""
    if "tls_derivation" in args:
        return 3 if cmd == "host_add" else 2
    return 2 if cmd == "host_add" and (args.get("tls") or "off") != "off" else 1


async def seal_at_leader(cluster: Any, d: Any, op: str, p: dict[str, Any]) -> dict[str, Any]:
    """`p` with its secrets sealed (the leader, right before it proposes). A TLS key another
    host already has is refused: one key secures one host's links only."""
    if op not in ("host.add", "host.update"):
        return p
    nqn = str(p.get("nqn"))
    if isinstance(p.get("dhchap_secret"), str):
        p = {**p, "dhchap_secret": await cluster.seal_host_secret(d, nqn, p["dhchap_secret"])}
    if isinstance(p.get("tls_key"), str):
        others = {n: h for n, h in d.map.state["hosts"].items() if n != nqn and h.get("tls_key")}
        if others and p["tls_key"] in cluster.open_tls_keys(others).values():
            raise BadInput(
                "this TLS key belongs to another host; each host needs a key of its own",
                field="tls_key",
                allowed="a key no other host has (`nvme gen-tls-key`, or let the appliance make one)",
            )
        p = {**p, "tls_key": await cluster.seal_host_secret(d, nqn, p["tls_key"], "tls_key")}
    return p


# --- the methods ---------------------------------------------------------------------------


class HostApi:
    def __init__(self, svc: Any) -> None:
        self.svc = svc  # the ControlService: _run

    def methods(self) -> dict[str, Any]:
        return {"host.add": self.host_add, "host.update": self.host_update}

    async def host_add(self, params: dict[str, Any]) -> dict[str, Any]:
        if params.get("nqns") is not None:  # several hosts without secrets in one map command
            for field in ("dhchap_secret", "tls", "tls_key", "tls_derivation"):
                if params.get(field) is not None:
                    raise BadInput(f"{field} is per host: add such hosts one at a time", field=field)
            nqns = list(dict.fromkeys(params["nqns"]))
            out = await self.svc._run("host.add", {"nqns": nqns, "dhchap_secret": None, "added": time.time()})
            LOG.info("%d hosts added (%d already there)", out["added"], out["present"])
            return dict(out)
        nqn = param(params, "nqn", "host")  # one of nqn and nqns
        req = {"nqn": nqn, "dhchap_secret": params.get("dhchap_secret"), "added": time.time()}
        if params.get("tls") is None and params.get("tls_key") is not None:
            params = {**params, "tls": "required"}  # a key and no policy: TLS required
        made = tls_request(params, req, has_key=False)
        out = dict(await self.svc._run("host.add", req))
        crash.point("host.add:done")
        LOG.info("host %s added (TLS %s)", nqn, out.get("tls", "off"))
        return {**out, "tls_key": made} if made else out

    async def host_update(self, params: dict[str, Any]) -> dict[str, Any]:
        nqn = params["nqn"]
        req: dict[str, Any] = {"nqn": nqn}
        has_key = bool((self.svc._map()["hosts"].get(nqn) or {}).get("tls_key"))
        made = tls_request(params, req, has_key)
        if len(req) == 1:
            raise BadInput(
                "nothing to change: give --tls POLICY, --tls-key-file, --new-tls-key or --tls-derivation",
                field="tls",
            )
        out = dict(await self.svc._run("host.update", req))
        LOG.info("host %s: TLS %s", nqn, out.get("tls"))
        return {**out, "tls_key": made} if made else out


def tls_request(params: dict[str, Any], req: dict[str, Any], has_key: bool) -> str | None:
    """The TLS part of a host request into `req`; the key the appliance made (None: none). A
    key is made when asked (`new_tls_key`), or when TLS is turned on for a host that has no
    key and none is given."""
    policy, key, new = params.get("tls"), params.get("tls_key"), bool(params.get("new_tls_key"))
    if policy == "off" and (key is not None or new):
        raise BadInput(
            "a TLS key with TLS off: pick required or allowed", field="tls", allowed=["required", "allowed"]
        )
    if key is not None and new:
        raise BadInput("give a TLS key or ask for a new one, not both", field="tls_key")
    if policy is not None:
        req["tls"] = policy
    made = None
    if key is None and (new or (policy not in (None, "off") and not has_key)):
        made = key = tlskey.generate()
    if key is not None:
        req["tls_key"] = key
    if params.get("tls_derivation") is not None:
        req["tls_derivation"] = params["tls_derivation"]
    return made
