"""nodeosd's mDNS service in a real daemon: loaded, reported in status and /metrics, stopped
cleanly, its config keys checked. (Records on the wire: tests/netns/test_mdns.py; a witness
keeps no discovery controller, so it advertises nothing.)"""

from __future__ import annotations

import subprocess
import urllib.request
from pathlib import Path

import pytest

from nodeos.cluster.localcluster import free_port

from .conftest import NODEOSD, Daemon

pytestmark = [pytest.mark.process, pytest.mark.timeout(120)]


def test_a_witness_says_why_it_advertises_nothing_in_status_and_metrics(daemon: Daemon) -> None:
    daemon.extra = ["--metrics-listen", f"127.0.0.1:{free_port()}"]
    daemon.start()
    st = daemon.cli_json("status")
    assert "mdns" in st["services"]
    m = st["mdns"]
    assert m["enabled"] is True and m["management"] is False
    assert m["advertised"] == [] and m["problems"] == []
    assert "the data plane keeps no discovery controller" in m["notes"]
    with urllib.request.urlopen(st["observe"]["metrics_url"], timeout=10) as r:
        text = r.read().decode()
    assert "nodeos_mdns_ok 1.0" in text and "nodeos_mdns_failures_total 0.0" in text
    assert daemon.terminate() == 0
    assert "mDNS" not in daemon.log.read_text()  # nothing to withdraw, nothing to warn about


def test_switched_off_in_the_config_file(daemon: Daemon) -> None:
    cfg = daemon.root / "nodeosd.toml"
    cfg.write_text("mdns = false\n")
    daemon.extra = ["--config", str(cfg), "--metrics-listen", "off"]
    daemon.start()
    m = daemon.cli_json("status")["mdns"]
    assert m["enabled"] is False and m["notes"] == ["mDNS is off (mdns = false)"]


@pytest.mark.parametrize("content", ['mdns = "yes"\n', "mdns_management = 1\n"])
def test_a_key_that_is_not_a_boolean_exits_2_naming_it(tmp_path: Path, content: str) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(content)
    argv = [NODEOSD, "--config", str(cfg), "--state-dir", str(tmp_path / "s"), "--api-socket"]
    r = subprocess.run([*argv, str(tmp_path / "a.sock")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert content.split(" ")[0] in r.stderr and "true or false" in r.stderr
    assert not (tmp_path / "s").exists()
