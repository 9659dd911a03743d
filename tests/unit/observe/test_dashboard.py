"""The shipped Grafana dashboard: every query names metrics the exporter really exports."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from .snapshots import full, sample_names

DASHBOARD = Path(__file__).parents[3] / "nodeos" / "observe" / "grafana" / "nodeos-dashboard.json"
# Metric names in PromQL: identifiers not followed by '(' (functions) and not label names/values.
IDENT = re.compile(
    r'"[^"]*"|\{[^}]*\}|\[[^\]]*\]|\b(?:by|without)\s*\([^)]*\)|([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?'
)
PROMQL_WORDS = {
    "sum",
    "max",
    "min",
    "avg",
    "count",
    "rate",
    "increase",
    "delta",
    "by",
    "without",
    "and",
    "or",
    "unless",
    "on",
    "ignoring",
}


def metric_names(expr: str) -> set[str]:
    if m := re.fullmatch(r"label_values\((\w+),\s*\w+\)", expr):
        return {m.group(1)}  # a Grafana variable query: metric, then a label name
    out = set()
    for m in IDENT.finditer(expr):
        name, call = m.group(1), m.group(2)
        if name and not call and name not in PROMQL_WORDS and not name.isdigit():
            out.add(name)
    return out


def queries(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["expr"]] if isinstance(node.get("expr"), str) else []
        if node.get("type") == "query" and isinstance(node.get("query"), str):
            found.append(node["query"])
        return found + [q for v in node.values() for q in queries(v)]
    if isinstance(node, list):
        return [q for v in node for q in queries(v)]
    return []


def test_every_query_names_an_exported_metric() -> None:
    dash = json.loads(DASHBOARD.read_text())
    exported = sample_names(full()) | {"up"}  # `up`: Prometheus' own per-target series
    qs = queries(dash)
    assert len(qs) > 30
    for q in qs:
        names = metric_names(q)
        assert names, f"query names no metric: {q}"
        assert names <= exported, f"{q}: not exported: {sorted(names - exported)}"


def test_the_parser_finds_metrics_and_skips_labels_and_functions() -> None:
    q = 'sum by (code) (rate(nodeos_api_errors_total{instance=~"$instance", code="x"}[5m])) / nodeos_x'
    assert metric_names(q) == {"nodeos_api_errors_total", "nodeos_x"}


def test_the_dashboard_has_a_cluster_a_node_and_a_volume_section() -> None:
    dash = json.loads(DASHBOARD.read_text())
    rows = [p["title"] for p in dash["panels"] if p["type"] == "row"]
    assert rows == ["Cluster", "Node $instance", "Volume $volume"]
    assert {v["name"] for v in dash["templating"]["list"]} == {"datasource", "instance", "volume"}
