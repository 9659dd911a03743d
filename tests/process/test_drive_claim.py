"""`nodeos drive claim|release` through a real nodeosd (issue 12): addresses the machine has no
NVMe function at, or that are no PCI address at all, are refused with exit 2 naming `address`,
and no driver binding changes; `drive list` rows say who owns each drive. (Binding a real
drive: hwtests/spdk.)"""

from __future__ import annotations

import json

from nodeos.hw.pci import Sysfs
from tests.process.conftest import Daemon


def _bindings() -> dict[str, str]:
    return {f.address: f.driver for f in Sysfs().functions()}


def test_claim_and_release_refuse_what_is_no_nvme_drive_here(daemon: Daemon) -> None:
    daemon.start()
    before = _bindings()
    absent = next(a for a in (f"0000:{b:02x}:1f.7" for b in range(256)) if a not in before)
    for verb in ("claim", "release"):
        for addr in (absent, "nvme0n1"):  # the daemon's refusal, the console's
            r = daemon.cli("drive", verb, addr, "--json")
            assert r.returncode == 2, (verb, addr, r.stdout, r.stderr)
            assert json.loads(r.stdout)["error"]["field"] == "address"
            human = daemon.cli("drive", verb, addr)
            assert human.returncode == 2 and "(field: address)" in human.stderr
    assert _bindings() == before
    rows = daemon.cli_json("drive", "list")
    known = ("kernel", "spdk", "none", "test")
    assert all(r["owner"] in known or r["owner"] == before.get(r["address"]) for r in rows)
    assert {r["address"] for r in rows if r["owner"] != "test"} <= set(before)
