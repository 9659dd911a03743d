"""Hosts and grants in the cluster map: registered host NQNs (with an optional DH-HMAC-CHAP
secret, and a TLS policy with its key: nodeos/tlskey.py) and the hosts each volume (or
published volume) grants. Pure command handlers,
registered by nodeos/cluster/map.py; the shapes are in nodeos/storage/storage_map.py.

A secret arrives sealed under the cluster data key (the leader seals it before it proposes:
nodeos/cluster/datakey.py); a map from before holds it in plain text until `host_seal`. A TLS
key is always sealed (it came after sealing).

TLS is a property of a listener, not of a host, on both data planes: a volume granted to a host
that requires TLS is exported over TLS only, so a host without a key could not reach it. Such
grants are refused here (tlskey.grant_conflicts), on every node alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nodeos import tlskey
from nodeos.cluster import events as map_events
from nodeos.cluster.datakey import is_sealed
from nodeos.errors import AlreadyExists, BadInput, NotFound, OperationFailed
from nodeos.storage.lookup import volume_by_name
from nodeos.storage.map_common import req

MAX_HOSTS_AT_ONCE = 1000  # hosts one map command registers or grants


# --- grants ----------------------------------------------------------------------------------


def volume_hosts_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    """Grant (`add: true`) or revoke a host on a volume."""
    return grant_or_revoke(st, volume_by_name(st, req(args, "name", str)), args)


def _hosts_arg(args: dict[str, Any]) -> list[str]:
    """`host` (one NQN) or `hosts` (several at once: one map command for a fleet)."""
    if "hosts" not in args:
        return [req(args, "host", str)]
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
        why = tlskey.grant_conflicts(hosts, st["hosts"]) if changed else None
        if why:
            raise BadInput(f"cannot grant volume {vol['name']!r}: {why}", field="host")
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


def _tls_args(args: dict[str, Any]) -> tuple[tlskey.Policy, str | None]:
    """`tls` (policy, default off) and `tls_key` (sealed): a key with every policy but off."""
    policy = tlskey.check_policy(args.get("tls") or "off")
    key = args.get("tls_key")
    if policy == "off":
        if key is not None:
            raise BadInput("a TLS key needs a TLS policy (required or allowed)", field="tls")
        return policy, None
    if not is_sealed(key):
        raise BadInput("TLS needs the host's key, sealed by the leader", field="tls_key")
    return policy, key


def _derivation(value: Any) -> dict[str, str]:
    """The record's `tls_derivation` (version 3 of host_add, 2 of host_update): absent when
    standard, so a host record reads as it did before the choice existed."""
    d = tlskey.check_derivation(value or "standard")
    return {} if d == "standard" else {"tls_derivation": d}


def host_add_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    """Register a host (`nqn`, optional `dhchap_secret`; version 2 adds `tls` and `tls_key`,
    version 3 `tls_derivation`), or
    several without secrets (`nqns`: one map command for a fleet; those already registered
    without a secret are left as they are)."""
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
    nqn = req(args, "nqn", str)
    if nqn in st["hosts"]:
        raise AlreadyExists(f"host {nqn!r} is already registered", field="host")
    policy, key = _tls_args(args)
    rec = {"nqn": nqn, "dhchap_secret": secret, "added": args.get("added")}
    if policy != "off":
        rec.update(tls=policy, tls_key=key, **_derivation(args.get("tls_derivation")))
    st["hosts"][nqn] = rec
    out = {"nqn": nqn, "dhchap": bool(secret), "tls": policy, "added": args.get("added")}
    return {**out, "tls_derivation": tlskey.host_derivation(rec)} if policy != "off" else out


def host_update_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    """A host's TLS: `tls` (policy) and `tls_key` (sealed; absent: the one it has). Refused if
    it would leave a host granted a volume it could no longer reach (tlskey.grant_conflicts)."""
    nqn = req(args, "nqn", str)
    old = st["hosts"].get(nqn)
    if old is None:
        raise NotFound(f"host {nqn!r} is not registered", field="host")
    policy = tlskey.check_policy(args.get("tls") or tlskey.host_policy(old))
    if policy == "off" and args.get("tls_key") is not None:
        raise BadInput(
            f"host {nqn!r} has TLS off: give a policy with its key",
            field="tls",
            allowed=["required", "allowed"],
        )
    key = args.get("tls_key") if args.get("tls_key") is not None else old.get("tls_key")
    policy, key = _tls_args({"tls": policy, "tls_key": key if policy != "off" else None})
    derivation = _derivation(args.get("tls_derivation") or tlskey.host_derivation(old))
    rec = {k: v for k, v in old.items() if k not in ("tls", "tls_key", "tls_derivation")}
    if policy != "off":
        rec.update(tls=policy, tls_key=key, **derivation)
    hosts = {**st["hosts"], nqn: rec}
    for vol in [*st["volumes"].values(), *(st.get("published") or {}).values()]:
        why = tlskey.grant_conflicts(vol["hosts"], hosts) if nqn in vol["hosts"] else None
        if why:
            raise BadInput(f"volume {vol['name']!r} would be out of reach: {why}", field="tls")
    st["hosts"][nqn] = rec
    changed = (tlskey.host_policy(old), old.get("tls_key"), tlskey.host_derivation(old)) != (
        policy,
        key,
        tlskey.host_derivation(rec),
    )
    if changed:
        msg = f"host {nqn} TLS {policy}" + (" with a new key" if key and key != old.get("tls_key") else "")
        if tlskey.host_derivation(rec) != tlskey.host_derivation(old):
            msg += f", PSK derivation {tlskey.host_derivation(rec)}"
        map_events.record(st, "host_tls_changed", msg, host=nqn)
    return {"nqn": nqn, "tls": policy, "tls_derivation": tlskey.host_derivation(rec), "changed": changed}


def host_remove_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    nqn = req(args, "nqn", str)
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


def host_seal_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    """Plain-text secrets (from before sealing) replaced by the sealed ones the leader made
    (nodeos/cluster/datakeys_member.py): `hosts: [{nqn, added, sealed}]`. A host removed, added
    again (another `added`) or sealed meanwhile is left as it is: the leader sealed what it
    read, and only that may be replaced. The map cannot check that `sealed` holds the same
    secret (it has no key); the leader made it from the value it read."""
    items = args.get("hosts")
    if not isinstance(items, list) or not items or len(items) > MAX_HOSTS_AT_ONCE:
        raise BadInput(f"hosts must list 1 to {MAX_HOSTS_AT_ONCE} hosts to seal", field="hosts")
    sealed = 0
    for it in items:
        if not isinstance(it, dict) or not isinstance(it.get("nqn"), str) or not is_sealed(it.get("sealed")):
            raise BadInput("each host to seal needs an nqn and a sealed secret", field="hosts")
        h = st["hosts"].get(it["nqn"])
        if h is None or h.get("added") != it.get("added") or not h.get("dhchap_secret"):
            continue
        if is_sealed(h["dhchap_secret"]):
            continue
        h["dhchap_secret"] = it["sealed"]
        sealed += 1
    return {"sealed": sealed, "skipped": len(items) - sealed}


HANDLERS: dict[str, dict[int, Callable[[dict[str, Any], dict[str, Any]], Any]]] = {
    "volume_hosts": {1: volume_hosts_v1},
    "host_add": {1: host_add_v1, 2: host_add_v1, 3: host_add_v1},
    "host_update": {1: host_update_v1, 2: host_update_v1},
    "host_remove": {1: host_remove_v1},
    "host_seal": {1: host_seal_v1},
}
