"""What a request through the HTTPS REST endpoint costs against the same request on the unix
socket: one nodeosd on loopback (--dataplane none, --rest-listen), alternated rounds.

    .venv/bin/python bench/rest_bench.py [--requests 300] [--no-write]

Each REST request is a new connection (the server speaks HTTP/1.0: a TLS handshake each time,
as a script's curl pays); the socket client also connects per call, as the console does. Figures
go to docs/benchmarks.md, section "REST endpoint (loopback)". Not a pass/fail test.
"""

from __future__ import annotations

import argparse
import http.client
import json
import platform
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from benchdoc import add_no_write, publish  # noqa: E402  (bench/ is on sys.path when a bench script runs)
from raft_bench import pct  # noqa: E402

from nodeos.errors import NodeosError  # noqa: E402
from nodeos.rpc.client import Client  # noqa: E402

SECTION = "## REST endpoint (loopback)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rest_call(port: int, ctx: ssl.SSLContext, token: str, verb: str, path: str, body: bytes | None) -> None:
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)
    try:
        conn.request(verb, "/api/v1" + path, body=body, headers={"Authorization": f"Bearer {token}"})
        r = conn.getresponse()
        r.read()
        assert r.status == 200, r.status
    finally:
        conn.close()


def timed(fn: Callable[[], None], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=300)
    add_no_write(ap)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="restbench"))
    port = free_port()
    sock = str(root / "api.sock")
    cmd = [sys.executable, "-m", "nodeos.daemon.main", "--state-dir", str(root / "state"),
           "--api-socket", sock, "--dataplane", "none", "--node-name", "b1",
           "--rest-listen", f"127.0.0.1:{port}"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                Client(sock, timeout_s=2).call("daemon.ping")
                break
            except NodeosError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        time.sleep(1.0)  # the REST service starts after the socket answers
        token = Client(sock).call("auth.token.create", {"role": "admin"})["token"]
        ctx = ssl.create_default_context(cafile=str(root / "state" / "cluster" / "tls" / "ca.pem"))
        ctx.check_hostname = False
        kv = json.dumps({"key": "bench"}).encode()
        Client(sock).call("cluster.kv.put", {"key": "bench", "value": "x"})
        cases: list[tuple[str, Callable[[], None], Callable[[], None]]] = [
            ("`status` (this node)",
             lambda: rest_call(port, ctx, token, "GET", "/status", None),
             lambda: Client(sock).call("status")),
            ("`cluster.kv.get` (the leader: this node)",
             lambda: rest_call(port, ctx, token, "POST", "/cluster/kv/get", kv),
             lambda: Client(sock).call("cluster.kv.get", {"key": "bench"})),
        ]  # fmt: skip
        rows = []
        for name, rest, unix in cases:
            r_lat: list[float] = []
            u_lat: list[float] = []
            for _ in range(5):  # alternated rounds: a busy moment lands on both
                r_lat += timed(rest, args.requests // 5)
                u_lat += timed(unix, args.requests // 5)
            figures = [pct(r_lat, 50), pct(r_lat, 99), pct(u_lat, 50), pct(u_lat, 99)]
            rows.append(f"| {name} | " + " | ".join(f"{x:.1f}" for x in figures) + " |")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    text = "\n".join(
        [
            SECTION,
            "",
            f"`bench/rest_bench.py`, {when}, {platform.machine()}, Python {platform.python_version()}, one "
            f"nodeosd `--dataplane none --rest-listen` on loopback; {args.requests} requests of each kind, "
            "REST and unix socket alternated in 5 rounds; a new connection per request both ways (REST: "
            "TLS 1.3 handshake, HTTP/1.0, bearer token checked against the map).",
            "",
            "| request | REST p50 ms | REST p99 ms | socket p50 ms | socket p99 ms |",
            "|---|---|---|---|---|",
            *rows,
            "",
        ]
    )
    publish(SECTION, text, write=not args.no_write)


if __name__ == "__main__":
    main()
