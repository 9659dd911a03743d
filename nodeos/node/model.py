"""Pure decisions of the node service: records, export specs, listeners, pool choice and
what recovery does with an interrupted operation. No I/O here."""

from __future__ import annotations

import time
import uuid as uuidlib
from dataclasses import dataclass
from typing import Any

from nodeos import tlskey
from nodeos.dataplane.base import ExportSpec, HostAccess, Listener, is_tls
from nodeos.errors import BadInput, NotFound, OperationFailed
from nodeos.node import opspec

NQN_PREFIX = "nqn.2014-08.io.nodeos:vol:"
PORT = "4420"

# What recovery does with an intent left by a daemon that died mid-operation: from each
# operation's one definition (nodeos/node/opspec.py).
RECOVERY: dict[str, str] = opspec.recovery()


def volume_nqn(vol_uuid: str) -> str:
    return f"{NQN_PREFIX}{vol_uuid}"


def new_volume(
    name: str,
    pool: dict[str, Any],
    size_bytes: int,
    *,
    qos_iops: int | None = None,
    qos_mbps: int | None = None,
    kind: str = "volume",
    origin: str | None = None,
) -> dict[str, Any]:
    u = uuidlib.uuid4()
    return {
        "name": name,
        "uuid": str(u),
        "vol_id": "v" + u.hex,
        "pool": pool["name"],
        "pool_id": pool["pool_id"],
        "size_bytes": size_bytes,
        "nqn": volume_nqn(str(u)),
        "nguid": u.hex,
        "serial": u.hex[:20],
        "kind": kind,
        "origin": origin,
        "state": "creating",
        "hosts": [],
        "qos_iops": qos_iops,
        "qos_mbps": qos_mbps,
        "created": time.time(),
    }


def adrfam(addr: str) -> str:
    return "ipv6" if ":" in addr else "ipv4"


def listeners(addresses: list[str], transports: list[str], rdma_addresses: set[str]) -> tuple[Listener, ...]:
    """TCP on every storage address; RDMA on those whose net device has an RDMA port."""
    out: list[Listener] = []
    for a in addresses:
        if "tcp" in transports:
            out.append(Listener("tcp", a, PORT, adrfam(a)))  # type: ignore[arg-type]
        if "rdma" in transports and a in rdma_addresses:
            out.append(Listener("rdma", a, PORT, adrfam(a)))  # type: ignore[arg-type]
    return tuple(out)


def host_access(granted: list[str], hosts: dict[str, dict[str, Any]]) -> tuple[HostAccess, ...]:
    """The granted hosts with their keys, from hosts whose secrets are opened already
    (nodeos/cluster/datakey.py open_hosts). A granted host whose secret did not open stops the
    export with the reason: exporting it without its key would drop its authentication (or
    its TLS)."""
    out = []
    for h in granted:
        if h not in hosts:
            continue
        rec = hosts[h] or {}
        if rec.get("dhchap_error"):
            raise OperationFailed(str(rec["dhchap_error"]), field="dhchap_secret")
        if rec.get("tls_error") and tlskey.host_policy(rec) != "off":
            raise OperationFailed(str(rec["tls_error"]), field="tls_key")
        tls = rec.get("tls_key") if tlskey.host_policy(rec) != "off" else None
        out.append(HostAccess(h, rec.get("dhchap_secret"), tls, tlskey.host_derivation(rec)))
    return tuple(out)


def tls_listeners(lst: tuple[Listener, ...], policy: tlskey.Policy) -> tuple[Listener, ...]:
    """A volume's listeners under its TLS policy (tlskey.volume_policy): `off` the node's
    listeners; `allowed` those and a TLS listener beside each TCP one; `required` the TLS
    listeners alone (no plain TCP, no RDMA: RDMA has no TLS)."""
    if policy == "off":
        return lst
    plain_tcp = [li for li in lst if li.trtype == "tcp" and not is_tls(li)]
    tls = tuple(Listener("tcp", li.traddr, tlskey.TLS_SVCID, li.adrfam) for li in plain_tcp)
    return tls if policy == "required" else lst + tls


def export_spec(
    vol: dict[str, Any], lst: tuple[Listener, ...], hosts: dict[str, dict[str, Any]], fenced: bool = False
) -> ExportSpec:
    """The subsystem a volume should have: its granted hosts (with their DH-HMAC-CHAP keys).
    `fenced`: this node lost its lease; a replicated volume's front end is ANA inaccessible."""
    access = host_access(vol.get("hosts", []), hosts)
    lst = tls_listeners(lst, tlskey.volume_policy(vol.get("hosts", []), hosts))
    spec = ExportSpec(
        nqn=vol["nqn"],
        serial=vol["serial"],
        pool_id=vol["pool_id"],
        vol_id=vol["vol_id"],
        uuid=vol["uuid"],
        nguid=vol["nguid"],
        listeners=lst,
        hosts=access,
        qos_iops=vol.get("qos_iops"),
        qos_mbps=vol.get("qos_mbps"),
    )
    if int(vol.get("replicas") or 1) > 1:
        from nodeos.node import replicas

        return replicas.front_end(vol, spec, fenced)
    return spec


def listeners_json(lst: tuple[Listener, ...]) -> list[dict[str, str]]:
    return [
        {"trtype": li.trtype, "traddr": li.traddr, "trsvcid": li.trsvcid, "adrfam": li.adrfam} for li in lst
    ]


@dataclass(frozen=True)
class PoolChoice:
    pool: dict[str, Any]
    free_bytes: int
    size_bytes: int


def failing_drives_of(pool: dict[str, Any], drives: dict[str, dict[str, Any]]) -> list[str]:
    return [d for d in pool.get("drives", []) if (drives.get(d) or {}).get("health") == "failing"]


def choose_pool(
    pools: dict[str, dict[str, Any]],
    capacity: dict[str, tuple[int, int]],
    drives: dict[str, dict[str, Any]],
    wanted: str | None,
    size_bytes: int,
) -> PoolChoice:
    """Pick the pool for a new volume. `capacity`: pool_id -> (size, free) from the data plane.

    A pool with a failing drive takes no new volume; without --pool the healthy pool with the
    most free space wins. A volume larger than its whole pool is refused (thin volumes may
    overcommit the pool together, but one volume cannot be larger than the pool itself).
    """
    if wanted is not None:
        pool = pools.get(wanted)
        if pool is None:
            raise NotFound(f"pool {wanted!r} does not exist", field="pool", allowed=sorted(pools) or None)
        if pool["state"] != "ready":
            raise OperationFailed(f"pool {wanted!r} is {pool['state']}, not ready", field="pool")
        bad = failing_drives_of(pool, drives)
        if bad:
            raise OperationFailed(
                f"pool {wanted!r} has failing drive(s) {', '.join(bad)}; new volumes avoid it", field="pool"
            )
        cands = [pool]
    else:
        ready = [p for p in pools.values() if p["state"] == "ready"]
        if not ready:
            raise BadInput(
                "there is no pool on this node; create one with `nodeos pool create`", field="pool"
            )
        cands = [p for p in ready if not failing_drives_of(p, drives)]
        if not cands:
            raise OperationFailed("every pool has a failing drive; new volumes avoid them", field="pool")
    best: PoolChoice | None = None
    for p in cands:
        size, free = capacity.get(p["pool_id"], (p.get("size_bytes", 0), p.get("size_bytes", 0)))
        c = PoolChoice(p, free, size)
        if best is None or c.free_bytes > best.free_bytes:
            best = c
    assert best is not None
    if best.size_bytes and size_bytes > best.size_bytes:
        raise BadInput(
            f"size of {size_bytes} bytes is larger than pool {best.pool['name']!r} ({best.size_bytes} bytes)",
            field="size",
            allowed=f"<= {best.size_bytes} bytes",
        )
    return best


def pick_drives(
    requested: list[str] | str, drives: dict[str, dict[str, Any]], used: dict[str, str]
) -> list[dict[str, Any]]:
    """Resolve `--drives` (ids, serials or device names, or `all`) to free, healthy drives this
    node's data plane can use (`usable`, nodeos/node/inventory.py: SPDK takes the drives it
    owns, the kernel target the kernel's)."""
    if requested == "all":
        chosen = [
            d
            for d in drives.values()
            if d["id"] not in used and d.get("health") != "failing" and d.get("usable", True)
        ]
        if not chosen:
            raise BadInput(
                "no free healthy drive on this node", field="drives", allowed=sorted(drives) or None
            )
        return chosen
    by_any: dict[str, dict[str, Any]] = {}
    for d in drives.values():
        for k in (d["id"], d.get("serial"), d.get("name"), d.get("path")):
            if k:
                by_any.setdefault(str(k), d)
    out: list[dict[str, Any]] = []
    for r in requested:
        d = by_any.get(r)
        if d is None:
            raise NotFound(f"drive {r!r} does not exist", field="drives", allowed=sorted(drives) or None)
        if d["id"] in used:
            raise BadInput(f"drive {r!r} already belongs to pool {used[d['id']]!r}", field="drives")
        if d.get("health") == "failing":
            raise BadInput(f"drive {r!r} is failing; it cannot join a pool", field="drives")
        if not d.get("usable", True):
            raise BadInput(f"drive {r!r} cannot join a pool here: {d.get('unusable')}", field="drives")
        if any(o["id"] == d["id"] for o in out):
            raise BadInput(f"drive {r!r} is named twice", field="drives")
        out.append(d)
    return out


def public_host(h: dict[str, Any]) -> dict[str, Any]:
    """A host as shown to operators: whether it has a secret, never the secret."""
    return {
        "nqn": h["nqn"],
        "dhchap": bool(h.get("dhchap_secret")),
        "tls": tlskey.host_policy(h),
        "tls_derivation": tlskey.host_derivation(h) if tlskey.host_policy(h) != "off" else None,
        "added": h.get("added"),
    }
