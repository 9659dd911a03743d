"""Hosts and grants in the cluster map: registered host NQNs (with an optional DH-HMAC-CHAP
secret) and the hosts each volume (or published volume) grants. Pure command handlers,
registered by nodeos/cluster/map.py; the shapes are in nodeos/cluster/storage_map.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nodeos.cluster import events as map_events
from nodeos.cluster.storage_map import _req, volume_by_name
from nodeos.errors import AlreadyExists, BadInput, NotFound, OperationFailed

MAX_HOSTS_AT_ONCE = 1000  # hosts one map command registers or grants


# --- grants ----------------------------------------------------------------------------------


def volume_hosts_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    """Grant (`add: true`) or revoke a host on a volume."""
    return grant_or_revoke(st, volume_by_name(st, _req(args, "name", str)), args)


def _hosts_arg(args: dict[str, Any]) -> list[str]:
    """`host` (one NQN) or `hosts` (several at once: one map command for a fleet)."""
    if "hosts" not in args:
        return [_req(args, "host", str)]
    hosts = args["hosts"]
    if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) for h in hosts):
        raise BadInput("hosts must list at least one host NQN", field="hosts")
    if len(hosts) > MAX_HOSTS_AT_ONCE:
        raise BadInput(
            f"at most {MAX_HOSTS_AT_ONCE} hosts at once, not {len(hosts)}",
            field="hosts",
            allowed=f"1-{MAX_HOSTS_AT_ONCE}",
        )
    return list(dict.fromkeys(hosts))


def grant_or_revoke(st: dict[str, Any], vol: dict[str, Any], args: dict[str, Any]) -> Any:
    """Hosts' grants on a volume (or a published one) added (`add: true`) or removed: `host`, or
    `hosts` (all or none: every one registered; for a revoke, every one granted)."""
    asked = _hosts_arg(args)
    for host in asked:
        if host not in st["hosts"]:
            raise NotFound(f"host {host!r} is not registered; add it with `nodeos host add`", field="host")
    hosts = list(vol["hosts"])
    if args.get("add"):
        changed = [h for h in asked if h not in hosts]
        hosts += changed
    else:
        for host in asked:
            if host not in hosts:
                raise NotFound(f"host {host!r} has no grant on volume {vol['name']!r}", field="host")
        changed = asked
        hosts = [h for h in hosts if h not in set(asked)]
    vol["hosts"] = hosts
    what = "granted" if args.get("add") else "revoked"
    for host in changed:
        msg = f"host {host} {what} on volume {vol['name']}"
        map_events.record(st, f"host_{what}", msg, volume=vol["uuid"], host=host)
    if "hosts" in args:
        return {"name": vol["name"], "hosts": asked, "changed": len(changed)}
    return {"name": vol["name"], "host": asked[0], "changed": bool(changed)}


# --- hosts -----------------------------------------------------------------------------------


def host_add_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    """Register a host (`nqn`, optional `dhchap_secret`), or several without secrets (`nqns`: one
    map command for a fleet; those already registered without a secret are left as they are)."""
    secret = args.get("dhchap_secret")
    if secret is not None and not isinstance(secret, str):
        raise BadInput("dhchap_secret must be a string", field="dhchap_secret")
    if "nqns" in args:
        nqns = _hosts_arg({"hosts": args["nqns"]})
        if secret is not None:
            raise BadInput(
                "a DH-HMAC-CHAP secret is per host: add such hosts one at a time", field="dhchap_secret"
            )
        for nqn in nqns:
            if (st["hosts"].get(nqn) or {}).get("dhchap_secret"):
                raise AlreadyExists(f"host {nqn!r} is already registered, with a secret", field="host")
        new = [n for n in nqns if n not in st["hosts"]]
        for nqn in new:
            st["hosts"][nqn] = {"nqn": nqn, "dhchap_secret": None, "added": args.get("added")}
        return {"nqns": nqns, "added": len(new), "present": len(nqns) - len(new)}
    nqn = _req(args, "nqn", str)
    if nqn in st["hosts"]:
        raise AlreadyExists(f"host {nqn!r} is already registered", field="host")
    st["hosts"][nqn] = {"nqn": nqn, "dhchap_secret": secret, "added": args.get("added")}
    return {"nqn": nqn, "dhchap": bool(secret), "added": args.get("added")}


def host_remove_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    nqn = _req(args, "nqn", str)
    if nqn not in st["hosts"]:
        raise NotFound(f"host {nqn!r} is not registered", field="host")
    granted = sorted(v["name"] for v in st["volumes"].values() if nqn in v["hosts"])
    granted += sorted(v["name"] for v in (st.get("published") or {}).values() if nqn in v["hosts"])
    if granted:
        raise OperationFailed(
            f"host {nqn!r} still has grants on {', '.join(granted)}; revoke them first", field="host"
        )
    del st["hosts"][nqn]
    return {"nqn": nqn, "removed": True}


HANDLERS: dict[str, dict[int, Callable[[dict[str, Any], dict[str, Any]], Any]]] = {
    "volume_hosts": {1: volume_hosts_v1},
    "host_add": {1: host_add_v1},
    "host_remove": {1: host_remove_v1},
}
