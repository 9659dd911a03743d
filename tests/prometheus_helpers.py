"""A real Prometheus (Debian's `prometheus` package) for tests: scrapes nodeos targets as job
"nodeos" with the shipped alert rules, and is asked through its HTTP API as an operator would.

On the host (process tier), or inside a lab's network namespace (`netns=`), where the lab's VMs
are reachable: there it is started with `ip netns exec` and asked with `curl` in the namespace.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROMETHEUS = shutil.which("prometheus")
RULES = Path(__file__).parents[1] / "nodeos" / "observe" / "prometheus" / "nodeos-rules.yml"
NETNS_PORT = 19090  # inside a lab's own namespace nothing else listens


class Prometheus:
    def __init__(
        self,
        root: Path,
        targets: list[str],
        *,
        port: int = NETNS_PORT,
        interval_s: float = 1.0,
        netns: str | None = None,
    ) -> None:
        assert PROMETHEUS is not None, "prometheus (Debian package) not installed"
        self.root, self.port, self.netns = root, port, netns
        every = f"{interval_s:g}s"
        cfg = {
            "global": {"scrape_interval": every, "evaluation_interval": every, "scrape_timeout": every},
            "rule_files": [str(RULES)],
            "scrape_configs": [{"job_name": "nodeos", "static_configs": [{"targets": targets}]}],
        }
        (root / "prometheus.yml").write_text(json.dumps(cfg))  # JSON is YAML
        self.log = root / "prometheus.log"
        prefix = ["ip", "netns", "exec", netns] if netns else []
        self.proc = subprocess.Popen(
            [
                *prefix,
                PROMETHEUS,
                f"--config.file={root / 'prometheus.yml'}",
                f"--storage.tsdb.path={root / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("wb"),
        )

    def get(self, path: str, **params: str) -> Any:
        url = f"http://127.0.0.1:{self.port}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        if self.netns is None:
            with urllib.request.urlopen(url, timeout=5) as r:
                return json.loads(r.read())
        r = subprocess.run(
            ["ip", "netns", "exec", self.netns, "curl", "-sS", "--fail", "--max-time", "5", url],
            capture_output=True,
            text=True,
            check=False,
        )
        if r.returncode != 0:
            raise ConnectionError(f"curl {url}: {r.stderr.strip()}")
        return json.loads(r.stdout)

    def query(self, expr: str) -> list[dict[str, Any]]:
        return list(self.get("/api/v1/query", query=expr)["data"]["result"])

    def value(self, expr: str) -> float | None:
        """The value of a query that names one series, or None while it has none."""
        rows = self.query(expr)
        assert len(rows) <= 1, rows
        return float(rows[0]["value"][1]) if rows else None

    def firing(self, alertname: str) -> list[dict[str, Any]]:
        return [
            a
            for a in self.get("/api/v1/alerts")["data"]["alerts"]
            if a["labels"]["alertname"] == alertname and a["state"] == "firing"
        ]

    def wait(self, what: str, fn: Callable[[], Any], timeout: float = 60.0) -> Any:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = fn()
            except OSError as exc:  # not listening yet
                last = exc
            else:
                if last:
                    return last
            time.sleep(0.5)
        raise AssertionError(f"{what}: not within {timeout}s; last {last!r}\n{self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
