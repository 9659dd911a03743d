"""The cluster's feature level: which map commands the cluster may use while releases mix.

Every map command (nodeos/cluster/commands.py) carries the feature level that introduced it.
Each member says what it knows: its release and the highest level whose commands it knows
all of (`member_report`, carried by `add_node` when it joins and `node_update` when it starts;
stored per node as `release` and `knows_level`). A member that says nothing runs a release from
before levels: it knows level 1. The map holds the cluster's `feature_level` (absent: 1), raised
by the `set_feature_level` command only when every member knows the next level.

Three rules keep the maps of N and N+1 nodes equal (docs/api.md, "Compatibility"):
  - the leader never proposes a command above the cluster's level (`check_proposal`), so a
    command an older member does not know is never committed while it is a member;
  - a node whose release knows less than the cluster's level is refused at join (`check_join`):
    it could not apply the log;
  - a node that meets a committed entry it does not know stops applying there (`stall_for`), or
    a snapshot from a newer map (`snapshot_stall`), and says which release it needs. It resumes
    when restarted with that release (the log from that entry on is still there).

Pure functions of the map's state: no clock, no environment (the test override of what this
node knows, NODEOS_TEST_KNOWN_LEVEL, is read by the service, nodeos/cluster/feature_member.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import nodeos
from nodeos.cluster import commands
from nodeos.errors import BadInput, NotSupported

# The first release that knows each level. Level 1: the commands of 0.1.0, before levels.
# Level 2: `set_feature_level` and `kv_delete` (0.2.0). Level 3: a create a node fails goes on
# elsewhere (`volume_create_replace`, `volume_create_fail`: nodeos/storage/create_replace_map.py). Level 4:
# a published copy on a node that went down before it joined is made elsewhere (`publish_replace`:
# nodeos/storage/publish_replace.py). Level 5: the rolling cluster upgrade's record (`upgrade_*`:
# nodeos/cluster/upgrade_map.py). Level 6: the upgrade releases a domain's replicas before its
# update (`upgrade_step` v2, the `release` step: nodeos/cluster/upgrade_map.py). Level 7: a planned
# move applies only while the old primary still reports it handed off (`volume_failover` v2:
# nodeos/storage/failover_handlers.py).
LEVELS: dict[int, str] = {1: "0.1.0", 2: "0.2.0", 3: "0.3.0", 4: "0.4.0", 5: "0.5.0", 6: "0.6.0", 7: "0.7.0"}
LEVEL = max(LEVELS)  # what this release knows
BASE_LEVEL = 1  # what a member that reports nothing knows
RAISE_COMMAND = "set_feature_level"


def release_for(level: int) -> str:
    """The first release that knows `level` (an unknown level: a release newer than the newest)."""
    return LEVELS.get(level) or f"newer than {LEVELS[LEVEL]}"


def needs_phrase(release: str) -> str:
    """`release >= X`, or `a release newer than X` when no known release has it."""
    return f"a release {release}" if release.startswith("newer") else f"release >= {release}"


def command_level(name: str, version: int) -> int | None:
    """The level that introduced command `name` at `version`; None if this release does not know it."""
    spec = commands.BY_NAME.get(name, {}).get(version)
    return None if spec is None else spec.level


def version_for(st: Mapping[str, Any], name: str) -> int:
    """The version of command `name` a leader proposes: the newest whose level the cluster is at
    (every member can apply it), 1 when it has no other."""
    usable = [v for v, spec in commands.BY_NAME.get(name, {}).items() if spec.level <= cluster_level(st)]
    return max(usable, default=1)


def member_report(known_level: int = LEVEL) -> dict[str, Any]:
    """What this member says it knows (the optional `add_node` / `node_update` arguments)."""
    return {"release": nodeos.__version__, "knows_level": known_level}


def check_report(args: Mapping[str, Any]) -> dict[str, Any]:
    """The report fields present in a command's arguments, checked (BadInput naming the field)."""
    out: dict[str, Any] = {}
    if "release" in args:
        rel = args["release"]
        if not isinstance(rel, str) or not 0 < len(rel) <= 64:
            raise BadInput("release must be a version string of at most 64 characters", field="release")
        out["release"] = rel
    if "knows_level" in args:
        lvl = args["knows_level"]
        if type(lvl) is not int or lvl < 1:
            raise BadInput("knows_level must be a positive integer", field="knows_level")
        out["knows_level"] = lvl
    return out


def check_init_level(level: Any, known_level: int = LEVEL) -> int:
    """The feature level `cluster init` starts a cluster at: this member's by default, lower
    when asked (a cluster that members of an older release will join)."""
    if level is None:
        return known_level
    if type(level) is not int or not 1 <= level <= known_level:
        raise BadInput(
            f"feature_level {level!r} is not one this node knows (1 to {known_level})",
            field="feature_level",
            allowed=list(range(1, known_level + 1)),
        )
    return level


def cluster_level(st: Mapping[str, Any]) -> int:
    return int(st.get("feature_level") or BASE_LEVEL)


def member_level(node: Mapping[str, Any] | None) -> int:
    return int((node or {}).get("knows_level") or BASE_LEVEL)


def _describe(nid: int, node: Mapping[str, Any] | None) -> str:
    node = node or {}
    name = node.get("name") or f"node-{nid}"
    release = node.get("release") or f"{LEVELS[BASE_LEVEL]} or older (it reports nothing)"
    return f"node {nid} ({name}, release {release}, knows level {member_level(node)})"


def lacking(st: Mapping[str, Any], level: int, members: Iterable[int] = ()) -> list[str]:
    """The members (the map's nodes, plus `members`: Raft ids) that do not know `level`."""
    nodes: Mapping[int, Any] = st.get("nodes") or {}
    ids = sorted(set(nodes) | set(members))
    return [_describe(nid, nodes.get(nid)) for nid in ids if member_level(nodes.get(nid)) < level]


def check_raise(st: Mapping[str, Any], level: Any, members: Iterable[int] = ()) -> int:
    """The level `set_feature_level` may raise the cluster to; BadInput (field feature_level) if
    it is not above the current level, not known to this release, or a member lacks it."""
    cur = cluster_level(st)
    if type(level) is not int or level <= cur:
        raise BadInput(
            f"the cluster is at feature level {cur}; it can only be raised (a level is never lowered)",
            field="feature_level",
            allowed=list(range(cur + 1, LEVEL + 1)),
        )
    if level > LEVEL:
        raise BadInput(
            f"feature level {level} needs release {release_for(level)}; this node knows up to {LEVEL}",
            field="feature_level",
            allowed=list(range(cur + 1, LEVEL + 1)),
        )
    behind = lacking(st, level, members)
    if behind:
        raise BadInput(
            f"feature level {level} needs release {release_for(level)} on every member; "
            f"{'; '.join(behind)}: upgrade it first",
            field="feature_level",
        )
    return level


def check_proposal(st: Mapping[str, Any], name: Any, version: Any, known_level: int = LEVEL) -> None:
    """Refuse, before Raft, a command this node does not know or one above the cluster's level.

    `set_feature_level` is checked by `check_raise` instead (its precondition: every member
    knows the level it raises to, hence the command itself)."""
    if not isinstance(name, str) or type(version) is not int:
        raise BadInput("a command needs a name and an integer version", field="cmd")
    lvl = command_level(name, version)
    if lvl is None or lvl > known_level:
        raise BadInput(
            f"command {name} v{version} is unknown to this node (release {nodeos.__version__}, "
            f"knows level {known_level})",
            field="cmd",
        )
    if name == RAISE_COMMAND:
        return
    cur = cluster_level(st)
    if lvl > cur:
        raise NotSupported(
            f"command {name} v{version} needs cluster feature level {lvl} (release "
            f"{release_for(lvl)} on every member); the cluster is at level {cur}: upgrade every "
            f"member, then `nodeos cluster set feature-level {lvl}`",
            field="feature_level",
        )


def check_join(st: Mapping[str, Any], nid: int, args: Mapping[str, Any]) -> None:
    """A node whose release knows less than the cluster's level could not apply its log."""
    cur = cluster_level(st)
    report = check_report(args)
    knows = int(report.get("knows_level") or BASE_LEVEL)
    if knows < cur:
        release = report.get("release") or f"{LEVELS[BASE_LEVEL]} or older"
        raise BadInput(
            f"the cluster is at feature level {cur}; node {nid} runs release {release}, which knows "
            f"level {knows}: it needs release {release_for(cur)} or newer to join",
            field="release",
        )


def stall_for(index: int, name: Any, version: Any, known_level: int = LEVEL) -> dict[str, Any] | None:
    """Why this node cannot apply the committed entry at `index` (None: it can).

    A command this release does not know, or knows only above `known_level`, is never skipped:
    skipping it here while newer members apply it would make the maps differ."""
    if not isinstance(name, str) or type(version) is not int:
        return None  # not a command at all: rejected the same on every node
    lvl = command_level(name, version)
    if lvl is not None and lvl <= known_level:
        return None
    needs = release_for(lvl if lvl is not None else known_level + 1)
    return {
        "index": index,
        "command": f"{name} v{version}",
        "needs_level": lvl,
        "needs_release": needs,
        "message": f"needs {needs_phrase(needs)} to apply entry {index} ({name} v{version}); "
        f"this node runs {nodeos.__version__} (knows level {known_level})",
    }


def snapshot_stall(
    state: Mapping[str, Any], index: int | None, readable_schema: int, known_level: int = LEVEL
) -> dict[str, Any] | None:
    """Why this node cannot read a snapshot's state (None: it can): a newer map format, or a
    cluster level above what it knows. Such a snapshot is refused whole, never half-read."""
    schema = state.get("schema")
    lvl = cluster_level(state)
    if type(schema) is int and schema > readable_schema:
        what = f"map format {schema} (this node reads up to {readable_schema})"
        needs = f"newer than {nodeos.__version__}"
    elif lvl > known_level:
        what = f"feature level {lvl} (this node knows up to {known_level})"
        needs = release_for(lvl)
    else:
        return None
    return {
        "index": index,
        "command": None,
        "needs_level": lvl if lvl > known_level else None,
        "needs_release": needs,
        "message": f"needs {needs_phrase(needs)} to read the snapshot at entry {index}: {what}",
    }
