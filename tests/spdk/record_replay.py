"""Record the SPDK replay: `.venv/bin/python -m tests.spdk.record_replay --spdk-dir DIR`.

Starts three REAL nvmf_tgt processes from the SPDK build in DIR (or NODEOS_SPDK_DIR; see
docs/spdk.md for the layout), runs the scenario of tests/spdk/replay_scenario.py through the
product's SPDK data plane against them, and writes every JSON-RPC request with the answer the
target gave (errors included) and each step's outcome to tests/spdk/replay/spdk-v26.05.replay.jsonl.
The exchanges are captured inside the product's own client (nodeos/dataplane/spdk/client.py):
nothing in the file is written by hand. Needs root (nvmf_tgt) and about a minute; the primary
polls one core meanwhile (bdev_nvme over TCP is refused in interrupt mode), niced to 19.
tests/unit/dataplane/test_spdk_replay.py replays the file in CI (docs/testing.md).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nodeos.dataplane.spdk import client as spdk_client
from tests.spdk import replay_scenario as sc

OUT = Path(__file__).resolve().parent / "replay" / "spdk-v26.05.replay.jsonl"
COMMAND = "nice -n 10 .venv/bin/python -m tests.spdk.record_replay --spdk-dir DIR"
TARGET_ARGS = ("-u", "--no-huge", "-s", "1024", "-m", "0x1", "--disable-cpumask-locks")
NODE_ARGS: dict[str, tuple[str, ...]] = {
    "R": ("--interrupt-mode",),
    "P": (),  # polling: bdev_nvme over TCP (the mirror's remote leg) is refused in interrupt mode
    "I": ("--wait-for-rpc", "--interrupt-mode"),
}


class Recorder:
    """Every request the product's client sends, with its answer, in the order sent."""

    def __init__(self, nodes: dict[str, str]) -> None:
        self.nodes = nodes  # socket path -> node
        self.step = -1
        self.exchanges: list[dict[str, Any]] = []

    def connection(self, path: str, timeout: float) -> spdk_client._Connection:
        rec = self
        node = self.nodes[path]

        class Recording(spdk_client._Connection):
            pending: dict[int, dict[str, Any]]

            def send(self, method: str, params: dict[str, Any] | None = None) -> int:
                req_id = super().send(method, params)
                req: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": req_id}
                if params:  # as _Connection.send puts it on the wire
                    req["params"] = copy.deepcopy(params)
                entry = {"step": rec.step, "node": node, "request": req, "response": None}
                rec.exchanges.append(entry)
                self.pending = getattr(self, "pending", {})
                self.pending[req_id] = entry
                return req_id

            def recv(self) -> Any:
                reply = super().recv()
                if isinstance(reply, dict) and reply.get("id") in getattr(self, "pending", {}):
                    self.pending.pop(reply["id"])["response"] = reply
                return reply

        return Recording(path, timeout)


def _bin_dir(spdk_dir: str) -> Path:
    root = Path(spdk_dir)
    for cand in (root / "bin", root / "build" / "bin"):
        if (cand / "nvmf_tgt").is_file():
            return cand
    raise SystemExit(f"{spdk_dir} holds no bin/nvmf_tgt (nor build/bin/nvmf_tgt)")


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def _start(bin_dir: Path, work: Path, node: str) -> subprocess.Popen[bytes]:
    sock = work / f"{node}.sock"
    log = open(work / f"{node}.log", "ab")  # noqa: SIM115 - the target's own log, open while it runs
    cmd = [str(bin_dir / "nvmf_tgt"), *TARGET_ARGS, "-r", str(sock), *NODE_ARGS[node]]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, preexec_fn=lambda: os.nice(19))
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(str(sock))
            return proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                tail = (work / f"{node}.log").read_text()[-2000:]
                raise SystemExit(f"nvmf_tgt {node} did not start: {tail}") from None
            time.sleep(0.2)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _placeheld(obj: Any, work: str) -> Any:
    return json.loads(json.dumps(obj).replace(work, sc.WORK))


def record(spdk_dir: str, out: Path, keep: bool = False) -> int:
    bin_dir = _bin_dir(spdk_dir)
    work = Path(tempfile.mkdtemp(prefix="nodeos-spdk-replay-"))
    c = sc.Ctx(
        work=str(work),
        ports={k: _free_port() for k in ("replica", "front", "export", "discovery")},
        sockets={n: str(work / f"{n}.sock") for n in sc.NODES},
    )
    rec = Recorder({v: k for k, v in c.sockets.items()})
    procs: dict[str, subprocess.Popen[bytes]] = {}
    original = spdk_client.SpdkRpc._connect
    spdk_client.SpdkRpc._connect = lambda self: rec.connection(self.sock_path, self.timeout)  # type: ignore[method-assign]
    steps: list[dict[str, Any]] = []
    try:
        for n in sc.NODES:
            procs[n] = _start(bin_dir, work, n)
        for i, step in enumerate(sc.STEPS):
            rec.step = i
            t0 = time.monotonic()
            steps.append({"step": i, "node": step[0], "name": step[1], "outcome": sc.run_step(step, c)})
            print(f"{i:3d} {step[0]} {step[1]}: {time.monotonic() - t0:.2f} s", file=sys.stderr)
    finally:
        spdk_client.SpdkRpc._connect = original  # type: ignore[method-assign]
        c.close()
        for p in procs.values():
            _stop(p)
    unanswered = [e for e in rec.exchanges if e["response"] is None]
    if unanswered:
        raise SystemExit(f"requests without an answer: {unanswered[:3]}")
    version = next(s["outcome"].get("version") for s in steps if s["name"] == "describe")
    header = {
        "replay": "JSON-RPC exchanges recorded from real SPDK nvmf_tgt by tests/spdk/record_replay.py",
        "spdk": version,
        "recorded_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": COMMAND,
        "targets": {n: ["nvmf_tgt", *TARGET_ARGS, *NODE_ARGS[n]] for n in sc.NODES},
        "ports": c.ports,
        "work": sc.WORK,
        "steps": len(steps),
        "exchanges": len(rec.exchanges),
        "error_answers": sum(1 for e in rec.exchanges if "error" in e["response"]),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w") as f:
        f.write(json.dumps(header) + "\n")
        for s in steps:
            f.write(json.dumps(s, sort_keys=True) + "\n")
            for e in rec.exchanges:
                if e["step"] == s["step"]:
                    f.write(json.dumps(_placeheld(e, str(work)), sort_keys=True) + "\n")
    print(f"{out}: {len(steps)} steps, {header['exchanges']} exchanges, {header['error_answers']} errors")
    if keep:
        print(f"targets' logs kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tests.spdk.record_replay", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--spdk-dir", default=os.environ.get("NODEOS_SPDK_DIR"), help="SPDK build (bin/nvmf_tgt)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--keep", action="store_true", help="keep the work directory (the targets' logs)")
    a = ap.parse_args(argv)
    if not a.spdk_dir:
        ap.error("--spdk-dir (or NODEOS_SPDK_DIR) is required")
    if os.geteuid() != 0:
        ap.error("nvmf_tgt needs root")
    return record(a.spdk_dir, a.out, a.keep)


if __name__ == "__main__":
    sys.exit(main())
