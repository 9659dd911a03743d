"""Byte-for-byte agreement with iproute2's `dcb` for the same settings.

`dcb` is run for real; an LD_PRELOAD shim (dcb_capture_shim.c) records the netlink
requests it sends and answers its preliminary GET locally, so `dcb` goes on to send its
SET even though this machine has no DCB-capable NIC. Sequence numbers and port ids are
masked (bytes 8-15 of the netlink header); every other byte must be identical.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from nodeos.net import dcb

SHIM_SRC = Path(__file__).with_name("dcb_capture_shim.c")


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("dcb") is None:
        pytest.skip("iproute2's dcb tool is not installed (Debian: iproute2)")
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the capture shim")
    out = tmp_path_factory.mktemp("shim") / "dcb_capture_shim.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(out), str(SHIM_SRC), "-ldl"], check=True)
    return out


def capture(shim: Path, tmp_path: Path, *args: str) -> list[bytes]:
    cap = tmp_path / "capture.bin"
    cap.unlink(missing_ok=True)
    env = {**os.environ, "LD_PRELOAD": str(shim), "NODEOS_DCB_CAPTURE": str(cap)}
    res = subprocess.run(["dcb", *args], env=env, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    data = cap.read_bytes()
    msgs = []
    off = 0
    while off < len(data):
        (n,) = struct.unpack_from("I", data, off)
        msgs.append(data[off + 4 : off + 4 + n])
        off += 4 + n
    return msgs


def masked(raw: bytes) -> bytes:
    return raw[:8] + b"\0" * 8 + raw[16:]


DEV = "ens1f0"
CASES: list[tuple[list[str], Callable[[], bytes]]] = [
    (
        [
            "ets",
            "set",
            "dev",
            DEV,
            "prio-tc",
            "3:3",
            "6:6",
            "tc-tsa",
            "all:ets",
            "6:strict",
            "tc-bw",
            "0:50",
            "3:50",
        ],
        lambda: dcb.encode_set_ets(
            DEV,
            dcb.Ets(
                tc_tx_bw=(50, 0, 0, 50, 0, 0, 0, 0),
                tc_tsa=(2,) * 6 + (0, 2),
                prio_tc=(0, 0, 0, 3, 0, 0, 6, 0),
            ),
        ),
    ),
    (
        ["pfc", "set", "dev", DEV, "prio-pfc", "all:off", "3:on"],
        lambda: dcb.encode_set_pfc(DEV, dcb.Pfc(pfc_en=1 << 3)),
    ),
    (
        ["pfc", "set", "dev", DEV, "prio-pfc", "3:on", "4:on", "delay", "4096"],
        lambda: dcb.encode_set_pfc(DEV, dcb.Pfc(pfc_en=0x18, delay=4096)),
    ),
    (
        ["app", "add", "dev", DEV, "dscp-prio", "26:3", "48:6"],
        lambda: dcb.encode_app(DEV, [dcb.App(dcb.SEL_DSCP, 3, 26), dcb.App(dcb.SEL_DSCP, 6, 48)]),
    ),
    (
        ["app", "add", "dev", DEV, "stream-port-prio", "4420:4"],
        lambda: dcb.encode_app(DEV, [dcb.App(dcb.SEL_STREAM, 4, 4420)]),
    ),
    (
        ["buffer", "set", "dev", DEV, "prio-buffer", "all:0", "3:1", "buffer-size", "0:65536", "1:262144"],
        lambda: dcb.encode_set_buffer(
            DEV,
            dcb.Buffer(prio2buffer=(0, 0, 0, 1, 0, 0, 0, 0), buffer_size=(65536, 262144, 0, 0, 0, 0, 0, 0)),
        ),
    ),
    (
        ["dcbx", "set", "dev", DEV, "host", "ieee"],
        lambda: dcb.encode_dcbx(DEV, dcb.DCBX_MODE_BITS["host-ieee"]),
    ),
]


@pytest.mark.parametrize(("args", "ours"), CASES, ids=[" ".join(c[0][:2]) + " " + c[0][4] for c in CASES])
def test_set_request_matches_dcb_tool(
    shim: Path, tmp_path: Path, args: list[str], ours: Callable[[], bytes]
) -> None:
    sent = capture(shim, tmp_path, *args)
    sets = [m for m in sent if struct.unpack_from("=H", m, 4)[0] == dcb.RTM_SETDCB]
    assert len(sets) == 1, f"dcb sent {len(sets)} SET requests"
    assert masked(ours()).hex() == masked(sets[0]).hex()


def test_get_request_matches_dcb_tool(shim: Path, tmp_path: Path) -> None:
    sent = capture(shim, tmp_path, "ets", "show", "dev", DEV)
    gets = [m for m in sent if struct.unpack_from("=H", m, 4)[0] == dcb.RTM_GETDCB]
    assert gets and masked(dcb.encode_get(DEV)).hex() == masked(gets[0]).hex()
