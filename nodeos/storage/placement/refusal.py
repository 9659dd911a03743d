"""Why a placement is impossible, in words (pure; scans every node: refusals only).

"3 replicas spread by rack need 3 racks with ≥ 100 GiB free; 2 have: a, b" — then the nodes
outside those domains that had the space but could not be used, and why, and a note that a node
without the label is a domain of its own. The error names the field to change: `spread` when
a finer spread would fit, `replicas` when fewer replicas would, `size` when nothing fits.
"""

from __future__ import annotations

from collections.abc import Iterable

from nodeos.storage.placement.model import SPREADS, NodeCandidate, PlacementRefused, domain_of, human_size

PLURAL = {"node": "nodes", "rack": "racks", "switch": "switches"}
MAX_NAMED = 5  # nodes named in the "not counted" part; the rest are counted


PoolView = tuple[str, int, bool]  # pool id, usable bytes (min(free, size)), healthy


def refusal(
    nodes: Iterable[tuple[NodeCandidate, list[PoolView]]],
    size: int,
    replicas: int,
    spread: str,
    exclude: set[int],
    avoid: set[int],
) -> PlacementRefused:
    nodes = sorted(nodes, key=lambda np: np[0].node_id)
    eligible: list[NodeCandidate] = []
    not_counted: list[tuple[NodeCandidate, str]] = []  # had the space, could not be used: why
    for node, pools in nodes:
        fits = [pid for pid, usable, _ in pools if usable >= size]
        if not fits:
            continue
        if not node.schedulable:
            not_counted.append((node, "not schedulable"))
        elif not any(healthy for pid, usable, healthy in pools if usable >= size):
            not_counted.append((node, f"{'pools' if len(fits) > 1 else 'pool'} {', '.join(fits)} unhealthy"))
        elif node.node_id in exclude:
            not_counted.append((node, "excluded"))
        else:
            eligible.append(node)
    by_id = {n.node_id: n for n, _ in nodes}

    def domains(level: str) -> list[str]:
        avoided = {domain_of(by_id[n], level) for n in avoid if n in by_id}
        return sorted({domain_of(n, level) for n in eligible} - avoided)

    have = domains(spread)
    finer = [s for s in SPREADS if len(domains(s)) >= replicas]
    k = len(have)
    noun = PLURAL[spread] if replicas > 1 else spread
    text = (
        f"{replicas} replica{'s' if replicas > 1 else ''} spread by {spread} "
        f"need{'' if replicas > 1 else 's'} {replicas} {noun} with ≥ {human_size(size)} free; "
    )
    text += "none has" if k == 0 else f"1 has: {have[0]}" if k == 1 else f"{k} have: {', '.join(have)}"
    if avoid:
        avoided = sorted({domain_of(by_id[n], spread) for n in avoid if n in by_id})
        text += f" (not counting {PLURAL[spread]} already used: {', '.join(avoided)})"
    # Only nodes that would have added a domain: the ones that explain the shortfall.
    missing = [f"{n.name} ({why})" for n, why in not_counted if domain_of(n, spread) not in have]
    if missing:
        shown = ", ".join(missing[:MAX_NAMED])
        more = f", … ({len(missing)} in all)" if len(missing) > MAX_NAMED else ""
        text += f"; not counted: {shown}{more}"
    if spread != "node" and any(d.startswith("node:") for d in have):
        text += f"; a node without a {spread!r} label is a {spread} of its own (node:<name>)"
    if k == 0:
        return PlacementRefused(text, field="size")
    if finer:
        return PlacementRefused(text, field="spread", allowed=finer)
    return PlacementRefused(text, field="replicas", allowed=list(range(1, k + 1)))
