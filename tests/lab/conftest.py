"""Fixtures of the VM lab tier (`-m lab`): the appliance image booted in QEMU VMs.

How to write a lab test (one lab per test module; it boots once for the module and is torn
down after its last test, even when a test or the boot fails):

    import pytest

    pytestmark = pytest.mark.lab
    LAB = dict(storage=1, drives=2, hosts=1)   # optional; this is the default

    def test_drives(lab):                        # lab: nodeos.lab.Lab, already up and ready
        r = lab.exec("s1", ["nvme", "list", "-o", "json"])     # ExecResult: rc, stdout, stderr
        assert r.rc == 0
        lab.sh("h1", f"ping -c1 -W2 {lab.addr('s1')}")         # sh -ec, raises unless rc == 0
        lab.kill("s1"); lab.start("s1")                          # abrupt power-off, boot again
        lab.cut("s1"); lab.heal("s1")                            # network port down / up

Other keys of LAB: drive_size_mib (default 1024). VMs are s1..sN (storage: nodeosd, nvmet,
nvmet-tcp, nvmet-rdma, rxe0 on eth0) and h1..hM (GPU nodes: nvme-cli, fio, nvme-tcp,
nvme-rdma, rxe0, native multipath). `lab.addr(vm)`, `lab.serials(vm)`, `lab.spec(vm).hostnqn`.
The image is built (or refreshed after a change under nodeos/) before the lab boots; the
base layer is cached, so a refresh takes seconds. Serial consoles and QEMU logs of a module
with a failing test land in artifacts/lab/<module>/. Needs root; tests are skipped elsewhere.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeos.lab import Lab

PROJECT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("NODEOS_ARTIFACTS", PROJECT / "artifacts")) / "lab"
DEFAULT_LAB = dict(storage=1, drives=2, hosts=1)
FAILED = "_nodeos_lab_failed"


def lab_name_for(module_name: str) -> str:
    """A short lab name per test module and checkout, so modules never share (or collide on) a lab,
    even when two checkouts run the same module on one machine."""
    short = module_name.rsplit(".", 1)[-1].removeprefix("test_")[:8].replace("_", "-").strip("-") or "t"
    key = f"{Path(__file__).resolve().parent}:{module_name}"
    return f"t-{short}-{hashlib.sha1(key.encode()).hexdigest()[:4]}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()
    if rep.failed and "lab" in getattr(item, "fixturenames", ()):
        module = getattr(item, "module", None)
        if module is not None:
            setattr(module, FAILED, True)


def _save_artifacts(lab: Lab, module_name: str) -> Path:
    dest = ARTIFACTS / module_name
    shutil.rmtree(dest, ignore_errors=True)
    lab.collect(dest)
    failed = lab.failed_dir
    if failed.is_dir():
        for f in failed.iterdir():
            shutil.copyfile(f, dest / f.name)
    return dest


@pytest.fixture(scope="module")
def lab(request: pytest.FixtureRequest) -> Iterator[Lab]:
    """The module's lab, up and ready; sizes from the module's LAB dict."""
    if os.geteuid() != 0:
        pytest.skip("the VM lab needs root (network namespaces, taps)")
    module = request.module
    sizes = {**DEFAULT_LAB, **getattr(module, "LAB", {})}
    the_lab = Lab(lab_name_for(module.__name__))
    if the_lab.is_up():
        the_lab.down()  # left over by an interrupted earlier run of this module
    try:
        the_lab.up(**sizes)
    except BaseException:
        dest = _save_artifacts(the_lab, module.__name__)
        the_lab.down()
        print(f"lab consoles kept in {dest}")
        raise
    try:
        yield the_lab
    finally:
        if getattr(module, FAILED, False):
            dest = _save_artifacts(the_lab, module.__name__)
            print(f"lab consoles kept in {dest}")
        the_lab.down()
