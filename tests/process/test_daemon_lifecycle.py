"""nodeosd as systemd and an operator see it: readiness, watchdog, status, stop, socket, locks."""

from __future__ import annotations

import json
import os
import stat
import subprocess

import pytest

from .conftest import NODEOSD, Daemon

pytestmark = pytest.mark.process


def test_ready_reaches_notify_socket_and_status_reports_the_node(daemon: Daemon) -> None:
    daemon.env["WATCHDOG_USEC"] = "200000"  # 0.2 s: pings every 0.1 s
    daemon.start()
    ready = daemon.notify.wait_for("READY", "1")  # type: ignore[union-attr]
    assert "data plane none" in ready["STATUS"]
    assert ready["MAINPID"] == str(daemon.proc.pid)  # type: ignore[union-attr]
    daemon.notify.wait_for("WATCHDOG", "1")  # type: ignore[union-attr]
    st = daemon.cli_json("status")
    assert st["node_name"] == "n1"
    assert len(st["node_uuid"]) == 32
    assert st["node_id"] == st["cluster"]["node_id"]  # a lone node is a cluster of one
    assert st["dataplane"]["name"] == "none"
    assert "witness" in st["dataplane"]["reason"]
    assert st["node"]["pending_intents"] == []


def test_sigterm_stops_gracefully_and_removes_the_socket(daemon: Daemon) -> None:
    daemon.start()
    assert daemon.socket.exists()
    assert daemon.terminate() == 0
    daemon.notify.wait_for("STOPPING", "1")  # type: ignore[union-attr]
    assert not daemon.socket.exists()
    assert "stopped" in daemon.log.read_text()


def test_api_socket_is_root_only(daemon: Daemon) -> None:
    daemon.start()
    st = os.stat(daemon.socket)
    assert stat.S_ISSOCK(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o600
    assert st.st_uid == os.geteuid()
    # The daemon created the directory, so it made it private.
    assert stat.S_IMODE(os.stat(daemon.socket.parent).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(daemon.state_dir).st_mode) == 0o700


def test_node_id_is_stable_across_restarts(daemon: Daemon) -> None:
    daemon.start()
    first = daemon.cli_json("status")["node_id"]
    daemon.kill9()
    daemon.start()
    assert daemon.cli_json("status")["node_id"] == first


def test_second_daemon_on_the_same_state_dir_is_refused(daemon: Daemon, tmp_path) -> None:
    daemon.start()
    other = subprocess.run(
        [
            NODEOSD,
            "--state-dir",
            str(daemon.state_dir),
            "--api-socket",
            str(tmp_path / "other.sock"),
            "--dataplane",
            "none",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert other.returncode == 1
    assert "another nodeosd uses the state directory" in other.stderr
    assert daemon.cli("status").returncode == 0


def test_second_daemon_on_a_live_socket_is_refused(daemon: Daemon, tmp_path) -> None:
    daemon.start()
    other = subprocess.run(
        [
            NODEOSD,
            "--state-dir",
            str(tmp_path / "other"),
            "--api-socket",
            str(daemon.socket),
            "--dataplane",
            "none",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert other.returncode == 1
    assert "another daemon answers" in other.stderr
    assert daemon.cli("status").returncode == 0


def test_stale_socket_of_a_killed_daemon_is_replaced(daemon: Daemon) -> None:
    daemon.start()
    daemon.kill9()
    assert daemon.socket.exists()  # left behind by SIGKILL
    daemon.start()
    assert daemon.cli("status").returncode == 0


def test_config_file_sets_options_and_flags_override_it(daemon: Daemon) -> None:
    cfg = daemon.root / "nodeosd.toml"
    cfg.write_text('node_name = "from-file"\ndataplane = "none"\nstorage_address = ["192.0.2.10"]\n')
    daemon.extra = ["--config", str(cfg)]
    daemon.name = "from-flag"
    daemon.start()
    st = daemon.cli_json("status")
    assert st["node_name"] == "from-flag"
    assert st["storage_addresses"] == ["192.0.2.10"]
    assert st["config_source"] == str(cfg)


@pytest.mark.parametrize(
    ("content", "args", "needle"),
    [
        ("bogus_key = 1\n", [], "unknown key"),
        ("node_name = [\n", [], "not valid TOML"),
        ("", ["--peer-listen", "nohostport"], "peer_listen"),
        ("", ["--storage-address", "not-an-ip"], "storage_address"),
        ("", ["--node-name", "bad name!"], "node_name"),
        ('dataplane = "magic"\n', [], "dataplane"),
        ("", ["--metrics-listen", "no-port"], "metrics_listen"),
        ("metrics_volume_labels_max = -5\n", [], "metrics_volume_labels_max"),
        # Metrics never go on the storage network.
        ("", ["--storage-address", "127.0.0.9", "--metrics-listen", "127.0.0.9:1"], "is a storage address"),
    ],
)
def test_bad_configuration_exits_2(tmp_path, content: str, args: list[str], needle: str) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(content)
    r = subprocess.run(
        [
            NODEOSD,
            "--config",
            str(cfg),
            "--state-dir",
            str(tmp_path / "s"),
            "--api-socket",
            str(tmp_path / "a.sock"),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr
    assert not (tmp_path / "s").exists()


def test_explicit_missing_config_file_exits_2(tmp_path) -> None:
    r = subprocess.run(
        [NODEOSD, "--config", str(tmp_path / "nope.toml")], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2
    assert "does not exist" in r.stderr


def test_cli_without_a_daemon_says_where_it_looked(tmp_path) -> None:
    d = Daemon(tmp_path)
    r = d.cli("status")
    assert r.returncode == 1
    assert str(d.socket) in r.stderr and "is it running" in r.stderr


def test_status_reads_the_same_through_the_fast_path_and_through_click(daemon: Daemon) -> None:
    """`nodeos status` skips click at start-up (nodeos/cli/fast.py); an operator sees the same."""
    from click.testing import CliRunner

    from nodeos.cli.main import cli

    daemon.start()
    fast_json = daemon.cli_json("status")
    fast_text = daemon.cli("status", check=True).stdout
    runner = CliRunner()
    via_click = runner.invoke(cli, ["--socket", str(daemon.socket), "status", "--json"])
    assert via_click.exit_code == 0, via_click.output
    click_json = json.loads(via_click.output)
    moving = {"uptime_s", "api"}  # uptime and the daemon's request counters move between calls
    for st in (fast_json, click_json):  # the lease's age and renewal counts move too
        st.get("control", {}).pop("lease", None)
    assert {k: v for k, v in fast_json.items() if k not in moving} == {
        k: v for k, v in click_json.items() if k not in moving
    }
    text_click = runner.invoke(cli, ["--socket", str(daemon.socket), "status"])
    assert text_click.exit_code == 0
    assert _without_moving_lines(fast_text) == _without_moving_lines(text_click.output)


def _without_moving_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if not ln.startswith(("version", "api"))]
