"""nodeosd's pre-flight checks (nodeos/daemon/preflight.py): what the machine cannot take is bad
input naming the field, found before anything is created."""

from __future__ import annotations

import errno
import socket
from pathlib import Path

import pytest

from nodeos.daemon import preflight
from nodeos.daemon.config import Config
from nodeos.errors import BadInput, EnvironmentProblem


def test_a_missing_state_dir_under_directories_is_fine_and_not_made(tmp_path: Path) -> None:
    preflight.check(Config(state_dir=str(tmp_path / "a" / "b"), api_socket=str(tmp_path / "r" / "s.sock")))
    assert not (tmp_path / "a").exists() and not (tmp_path / "r").exists()


def test_a_state_dir_below_a_file_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(BadInput) as e:
        preflight.directory(tmp_path / "f" / "state", "state_dir")
    assert e.value.field == "state_dir" and f"{tmp_path / 'f'} is a regular file" in e.value.message


def test_a_dangling_symlink_is_not_a_directory(tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    with pytest.raises(BadInput, match="dangling symbolic link"):
        preflight.directory(tmp_path / "link", "state_dir")


def test_a_listening_port_is_in_use_and_a_free_one_passes() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(BadInput) as e:
            preflight.port_free(f"127.0.0.1:{port}", "peer_listen")
        assert e.value.field == "peer_listen" and "already in use" in e.value.message
        assert e.value.allowed == preflight.PORT_ALLOWED
    preflight.port_free(f"127.0.0.1:{port}", "peer_listen")  # let go: free again


def test_bind_errors_other_than_taken_or_foreign_are_the_machines() -> None:
    err = preflight.bind_error("127.0.0.1:80", "peer_listen", OSError(errno.EACCES, "Permission denied"))
    assert isinstance(err, EnvironmentProblem) and err.field == "peer_listen"
    assert isinstance(preflight.bind_error("x:1", "peer_listen", OSError(errno.EADDRNOTAVAIL, "")), BadInput)
