"""Which discovery referrals each of this node's discovery ports carries (pure).

Every discovery port refers to the other storage nodes' discovery ports of the same transport:
a GPU node that discovers over RDMA from one storage node is referred to the others over RDMA
(issue 28: before, only TCP ports carried referrals, and `nvme connect-all -t rdma` found one
path of a 3-replica volume). A transport this node does not listen on gets no port here; one
another node does not listen on is not referred to.
"""

from __future__ import annotations

from typing import Any

from nodeos.dataplane.base import Listener

Addr = tuple[str, str, str]  # (trtype, traddr, adrfam)
TRANSPORTS = ("tcp", "rdma")


def _addr(li: dict[str, Any]) -> Addr | None:
    if li.get("trtype") not in TRANSPORTS or not li.get("traddr"):
        return None
    return (str(li["trtype"]), str(li["traddr"]), str(li.get("adrfam") or "ipv4"))


def mine(listeners: list[dict[str, Any]]) -> tuple[Addr, ...]:
    """This node's addresses per transport (from its listeners), sorted, without repeats."""
    return tuple(sorted({a for a in map(_addr, listeners) if a is not None}))


def others(st: dict[str, Any], me: int) -> tuple[Addr, ...]:
    """Every other member's reported addresses per transport, sorted, without repeats."""
    found = {
        a
        for nid, rep in st["reports"].items()
        if nid != me
        for a in map(_addr, ((rep or {}).get("dataplane") or {}).get("listeners") or [])
        if a is not None
    }
    return tuple(sorted(found))


def per_port(
    mine: tuple[Addr, ...], others: tuple[Addr, ...], svcid: str
) -> list[tuple[Listener, tuple[Listener, ...]]]:
    """(discovery port, its referrals) for each of this node's addresses."""
    out = []
    for trtype, traddr, fam in mine:
        port = Listener(trtype, traddr, svcid, fam)  # type: ignore[arg-type]
        refs = tuple(
            Listener(t, a, svcid, f)  # type: ignore[arg-type]
            for t, a, f in others
            if t == trtype
        )
        out.append((port, refs))
    return out
