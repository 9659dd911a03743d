"""nodeosd started with a configuration the machine cannot take (issue 25, probe 3): a peer port
another process holds, a state dir that is a regular file. Bad input: one line naming the
field, exit 2, no traceback, nothing created."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from .conftest import NODEOSD

pytestmark = pytest.mark.process


def _nodeosd(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [NODEOSD, "--api-socket", str(tmp_path / "run" / "api.sock"), "--dataplane", "none", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _one_clean_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_a_peer_port_in_use_is_bad_input_and_creates_nothing(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        r = _nodeosd(tmp_path, "--state-dir", str(tmp_path / "state"), "--peer-listen", f"127.0.0.1:{port}")
    assert r.returncode == 2, r.stderr
    line = _one_clean_line(r.stderr)
    assert f"peer_listen 127.0.0.1:{port} is already in use" in line and "(field: peer_listen)" in line
    assert not (tmp_path / "state").exists() and not (tmp_path / "run").exists()


def test_a_peer_address_not_of_this_machine_is_bad_input(tmp_path: Path) -> None:
    r = _nodeosd(tmp_path, "--state-dir", str(tmp_path / "state"), "--peer-listen", "192.0.2.213:7100")
    assert r.returncode == 2, r.stderr
    assert "is not an address of this machine" in _one_clean_line(r.stderr)
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("below", ["", "sub/dir"])
def test_a_state_dir_that_is_a_regular_file_is_bad_input_and_left_alone(tmp_path: Path, below: str) -> None:
    f = tmp_path / "not-a-dir"
    f.write_text("precious\n")
    r = _nodeosd(tmp_path, "--state-dir", str(f / below) if below else str(f))
    assert r.returncode == 2, r.stderr
    line = _one_clean_line(r.stderr)
    assert f"{f} is a regular file, not a directory" in line and "(field: state_dir)" in line
    assert f.read_text() == "precious\n" and not (tmp_path / "run").exists()


def test_an_api_socket_under_a_regular_file_is_bad_input(tmp_path: Path) -> None:
    f = tmp_path / "not-a-dir"
    f.write_text("")
    r = subprocess.run(
        [NODEOSD, "--state-dir", str(tmp_path / "state"), "--api-socket", str(f / "api.sock")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2, r.stderr
    assert "(field: api_socket)" in _one_clean_line(r.stderr)
    assert not (tmp_path / "state").exists()
