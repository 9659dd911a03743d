"""Per failure-domain level, the heaps that find the most-free domains without scanning the map.

Both levels share the index's `usable` dict (node id -> bytes its most-free healthy pool can
take, -1 when the node cannot take anything) and keep heap entries lazily: an entry is never
*below* the truth (a reserve only lowers capacity, and every raise pushes a fresh entry), so
an entry at the top is either exact — checked with a dict lookup — or too high and corrected
in place with heapreplace. Nothing walks all nodes on a decision.

Order (the same for both levels and for the brute force in the tests): a domain ranks by
(its most-free node's usable bytes, the domain's total usable bytes, its name), larger first;
the total separates domains tied on their best node, so equal volumes on an equal, fresh
cluster go round every domain. Within a domain, nodes rank by (usable, -node id).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from heapq import heapify, heappop, heappush, heapreplace

from nodeos.storage.placement.model import NodeCandidate, domain_of


class NodeLevel:
    """Spread by node: one heap of (-usable, node id)."""

    def __init__(self, usable: dict[int, int]) -> None:
        self.usable = usable
        self._rebuild_heap()

    def _rebuild_heap(self) -> None:
        self.taken_out: list[tuple[int, int]] = []  # see select()
        self.heap = [(-u, n) for n, u in self.usable.items() if u >= 0]
        heapify(self.heap)

    def raised(self, nid: int) -> None:
        u = self.usable.get(nid, -1)
        if u >= 0:
            heappush(self.heap, (-u, nid))
        if len(self.heap) > 2 * len(self.usable) + 64:  # too many superseded entries
            self._rebuild_heap()

    def moved(self, nid: int, node: NodeCandidate) -> None:
        pass  # a node is its own domain

    def removed(self, nid: int) -> None:
        pass  # its entries go when they reach the top (its usable is gone)

    def select(self, size: int, count: int, skip: Collection[int], avoid: Collection[int]) -> list[int]:
        heap, usable = self.heap, self.usable
        for _, n in self.taken_out:  # taken out by the last select, put back as they are now
            if (u := usable.get(n, -1)) >= 0:
                heappush(heap, (-u, n))
        out: list[int] = []
        self.taken_out = stash = []
        while heap and len(out) < count:
            nv, nid = heap[0]
            if -nv < size:
                break  # entries are never below the truth: nothing further down fits
            cur = usable.get(nid, -1)
            if nid in out or cur < 0:
                heappop(heap)  # a superseded duplicate of a chosen node, or nothing usable now
            elif -nv != cur:
                heapreplace(heap, (-cur, nid))
            else:
                # Taken out until the next select: the reserve that usually follows lowers the
                # node, and the next select pushes it back once, already corrected.
                stash.append(heappop(heap))
                if nid not in skip and nid not in avoid:
                    out.append(nid)
        return out


Entry = tuple[int, int, str, int]  # (-best usable, -domain total, domain, best node id)


class LabelLevel:
    """Spread by a label: a heap of Entry, and per domain a heap of (-usable, node id)."""

    def __init__(self, label: str, usable: dict[int, int], nodes: Mapping[int, NodeCandidate]) -> None:
        self.label = label
        self.usable = usable
        self.dom_of: dict[int, str] = {}
        self.members: dict[str, set[int]] = {}
        self.total: dict[str, int] = {}  # kept up to date by the index (CapacityIndex._rescore)
        for nid, node in nodes.items():
            d = domain_of(node, label)
            self.dom_of[nid] = d
            self.members.setdefault(d, set()).add(nid)
            self.total[d] = self.total.get(d, 0) + max(usable[nid], 0)
        self.node_heaps: dict[str, list[tuple[int, int]]] = {}
        for d in self.members:
            self._refill(d)
        self._rebuild_heap()

    def _refill(self, d: str) -> None:
        """Rebuild a domain's node heap from its members, in place (drops superseded entries)."""
        h = self.node_heaps.setdefault(d, [])
        h[:] = [(-self.usable[n], n) for n in self.members.get(d, ()) if self.usable[n] >= 0]
        heapify(h)

    def _rebuild_heap(self) -> None:
        self.taken_out: list[Entry] = []  # see select()
        self.heap = [e for d in self.members if (e := self._entry(d)) is not None]
        heapify(self.heap)

    def _entry(self, d: str) -> Entry | None:
        b, nid = self.best(d)
        return (-b, -self.total[d], d, nid) if b >= 0 else None

    def best(self, d: str) -> tuple[int, int]:
        """(usable, node id) of the domain's most-free node; (-1, 0) if it has none."""
        h = self.node_heaps.get(d)
        usable = self.usable
        while h:
            nv, nid = h[0]
            cur = usable.get(nid, -1)
            if cur < 0:
                heappop(h)
            elif -nv != cur:
                heapreplace(h, (-cur, nid))
            else:
                return cur, nid
        return -1, 0

    def _best_allowed(self, d: str, skip: Collection[int]) -> tuple[int, int]:
        """Like best(), passing over skipped nodes (pops them aside and puts them back)."""
        h = self.node_heaps[d]
        aside: list[tuple[int, int]] = []
        while True:
            b = self.best(d)
            if b[0] < 0 or b[1] not in skip:
                break
            aside.append(heappop(h))
        for e in aside:
            heappush(h, e)
        return b

    def raised(self, nid: int) -> None:
        """The node's usable space may have grown (or it is new here): push fresh entries."""
        d = self.dom_of[nid]
        u = self.usable.get(nid, -1)
        if u >= 0:
            h = self.node_heaps.setdefault(d, [])
            heappush(h, (-u, nid))
            if len(h) > 2 * len(self.members[d]) + 8:
                self._refill(d)
        # The domain's total may have grown even where its best did not: a fresh exact entry.
        if (e := self._entry(d)) is not None:
            heappush(self.heap, e)
        if len(self.heap) > 2 * len(self.members) + 64:
            self._rebuild_heap()

    def moved(self, nid: int, node: NodeCandidate) -> None:
        """Put the node in the domain its labels name now (a new node, or relabelled)."""
        new = domain_of(node, self.label)
        old = self.dom_of.get(nid)
        if old == new:
            return
        u = max(self.usable.get(nid, -1), 0)
        self.dom_of[nid] = new
        self.members.setdefault(new, set()).add(nid)
        self.total[new] = self.total.get(new, 0) + u
        if old is not None:
            self.total[old] -= u
            self._leave(nid, old)
            self._rebuild_heap()  # entries naming the node under its old domain must go (rare)

    def removed(self, nid: int) -> None:
        d = self.dom_of.pop(nid, None)
        if d is not None:
            self._leave(nid, d)
            self._rebuild_heap()  # no entry may name the node should its id come back elsewhere

    def _leave(self, nid: int, d: str) -> None:
        self.members[d].discard(nid)
        if self.members[d]:
            self._refill(d)
        else:
            del self.members[d], self.total[d]
            self.node_heaps.pop(d, None)

    def _flush(self) -> None:
        """Put back the entries the last select took out, as their domains are now (a reserve
        has usually lowered them since; recomputing is as cheap as checking)."""
        heap, total, usable, node_heaps = self.heap, self.total, self.usable, self.node_heaps
        for e in self.taken_out:
            d = e[2]
            h = node_heaps.get(d)
            while h:  # best(d), inlined: this runs three times per placement
                nv, nid = h[0]
                cur = usable.get(nid, -1)
                if cur < 0:
                    heappop(h)
                elif -nv != cur:
                    heapreplace(h, (-cur, nid))
                else:
                    heappush(heap, (nv, -total[d], d, nid))
                    break
        self.taken_out = []

    def select(self, size: int, count: int, skip: Collection[int], avoid: Collection[int]) -> list[int]:
        if self.taken_out:
            self._flush()
        if skip or avoid:
            return self._select_excluding(size, count, skip, avoid)
        heap, usable, total = self.heap, self.usable, self.total
        out: list[int] = []
        taken: list[str] = []
        stash = self.taken_out
        while heap:
            nv, nt, d, nid = heap[0]
            if -nv < size:
                break  # entries are never below the truth: nothing further down fits
            if d in taken:
                heappop(heap)  # a superseded duplicate of a chosen domain
            elif usable.get(nid) != -nv or total[d] != -nt:
                # Too high: correct it in place. (A domain with an entry is in `total`: entries
                # of a domain that emptied go with the rebuild that _leave's callers do.)
                if (e := self._entry(d)) is None:
                    heappop(heap)
                else:
                    heapreplace(heap, e)
            else:
                # Taken out until the next select: the reserve that usually follows lowers these
                # domains, and _flush then pushes each back once, already corrected.
                stash.append(heappop(heap))
                taken.append(d)
                out.append(nid)
                if len(out) == count:
                    break
        return out

    def _select_excluding(
        self, size: int, count: int, skip: Collection[int], avoid: Collection[int]
    ) -> list[int]:
        """select() when nodes are excluded or domains avoided (rebuilds: rarer, kept apart)."""
        heap, usable, total = self.heap, self.usable, self.total
        avoid_doms = {self.dom_of[n] for n in avoid if n in self.dom_of}
        out: list[int] = []
        taken: list[str] = []
        alt: list[Entry] = []  # domains whose best node is skipped, ranked by their best allowed one
        stash = self.taken_out
        while len(out) < count:
            if alt and (not heap or alt[0] < heap[0]):
                nv, _, _, nid = heappop(alt)
                if -nv < size:
                    break
                out.append(nid)
                continue
            if not heap:
                break
            nv, nt, d, nid = heap[0]
            if -nv < size:
                break
            if d in taken:
                heappop(heap)
            elif usable.get(nid) != -nv or total[d] != -nt:
                if (e := self._entry(d)) is None:
                    heappop(heap)
                else:
                    heapreplace(heap, e)
            else:
                stash.append(heappop(heap))
                taken.append(d)
                if d in avoid_doms:
                    continue
                if nid in skip:
                    cur, anid = self._best_allowed(d, skip)
                    if cur >= size:
                        heappush(alt, (-cur, nt, d, anid))
                    continue
                out.append(nid)
        return out
