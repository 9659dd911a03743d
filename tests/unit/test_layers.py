"""The house (issue 26): the API definitions and the REST endpoint sit in their layer, no import
circle runs through them or back from the cluster into the control plane, the storage domain
(nodeos/storage) stands on the cluster's leaf services only and the cluster reaches into it only
where its map gathers the storage sections, no import circle spans two packages nor forms inside
one (but the known ones, none in storage), and no module
grows far past 500 lines; the test tooling (the package nodeos_devtools, tests/tooling/) is a
distribution of its own that no product module imports and the product distribution does not
carry, held to the same circles and sizes. Read from the source (every import, those inside functions too), so
a lazy
import cannot hide a circle that only shows when the code path runs."""

from __future__ import annotations

import ast
import fnmatch
import functools
import tomllib
from collections import defaultdict
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[2]
PACKAGE = PROJECT / "nodeos"
# The test tooling: its own distribution (nodeos-devtools), its own import package.
TOOLING = "nodeos_devtools"
TOOLING_ROOT = PROJECT / "tests" / "tooling"
TOOLING_SCRIPTS = {"nodeos-lab", "nodeos-sim", "nodeos-lincheck"}
MAX_LINES = 520  # "about 500": the acceptance's bound, with a little room for a docstring

# What the definitions may name at import time: nothing that serves or uses them, so loading them
# (the console, the reference, the OpenAPI document) pulls in no daemon, cluster or data plane.
API_AT_IMPORT = ("nodeos.api", "nodeos.errors", "nodeos.validate")
# Layers above the definitions: they use the API and must never be imported by it, even lazily
# (a validator the definitions name lives in the domain: nodeos.cluster, nodeos.validate).
ABOVE_API = ("daemon", "rest", "cli", "control", "agent", "node", "observe", "tooling")
# Who may import the definitions: the ways in (daemon dispatcher, REST, console) and the control
# plane that implements them. The domain below never imports them back.
API_USERS = ("api", "daemon", "rest", "cli", "control")
# The REST endpoint is a way in beside the unix socket: only the daemon starts it.
REST_USERS = ("rest", "daemon")
# The cluster (consensus, membership, transport, the replicated map) never imports the control
# plane, the console or the ways in.
CLUSTER_NEVER = ("control", "cli", "rest", "api", "tooling")
# Test tooling (simulator, linearizability checker, VM lab) drives every layer from outside; no
# product module imports it. "tooling" names every package of nodeos_devtools (sim, lincheck, lab).
TEST_TOOLING = ("tooling",)
# The storage domain is below the control plane, the agents and every way in: they decide with it
# and read the map through it, never the other way round.
STORAGE_NEVER = ("control", "agent", "node", "daemon", "cli", "rest", "api", "observe", *TEST_TOOLING)
# The cluster's core: consensus, its log, the driver, transport, membership, the service and the
# map that gathers every section. The storage domain stands on the cluster's leaf services only
# (the event log, feature levels, the command list, data keys, ...): nothing it imports from the
# cluster may lead, however indirectly, into this core or back into storage.
CLUSTER_CORE = (
    "nodeos.cluster.raft",
    "nodeos.cluster.driver",
    "nodeos.cluster.transport",
    "nodeos.cluster.peer",
    "nodeos.cluster.membership",
    "nodeos.cluster.leader_ops",
    "nodeos.cluster.service",
    "nodeos.cluster.map",
)
# Where the cluster may reach into the storage domain: the map gathers the storage sections as
# its command handlers; anywhere else only the shared lookups and records, which import nothing
# of the cluster.
CLUSTER_GATHERS_STORAGE = ("nodeos.cluster.map",)
STORAGE_LEAVES = ("nodeos.storage.lookup", "nodeos.storage.records")


def _modules() -> dict[str, Path]:
    """Every module of the product (nodeos) and of the test tooling (nodeos_devtools), by name."""
    out = {}
    for root, package in ((PROJECT, PACKAGE), (TOOLING_ROOT, TOOLING_ROOT / TOOLING)):
        for f in package.rglob("*.py"):
            parts = list(f.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = f
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The module of ours that `name` (a module, or a name in one) is, if any."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


@functools.cache
def _imports(mod: str) -> tuple[tuple[str, int, bool], ...]:
    """(module imported, line, at import time) for every import of ours in `mod`."""
    return tuple(_read_imports(mod))


def _read_imports(mod: str) -> Iterator[tuple[str, int, bool]]:
    f = MODULES[mod]
    tree = ast.parse(f.read_text(), str(f))
    top = {id(n) for n in tree.body}
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.split(".")
                base = base[: len(base) - node.level + (1 if f.name == "__init__.py" else 0)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            names = [f"{prefix}.{a.name}" for a in node.names]
        for n in names:
            target = _resolve(n) if n.startswith("nodeos") else None
            if target is not None and target != mod:
                yield target, node.lineno, id(node) in top


GRAPH: dict[str, set[str]] = defaultdict(set)
for _m in MODULES:
    for _t, _, _ in _imports(_m):
        GRAPH[_m].add(_t)


def _tooling(mod: str) -> bool:
    return mod == TOOLING or mod.startswith(f"{TOOLING}.")


def _package(mod: str) -> str:
    """`cluster` for nodeos.cluster.map; `tooling.sim` for nodeos_devtools.sim.cli."""
    parts = mod.split(".")
    sub = parts[1] if len(parts) > 1 else ""
    return f"tooling.{sub}" if _tooling(mod) else sub


def _in(mod: str, packages: tuple[str, ...]) -> bool:
    return _package(mod) in packages or ("tooling" in packages and _tooling(mod))


def _circles() -> list[list[str]]:
    """Import circles (strongly connected sets of modules, lazy imports included), Tarjan's."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(GRAPH[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(MODULES):
        if v not in index:
            visit(v)
    return out


def test_the_definitions_import_only_the_definitions_errors_and_validators_at_load() -> None:
    bad = [
        f"{MODULES[m].relative_to(PROJECT)}:{line} imports {t}"
        for m in MODULES
        if _package(m) == "api"
        for t, line, at_load in _imports(m)
        if at_load and not t.startswith(API_AT_IMPORT)
    ]
    assert bad == []


def test_the_definitions_never_import_a_layer_above_them() -> None:
    bad = [
        f"{MODULES[m].relative_to(PROJECT)}:{line} imports {t}"
        for m in MODULES
        if _package(m) == "api"
        for t, line, _ in _imports(m)
        if _in(t, ABOVE_API)
    ]
    assert bad == []


def test_nothing_below_imports_the_definitions_or_the_rest_endpoint_back() -> None:
    bad = [
        f"{MODULES[m].relative_to(PROJECT)}:{line} imports {t}"
        for m in MODULES
        for t, line, _ in _imports(m)
        if (_package(t) == "api" and not _in(m, API_USERS))
        or (_package(t) == "rest" and not _in(m, REST_USERS))
    ]
    assert bad == []


def test_the_cluster_never_imports_the_control_plane_or_the_ways_in() -> None:
    bad = [
        f"{MODULES[m].relative_to(PROJECT)}:{line} imports {t}"
        for m in MODULES
        if _package(m) == "cluster"
        for t, line, _ in _imports(m)
        if _in(t, CLUSTER_NEVER)
    ]
    assert bad == []


def test_the_storage_domain_never_imports_a_layer_above_it() -> None:
    bad = [
        f"{MODULES[m].relative_to(PROJECT)}:{line} imports {t}"
        for m in MODULES
        if _package(m) == "storage"
        for t, line, _ in _imports(m)
        if _in(t, STORAGE_NEVER)
    ]
    assert bad == []


def _closure(mod: str) -> set[str]:
    """Every module of ours that importing `mod` may load (lazy imports included)."""
    seen: set[str] = set()
    todo = [mod]
    while todo:
        for t in GRAPH[todo.pop()]:
            if t not in seen:
                seen.add(t)
                todo.append(t)
    return seen


def test_the_storage_domain_stands_on_the_cluster_leaf_services_only() -> None:
    used = {
        (t, f"{MODULES[m].relative_to(PROJECT)}:{line}")
        for m in MODULES
        if _package(m) == "storage"
        for t, line, _ in _imports(m)
        if _package(t) == "cluster"
    }
    assert used, "the check sees the storage domain's cluster imports"
    reach = {
        t: sorted(r for r in _closure(t) | {t} if r.startswith(CLUSTER_CORE) or _in(r, ("storage",)))
        for t, _ in used
    }
    bad = [f"{where} imports {t}, which leads to {reach[t]}" for t, where in sorted(used) if reach[t]]
    assert bad == []


def test_the_cluster_reaches_into_storage_only_where_its_map_gathers_the_sections() -> None:
    bad = [
        f"{MODULES[m].relative_to(PROJECT)}:{line} imports {t}"
        for m in MODULES
        if _package(m) == "cluster" and m not in CLUSTER_GATHERS_STORAGE
        for t, line, _ in _imports(m)
        if _package(t) == "storage" and t not in STORAGE_LEAVES
    ]
    assert bad == []
    leaves = [
        f"{MODULES[m].relative_to(PROJECT)}:{line} imports {t}"
        for m in STORAGE_LEAVES
        for t, line, _ in _imports(m)
        if t not in STORAGE_LEAVES and not t.startswith(("nodeos.errors",))
    ]
    assert leaves == [], "the shared lookups must stay leaves: anyone may import them"


def test_no_product_module_imports_the_test_tooling() -> None:
    bad = [
        f"{MODULES[m].relative_to(PROJECT)}:{line} imports {t}"
        for m in MODULES
        if not _in(m, TEST_TOOLING)
        for t, line, _ in _imports(m)
        if _in(t, TEST_TOOLING)
    ]
    assert bad == []


def test_no_import_circle_spans_two_packages() -> None:
    """One through two packages means neither can be read, tested or moved alone (circles inside
    one package: KNOWN_CIRCLES below)."""
    bad = [c for c in _circles() if len({_package(m) for m in c}) > 1]
    assert bad == []


# Circles inside one package that were there before circles within a package were forbidden,
# each still to untangle: no module may join one, and no new one may form. The storage domain's
# (eleven sections calling each other lazily) is untangled: below every section, map_common.py
# (argument helpers, paths, the placement re-check); the report settling on top, in storage_map.py;
# the failover handlers above the decisions they re-check (failover_handlers.py).
KNOWN_CIRCLES = (
    {"nodeos.agent.agent", "nodeos.agent.report"},
    {"nodeos.cli.node", "nodeos.cli.publish"},
    {"nodeos.cluster.raft.leader", "nodeos.cluster.raft.raft"},  # Raft + LeaderMixin
    {"nodeos.cluster.peersender", "nodeos.cluster.peerserver", "nodeos.cluster.transport"},
    {
        f"nodeos_devtools.sim.{m}"
        for m in [
            "cluster",
            "disruption",
            "failover_agent",
            "failover_broken",
            "failover_data",
            "failover_faults",
            "failover_handoff",
            "failover_leader",
            "failover_sim",
            "faults",
            "ready",
            "sim_kernel",
            "sim_plane",
            "sim_teardown",
            "ticks",
            "voters_sim",
        ]
    },
    {"nodeos_devtools.lab.diskboot", "nodeos_devtools.lab.qemu"},
    {"nodeos_devtools.lab.bundle", "nodeos_devtools.lab.image", "nodeos_devtools.lab.rawdisk"},
    {
        "nodeos_devtools.lab.cluster",
        "nodeos_devtools.lab.lab",
        "nodeos_devtools.lab.state",
        "nodeos_devtools.lab.vm_access",
    },
)


def test_no_import_circle_within_a_package_but_the_known_ones_and_none_in_storage() -> None:
    """A circle inside one package still means none of its modules can be read or tested alone."""
    new = [c for c in _circles() if not any(set(c) <= known for known in KNOWN_CIRCLES)]
    assert new == [], "untangle these import circles (lazy imports count)"
    assert not any(_in(m, ("storage", "api", "rest")) for known in KNOWN_CIRCLES for m in known)


def test_no_import_circle_runs_through_the_api_the_rest_endpoint_or_control_and_cluster() -> None:
    bad = [
        c
        for c in _circles()
        if any(_in(m, ("api", "rest")) for m in c) or {"cluster", "control"} <= {_package(m) for m in c}
    ]
    assert bad == []


def test_no_module_is_far_over_500_lines() -> None:
    sizes = {str(f.relative_to(PROJECT)): len(f.read_text().splitlines()) for f in MODULES.values()}
    over = {f: n for f, n in sizes.items() if n > MAX_LINES}
    assert over == {}, f"split these (at most {MAX_LINES} lines a module): {over}"


def test_the_checks_see_what_they_check() -> None:
    """The graph is read right: known imports are there, lazy ones included, relative ones resolved."""
    assert "nodeos.cluster.secretroll" in GRAPH["nodeos.api.rules"]  # inside a function
    assert "nodeos.api.openapi" in GRAPH["nodeos.rest.service"]
    assert "nodeos.rest.server" in GRAPH["nodeos.rest.service"]  # `from .server import ...`
    assert "nodeos.control.decide" in GRAPH["nodeos_devtools.sim.failover_sim"]  # tooling, allowed
    assert "nodeos.storage.storage_map" in GRAPH["nodeos.cluster.map"]  # the map gathers the sections
    assert "nodeos.cluster.events" in GRAPH["nodeos.storage.storage_map"]
    assert "nodeos.storage.publish_replace" in GRAPH["nodeos.storage.publish_map"]  # inside a function
    assert any(len({_package(m) for m in c}) == 1 and len(c) > 1 for c in _circles())  # circles are seen
    assert {"nodeos.cluster.raft.leader", "nodeos.cluster.raft.raft"} in [set(c) for c in _circles()]
    assert len(MODULES) > 200
    tooling = [m for m in MODULES if _tooling(m)]
    assert len(tooling) > 60
    assert "nodeos_devtools.lab.image" in tooling and "nodeos_devtools.sim.cli" in tooling
    assert _in("nodeos_devtools.lab.qemu", TEST_TOOLING) and not _in("nodeos.cluster.map", TEST_TOOLING)


def _toml(path: Path) -> dict[str, Any]:
    with open(path, "rb") as f:
        return tomllib.load(f)


def test_the_product_distribution_carries_no_tooling() -> None:
    """pyproject.toml's `nodeos` finds only the product package and installs only product commands;
    the tooling's commands come from its own distribution (tests/tooling/pyproject.toml)."""
    product = _toml(PROJECT / "pyproject.toml")
    include = product["tool"]["setuptools"]["packages"]["find"]["include"]
    for name in (TOOLING, f"{TOOLING}.lab", "nodeos.lab", "nodeos.devtools"):
        if name.startswith("nodeos."):  # the old homes are gone, not just left out
            assert not (PROJECT / name.replace(".", "/")).exists(), name
        else:
            assert not any(fnmatch.fnmatchcase(name, pat) for pat in include), (name, include)
    scripts = product["project"]["scripts"]
    assert not TOOLING_SCRIPTS & set(scripts)
    assert all(target.startswith("nodeos.") for target in scripts.values()), scripts
    tooling = _toml(TOOLING_ROOT / "pyproject.toml")["project"]
    assert tooling["name"] == "nodeos-devtools" and set(tooling["scripts"]) == TOOLING_SCRIPTS
    for target in tooling["scripts"].values():  # each command's module is there
        assert target.split(":")[0] in MODULES and _tooling(target), target


def test_the_dev_install_brings_the_tooling_as_its_own_distribution() -> None:
    """What .venv holds (images/bootstrap.sh): the product's commands from `nodeos`, the tooling's
    from `nodeos-devtools`, and the tooling imported from tests/tooling/ of this checkout."""
    import nodeos_devtools

    def commands(dist: str) -> dict[str, str]:
        eps = metadata.distribution(dist).entry_points
        return {ep.name: ep.value for ep in eps if ep.group == "console_scripts"}

    assert not TOOLING_SCRIPTS & set(commands("nodeos")), "reinstall: bash images/bootstrap.sh"
    assert set(commands("nodeos-devtools")) == TOOLING_SCRIPTS
    assert Path(nodeos_devtools.__file__).resolve().parent == TOOLING_ROOT / TOOLING
