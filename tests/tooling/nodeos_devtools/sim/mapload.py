"""The map workload of the simulator (`SimConfig.workload = "map"`): real map commands.

Clients ask for what operators ask for (node labels, pools, volumes with 1-3 replicas spread
by node or rack, deletes, hosts, grants, snapshots, clones) and the command proposed is the
one the real leader would propose: `nodeos.control.decide` run on the deciding node's own
copy of the map, placement through the real placement package. Requests the decision
refuses (a taken name, no room) propose nothing, as at the real leader.

The agents are simulated (`SimAgent`, no data plane): each map member's agent reads some
node's copy of the map, as a real agent reads its own node's, and reports what a data plane
would have by now: pools with capacity (or failed), replicas creating -> syncing -> in-sync
(or failed), snapshots, and a data plane that sometimes errs. The report has the shape the
real agent sends (nodeos/agent/agent.py `_report_body`).

Map members are not the Raft nodes: the map holds `MAP_MEMBERS` storage nodes whatever the
size of the Raft group (voters are few, members are many).
"""

from __future__ import annotations

import random
import zlib
from typing import Any

from nodeos.cluster import features
from nodeos.cluster.map import encode_command
from nodeos.control import decide
from nodeos.errors import NodeosError
from nodeos.storage import placement
from nodeos.storage.create_replace import create_replace_commands

MAP_MEMBERS = 5
RACKS = ("a", "b", "c")
GIB = 1024**3
# Small enough that pools fill up: creates a node failed no longer stay as failed volumes holding
# room (level 3 makes them elsewhere), and room is what the capacity checks are about.
POOL_SIZE = 12 * GIB
VOLUME_NAMES = tuple(f"v{i}" for i in range(6))  # few names: reuse after delete is exercised
SNAPSHOT_NAMES = tuple(f"s{i}" for i in range(3))
HOSTS = tuple(f"nqn.2014-08.org.example:gpu{i}" for i in range(3))
FAIL_P = 0.04  # a pool, replica or snapshot create fails on its node
DOOMED_EVERY = 16  # and one volume in 16 (by its uuid) fails on every node: no node is left for it
LEADER_COMMANDS = ("volume_create_replace", "volume_create_fail")  # the leader's own, not a console's


class DecisionViolation(Exception):
    """A decision the real code made that breaks a placement promise (see check_placement)."""


def check_placement(st: dict[str, Any], args: dict[str, Any]) -> None:
    """What placement promises about the state it decided from: distinct failure domains at
    the spread level, and room for the volume in every pool chosen."""
    cands = {c.node_id: c for c in decide.candidates(st, net_of_pending=True)}
    spread, size = args["spread"], args["size_bytes"]
    domains = [placement.domain_of(cands[s["node"]], spread) for s in args["placement"]]
    if len(set(domains)) != len(domains):
        raise DecisionViolation(f"volume {args['name']!r} placed twice in one {spread} domain: {domains}")
    for s in args["placement"]:
        pool = next(p for p in cands[s["node"]].pools if p.pool_id == s["pool_id"])
        if not pool.healthy or min(pool.free_bytes, pool.size_bytes) < size:
            raise DecisionViolation(
                f"volume {args['name']!r} ({size} bytes) placed on pool {pool.pool_id} of node "
                f"{s['node']} with {pool.free_bytes} bytes free (healthy={pool.healthy})"
            )


class SimAgent:
    """A map member's agent without a data plane: what it would report, given the map."""

    def __init__(self, nid: int, rng: random.Random) -> None:
        self.nid = nid
        self.rng = rng
        self.seq = 0
        self.progress: dict[str, int] = {}  # object uuid / pool id -> reports seen it in
        self.failed: set[str] = set()  # creates that failed here (reported failed from then on)

    def _step(self, key: str) -> int | None:
        """Reports since the object appeared; None once its create failed here."""
        if key in self.failed:
            return None
        n = self.progress.get(key, 0)
        if n == 0 and self.rng.random() < FAIL_P:
            self.failed.add(key)
            return None
        self.progress[key] = n + 1
        return n

    def report(self, st: dict[str, Any], force: bool = False) -> tuple[str, dict[str, Any]] | None:
        """The agent's next report from its view `st` of the map; None when it would say what
        the map already holds from it (unless `force`)."""
        if self.nid not in st["nodes"]:
            return None
        me = self.nid
        pools: dict[str, Any] = {}
        used: dict[str, int] = {}
        for v in st["volumes"].values():
            for s in v["placement"]:
                if s["node"] == me:
                    used[s["pool_id"]] = used.get(s["pool_id"], 0) + v["size_bytes"]
        for p in st["pools"].values():
            if p["node"] != me or p["state"] == "deleting":
                continue  # a deleted pool is gone from the data plane
            n = self._step(p["pool_id"])
            if n is None:
                pools[p["pool_id"]] = {"state": "failed", "error": "pool.create: sim: no such device"}
            else:
                pools[p["pool_id"]] = {
                    "name": p["name"],
                    "state": "ready" if n >= 1 or p["state"] == "ready" else "creating",
                    "size_bytes": POOL_SIZE,
                    "free_bytes": max(0, POOL_SIZE - used.get(p["pool_id"], 0)),
                }
        replicas: dict[str, Any] = {}
        for v in st["volumes"].values():
            if v["state"] == "deleting" or all(s["node"] != me for s in v["placement"]):
                continue
            doomed = v["kind"] != "clone" and zlib.crc32(v["uuid"].encode()) % DOOMED_EVERY == 0
            n = None if doomed else self._step(v["uuid"])
            if n is None:
                replicas[v["uuid"]] = {"state": "failed", "step": "volume.create", "error": "sim: no space"}
                continue
            state = "creating" if n == 0 else "in-sync"
            if n == 1 and v["replicas"] > 1 and v["primary"] != me:
                state = "syncing"  # a secondary until the primary's mirror says otherwise
            if state == "in-sync" and v["state"] == "ready" and self.rng.random() < 0.05:
                state = "degraded"
            replicas[v["uuid"]] = {
                "state": state,
                "step": None if state != "creating" else "volume.create",
                "size_bytes": v["size_bytes"],
                "hosts": sorted(v["hosts"]) if state != "creating" else None,
                "error": None,
            }
            if v.get("freeze") and v["primary"] == me and state != "creating":
                replicas[v["uuid"]]["frozen"] = v["freeze"]  # writes held for that snapshot
        snapshots: dict[str, Any] = {}
        for s in st["snapshots"].values():
            if s["state"] == "deleting" or all(x["node"] != me for x in s["placement"]):
                continue
            if s.get("phase") == "freezing":
                continue  # replica snapshots are taken once the primary froze writes
            n = self._step(s["uuid"])
            if n is None:
                snapshots[s["uuid"]] = {"state": "failed", "error": "sim: snapshot failed"}
            else:
                snapshots[s["uuid"]] = {"state": "ready" if n >= 1 else "creating"}
        freezing = [s for s in st["snapshots"].values() if s.get("phase") and s.get("primary") == me]
        if freezing and self.rng.random() < 0.1:
            # The primary gives up a freeze that lasted too long (the real one after 10 s).
            return "snapshot_abort", {"uuid": freezing[0]["uuid"], "reason": "sim: freeze too long"}
        dp_error = "sim: data plane unreachable" if self.rng.random() < 0.05 else None
        held = st["reports"].get(me) or {}
        body = {"pools": pools, "replicas": replicas, "snapshots": snapshots}
        if not force and all(held.get(k) == v for k, v in body.items()):
            return None
        self.seq = max(held.get("seq", 0), self.seq) + 1
        args = {
            "node_id": me,
            "seq": self.seq,
            "dataplane": {"name": "sim", "listeners": [], "error": dp_error},
            "drives": {f"d{i}": {"health": "ok"} for i in range(4)},
            "pools": pools,
            "replicas": replicas,
            "snapshots": snapshots,
            "storage_addresses": [f"10.0.0.{me}"],
        }
        return "node_report", args


# Console requests carry a request id (nodeos/cluster/request_log.py); agents' reports and the
# bootstrap do not. Now and then a request is proposed again, as the console's node does after
# an unknown outcome.
NOT_CONSOLE = ("node_report", "init_cluster", "add_node", *LEADER_COMMANDS)
REPEAT_P = 0.2
ASKED_KEPT = 16


class MapWorkload:
    """Chooses the next operator request or agent report and turns it into a map command."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.agents = {nid: SimAgent(nid, random.Random(rng.getrandbits(64))) for nid in self._members()}
        self.next_id = 0
        self.stats = {"map_proposed": 0, "map_refused": 0, "map_repeats": 0}
        self.asked: list[bytes] = []  # the last console requests proposed (a console may ask again)
        self.repeat_rng = random.Random(repr(rng.getstate()[1][:8]))  # no draw from `rng`
        self.asked_n = 0

    @staticmethod
    def _members() -> range:
        return range(1, MAP_MEMBERS + 1)

    def _new_id(self, prefix: str = "") -> str:
        # Deterministic ids (the real leader draws uuid4s; only uniqueness matters to the map).
        self.next_id += 1
        return f"{prefix}00000000-0000-4000-8000-{self.next_id:012d}"

    def next_command(self, st: dict[str, Any], agent_view: dict[str, Any] | None) -> bytes | None:
        """The command a client request (decided on `st`) or an agent report (from the agent's
        `agent_view` of the map) makes; None when the decision refused or there is nothing."""
        out = self._choose(st, agent_view)
        if out is None:
            # The console's node asks again with the same request id after an unknown outcome
            # (nodeos/control/service.py): the map must answer it from its record, not apply it.
            # Drawn apart (and only where nothing else is proposed) so the stream of decisions
            # stays the one the other checks were tuned on.
            if self.asked and self.repeat_rng.random() < REPEAT_P:
                self.stats["map_repeats"] += 1
                return self.repeat_rng.choice(self.asked)
            return None
        cmd, args = out
        if cmd == "volume_create" and args.get("kind", "volume") == "volume":
            check_placement(st, args)
        self.stats["map_proposed"] += 1
        if cmd in NOT_CONSOLE:
            return encode_command(cmd, args)
        self.asked_n += 1
        data = encode_command(cmd, args, rid=f"q{self.asked_n}")
        self.asked = [*self.asked[-(ASKED_KEPT - 1) :], data]
        return data

    def _choose(self, st: dict[str, Any], agent_view: dict[str, Any] | None) -> decide.Command | None:
        r = self.rng
        booting = st["cluster_id"] is None or len(st["nodes"]) < MAP_MEMBERS
        if booting and r.random() < 0.7:
            return None  # the map trails the log: do not flood it with the same bootstrap
        if st["cluster_id"] is None:
            # At this release's level, as `nodeos cluster init` starts one (level 3: a create a
            # node fails is placed elsewhere by the leader).
            return "init_cluster", {"cluster_id": "sim-cluster", "feature_level": features.LEVEL}
        missing = [nid for nid in self._members() if nid not in st["nodes"]]
        if missing:
            nid = missing[0]
            addresses = {"peer": f"10.0.0.{nid}:7100"}
            return "add_node", {"node_id": nid, "addresses": addresses, **features.member_report()}
        x = r.random()
        if x < 0.05:
            # The leader's controller: a new volume's replica a node failed to make goes elsewhere
            # (nodeos/storage/create_replace.py), decided on this node's copy of the map.
            cmds = create_replace_commands(st)
            if cmds:
                return cmds[0]
        if x < 0.4:
            # As real agents do, an agent reports when what it has changed (and now and then
            # anyway): the first of them, in a random order, with something new to say.
            view = agent_view if agent_view is not None else st
            order = list(self._members())
            r.shuffle(order)
            for nid in order:
                out = self.agents[nid].report(view, force=r.random() < 0.1)
                if out is not None:
                    return out
            return None
        try:
            return self._request(st, x)
        except NodeosError:
            self.stats["map_refused"] += 1  # the leader refuses: nothing is proposed
            return None

    def _request(self, st: dict[str, Any], x: float) -> decide.Command | None:
        r = self.rng
        W = decide.WRITES
        node = f"node-{r.choice(list(self._members()))}"
        # Mostly names that exist (operators act on what they see), sometimes any name.
        vols = sorted(n for n, ref in st["names"].items() if ref["kind"] == "volume")
        snaps = sorted(n for n, ref in st["names"].items() if ref["kind"] == "snapshot")
        vol = r.choice(vols) if vols and r.random() < 0.7 else r.choice(VOLUME_NAMES)
        snap = r.choice(snaps) if snaps and r.random() < 0.7 else r.choice(SNAPSHOT_NAMES)
        if x < 0.45:
            if r.random() < 0.2:
                return W["node.label"](st, {"node": node, "remove": ["rack"]})
            return W["node.label"](st, {"node": node, "set": {"rack": r.choice(RACKS)}})
        if x < 0.52:
            k = r.randint(0, 1)
            p = {"node": node, "name": f"p{k}", "drives": [f"d{k}"], "devices": [f"/dev/sim{k}"]}
            return decide.pool_create(st, p, self._new_id("p"))
        if x < 0.54:
            return W["pool.delete"](st, {"node": node, "name": f"p{r.randint(0, 1)}"})
        if x < 0.67:
            p = {
                "name": r.choice(VOLUME_NAMES),
                "size": r.choice((1, 2, 4, 8)) * GIB,
                "replicas": r.choice((1, 1, 2, 3)),
                "spread": r.choice(("node", "rack")),
            }
            return decide.volume_create(st, p, self._new_id())
        if x < 0.73:
            return W["volume.delete"](st, {"name": vol, "force": r.random() < 0.3})
        if x < 0.8:
            if r.random() < 0.3:
                return W["volume.delete"](st, {"name": snap, "force": r.random() < 0.5})
            new = r.choice(SNAPSHOT_NAMES)
            return decide.volume_snapshot(st, {"name": vol, "snapshot": new}, self._new_id())
        if x < 0.86:
            p = {"name": r.choice(VOLUME_NAMES), "snapshot": snap}
            return decide.volume_clone(st, p, self._new_id())
        host = r.choice(HOSTS)
        if x < 0.9:
            if r.random() < 0.4:
                return W["host.remove"](st, {"nqn": host})
            return W["host.add"](st, {"nqn": host, "dhchap_secret": None, "added": self.next_id})
        return W["volume.grant" if r.random() < 0.6 else "volume.revoke"](st, {"name": vol, "host": host})
