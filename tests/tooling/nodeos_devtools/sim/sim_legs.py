"""The product's own pure rules, fed from the simulated kernel (no copies of them here).

- the leg rules (nodeos/agent/legs.py, the leg watch's): which legs' controllers have not been
  live for too long (`not_live_since`, `down_nodes`: reported failed), which of them the primary
  may take out of md (`removable`), which md-failed legs hold the writes (`pending`), and which
  replicas the map counts in sync or may count once a report in flight lands
  (`counted_in_sync`, the mirror's assembly waits for those). The sim hands them what the
  product reads: a primary record (uuid, epoch, remotes) and the controllers (nqn, state).
- the lease rules (nodeos/agent/lease.py): a real `LeaseKeeper` holds the node's lease; its
  `valid` and `fence_wanted` decide. Its renewal round trip is asyncio around the cluster
  client, so the simulated agent does the messaging and records a grant with `granted`, which
  repeats the two assignments of `LeaseKeeper.renew_once` (the product has no pure method for
  them: `LeaseKeeper.granted(sent, out)` would do).
Timings run at the simulator's lease scale (`SCALE`: a 1 s lease against the product's 3 s).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from nodeos.agent import legs, plan
from nodeos.agent.lease import LeaseKeeper
from nodeos.dataplane.mirror_names import replica_nqn
from nodeos.node import replicas
from nodeos.storage.failover import DEFAULT_LEASE_S, LeaseTiming

from .sim_md import MD_MEMBER, Mirror

SIM_LEASE_S = 1.0
SCALE = SIM_LEASE_S / DEFAULT_LEASE_S
LEG_DOWN_S = legs.LEG_DOWN_S * SCALE  # the leg watch's bound, at the simulator's scale


@dataclass(frozen=True)
class Remote:
    """What the leg rules read of a controller (the data plane's RemoteInfo)."""

    nqn: str
    state: str


def record(uuid: str, m: Mirror) -> dict[str, Any]:
    """The primary's local record as the rules read it (nodeos/node/ops.py keeps more)."""
    return {"uuid": uuid, "epoch": m.epoch, "remotes": [{"node": n} for n in sorted(m.legs)]}


def remotes(mirrors: dict[str, Mirror]) -> list[Remote]:
    """Every attached replica controller of the node (list_remotes)."""
    return [
        Remote(replica_nqn(uuid, str(n)), leg.ctrl.state)
        for uuid, m in mirrors.items()
        for n, leg in sorted(m.legs.items())
        if leg.ctrl is not None
    ]


def leg_states(m: Mirror, down: Iterable[int]) -> dict[int, str]:
    """The members a report gives (mirror_ops.leg_states): a leg down is failed; a leg not in md
    yet and not down is left out (it is attaching)."""
    down = set(down)
    out = {}
    for n, leg in sorted(m.legs.items()):
        if n in down:
            out[n] = "failed"
        elif leg.state != "attaching":
            out[n] = leg.state
    return out


class LegWatch:
    """The leg watch's state (nodeos/agent/legwatch.py `since`), its decisions the product's."""

    def __init__(self) -> None:
        self.since: dict[str, float] = {}

    def look(self, mirrors: dict[str, Mirror], now: float) -> None:
        self.since = legs.not_live_since(self.since, remotes(mirrors), now)

    def down(self, uuid: str, m: Mirror, now: float) -> set[int]:
        return legs.down_nodes(record(uuid, m), self.since, now, LEG_DOWN_S)

    def removable(
        self, vol: dict[str, Any] | None, uuid: str, m: Mirror, me: int, down: set[int], held: Any, sent: Any
    ) -> list[int]:
        # Only legs still in md: one cut already is the leg watch's no more.
        cut = legs.removable(vol, record(uuid, m), me, down, held, sent)
        return [n for n in cut if m.legs[n].state in MD_MEMBER and m.legs[n].ctrl is not None]

    def hold(self, vol: dict[str, Any] | None, uuid: str, m: Mirror, me: int, held: Any, sent: Any) -> bool:
        states = {n: leg.state for n, leg in m.legs.items()}
        return bool(legs.pending(vol, record(uuid, m), me, states, held, sent))


def assembled(
    st: dict[str, Any], vol: dict[str, Any] | None, m: Mirror, me: int, held: Any, sent: Any
) -> bool:
    """md holds as members every replica the map counts in sync, or may count once a report of
    mine lands (the promote attaches them before the front end comes up); after a restart,
    also every replica that is up and exports at the epoch (the plan's rejoin assembles md with
    them: a report of the node's previous life may still bring one back into `in_sync`)."""
    if vol is None:
        return False
    need = legs.counted_in_sync(vol, me, held, list(sent))
    if m.restart:
        need |= {n for n in m.legs if replicas.node_up(st, n) and plan._reports_epoch(st, vol, n)}
    return all(n in m.legs and m.legs[n].state in MD_MEMBER for n in need)


def new_keeper(timing: LeaseTiming) -> LeaseKeeper:
    """The product's lease holder, without its loops (the sim drives it); it starts fenced."""

    async def no_fence(_: bool) -> list[str]:
        return []

    return LeaseKeeper(None, no_fence, timing)


def granted(k: LeaseKeeper, sent: float, health: str, index: int) -> None:
    """A renewal sent at `sent` was granted (what renew_once does with the leader's answer)."""
    k.granted_at = max(k.granted_at or sent, sent)
    k.grant = (health, index)
    k.renewals += 1
