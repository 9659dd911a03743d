"""Fixtures of the VM lab tier (`-m lab`): the appliance image booted in QEMU VMs.

How to write a lab test (one lab per test module; it boots once for the module and is torn
down after its last test, even when a test or the boot fails):

    import pytest

    pytestmark = pytest.mark.lab
    LAB = dict(storage=1, drives=2, hosts=1)   # optional; this is the default

    def test_drives(lab):                        # lab: nodeos_devtools.lab.Lab, already up and ready
        r = lab.exec("s1", ["nvme", "list", "-o", "json"])     # ExecResult: rc, stdout, stderr
        assert r.rc == 0
        lab.sh("h1", f"ping -c1 -W2 {lab.addr('s1')}")         # sh -ec, raises unless rc == 0
        lab.kill("s1"); lab.start("s1")                          # abrupt power-off, boot again
        lab.cut("s1"); lab.heal("s1")                            # network port down / up

Other keys of LAB: drive_size_mib (default 1024), cluster, labels (see Lab.up).

A lab boots in minutes under TCG, so modules that fit share one: `LAB = "one"` (1 storage VM
with 2 drives, h1 and h2) or `LAB = "cluster3"` (s1..s3 formed into one cluster, h1; h1 and h2
with NODEOS_LAB_FULL=1): one boot per shape per session (see tests/lab/shared_labs.py). Such a
module must leave the lab as it found it (delete its pools, volumes and hosts, disconnect,
restart what it stopped); that is checked after the module, and a lab left dirty is replaced
and reported as an error. Modules of a shape run next to each other, and its lab goes down after
the last of them.

VMs are s1..sN (storage: nodeosd, nvmet, nvmet-tcp, nvmet-rdma, rxe0 on eth0) and h1..hM
(GPU nodes: nvme-cli, fio, nvme-tcp, nvme-rdma, rxe0, native multipath). `lab.addr(vm)`,
`lab.serials(vm)`, `lab.spec(vm).hostnqn`.
The image is built (or refreshed after a change under nodeos/) before the lab boots; the
base layer is cached, so a refresh takes seconds. Serial consoles and QEMU logs of a module
with a failing test land in artifacts/lab/<module>/. Needs root; tests are skipped elsewhere.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeos_devtools.lab import Lab
from tests.lab import shared_labs

PROJECT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("NODEOS_ARTIFACTS", PROJECT / "artifacts")) / "lab"
DEFAULT_LAB = dict(storage=1, drives=2, hosts=1)
FAILED = "_nodeos_lab_failed"
SETTLE_S = 180.0


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
        the_lab = getattr(item, "funcargs", {}).get("lab")
        if isinstance(the_lab, Lab):
            _name_kernel_trouble(rep, the_lab)


def _name_kernel_trouble(rep: pytest.TestReport, the_lab: Lab) -> None:
    """A failed lab test names a guest kernel that crashed (or warned) in the VMs' current boot:
    without it the report shows an agent timeout, or a later test finds the VM dead (issue 25)."""
    try:
        found = [t for t in (the_lab.kernel_trouble(vm) for vm in the_lab.vms) if t is not None]
    except Exception as e:  # the lab's state is gone (down already): nothing to name
        rep.sections.append(("guest kernels", f"not checked: {e}"))
        return
    if not found:
        return
    lines = [t.message(the_lab.vm_dir(t.vm) / "console.log") for t in found]
    rep.sections.append(("guest kernels", "\n".join(lines)))
    crashed = [line for t, line in zip(found, lines, strict=True) if t.fatal]
    crash = getattr(getattr(rep.longrepr, "reprcrash", None), "message", None)
    if crashed and isinstance(crash, str) and "kernel crashed" not in crash:
        # The short summary (-ra) shows this one line: lead with the crash, keep what failed.
        rep.longrepr.reprcrash.message = f"{'; '.join(crashed)} | {crash}"  # type: ignore[union-attr]


def _save_artifacts(lab: Lab, module_name: str) -> Path:
    dest = ARTIFACTS / module_name
    shutil.rmtree(dest, ignore_errors=True)
    lab.collect(dest)
    # nodeosd logs to the journal, not the console: without this a daemon's last words go
    # down with the lab.
    for vm in lab.storage_vms:
        try:
            r = lab.exec(vm, ["journalctl", "-u", "nodeosd", "--no-pager", "-o", "short-monotonic"], 120)
            (dest / f"{vm}-nodeosd.log").write_text(r.stdout)
        except Exception as e:  # a VM powered off or hung: what the consoles show is all there is
            (dest / f"{vm}-nodeosd.log").write_text(f"journal not read: {e}\n")
    failed = lab.failed_dir
    if failed.is_dir():
        for f in failed.iterdir():
            shutil.copyfile(f, dest / f.name)
    return dest


def _shape_of(module: Any) -> str | None:
    shape = getattr(module, "LAB", None)
    if isinstance(shape, str):
        if shape not in shared_labs.SHAPES:
            raise pytest.UsageError(
                f"{module.__name__}: LAB = {shape!r}: not one of {sorted(shared_labs.SHAPES)}"
            )
        return shape
    return None


@pytest.hookimpl(trylast=True)  # after -k/-m deselection: only modules that will run count
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Lab modules of one shared shape run next to each other (their lab is booted once and
    goes down after the last of them); other tests keep their places."""
    here = Path(__file__).resolve().parent
    slots = [i for i, it in enumerate(items) if Path(str(it.fspath)).resolve().parent == here]
    order = list(shared_labs.SHAPES)

    def key(it: pytest.Item) -> int:
        shape = _shape_of(getattr(it, "module", None))
        return order.index(shape) if shape else len(order)

    lab_items = sorted((items[i] for i in slots), key=key)
    for i, it in zip(slots, lab_items, strict=True):
        items[i] = it


def pytest_collection_finish(session: pytest.Session) -> None:
    """The modules that will use each shared lab: after deselection (-m, -k), and without the
    tests skipped outright (NODEOS_LAB_FULL): a module counted but never run kept its lab up,
    an idle VM beside every later lab (seen 2026-11-29: lab `one`'s s1 through all of cluster3)."""
    users: dict[str, set[str]] = {}
    for it in session.items:
        shape = _shape_of(getattr(it, "module", None))
        if shape and "lab" in getattr(it, "fixturenames", ()) and not _skipped_outright(it):
            users.setdefault(shape, set()).add(it.module.__name__)  # type: ignore[attr-defined]
    session.config.stash[_USERS] = users


def _skipped_outright(item: pytest.Item) -> bool:
    """A `skip` mark, or a `skipif` whose condition is a plain true value (string conditions,
    which pytest evaluates itself, count as running)."""
    if any(True for _ in item.iter_markers("skip")):
        return True
    for mark in item.iter_markers("skipif"):
        cond = mark.args[0] if mark.args else mark.kwargs.get("condition")
        if isinstance(cond, bool) and cond:
            return True
    return False


_USERS = pytest.StashKey[dict[str, set[str]]]()
_BOOT_FAILED = pytest.StashKey[dict[str, str]]()
_USED = pytest.StashKey[set[str]]()  # the shared labs this session booted or used


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A shared lab this session used whose last module did not run (interrupted session) goes
    down here; never one this session did not touch (a `--collect-only` beside a running session
    of the same checkout took that session's lab down, 2026-11-27)."""
    if os.geteuid() != 0:
        return
    for shape in session.config.stash.get(_USED, set()):
        the_lab = Lab(lab_name_for(f"shared.{shape}"))
        if the_lab.is_up():
            the_lab.down()


def _boot(the_lab: Lab, module_name: str, sizes: dict[str, Any]) -> None:
    if the_lab.is_up():
        the_lab.down()  # left over by an interrupted earlier run
    try:
        the_lab.up(**sizes)
    except BaseException:
        dest = _save_artifacts(the_lab, module_name)
        the_lab.down()
        print(f"lab consoles kept in {dest}")
        raise


@pytest.fixture(scope="module")
def lab(request: pytest.FixtureRequest) -> Iterator[Lab]:
    """The module's lab, up and ready: a shared one (LAB = "one"), or its own sized by LAB."""
    if os.geteuid() != 0:
        pytest.skip("the VM lab needs root (network namespaces, taps)")
    module = request.module
    shape = _shape_of(module)
    if shape is not None:
        yield from _shared(request, module, shape)
        return
    sizes = {**DEFAULT_LAB, **getattr(module, "LAB", {})}
    the_lab = Lab(lab_name_for(module.__name__))
    _boot(the_lab, module.__name__, sizes)
    try:
        yield the_lab
    finally:
        if getattr(module, FAILED, False):
            dest = _save_artifacts(the_lab, module.__name__)
            print(f"lab consoles kept in {dest}")
        the_lab.down()


def _shared(request: pytest.FixtureRequest, module: Any, shape: str) -> Iterator[Lab]:
    the_lab = Lab(lab_name_for(f"shared.{shape}"))
    failed = request.config.stash.setdefault(_BOOT_FAILED, {})
    if shape in failed:  # one failed boot per session, not one per module
        pytest.fail(f"the shared lab {shape!r} failed to boot earlier in this session: {failed[shape]}")
    request.config.stash.setdefault(_USED, set()).add(shape)
    stopped = the_lab.stopped_vms() if the_lab.is_up() else []
    if stopped:  # an earlier run killed from outside, or a module that powered a VM off
        print(f"shared lab {shape!r}: {', '.join(stopped)} not running: taken down and booted again")
        the_lab.down()
    if not the_lab.is_up():
        try:
            _boot(the_lab, module.__name__, shared_labs.up_kwargs(shape))
        except Exception as e:
            failed[shape] = str(e).splitlines()[0][:300]
            raise
    users = request.config.stash.get(_USERS, {}).get(shape, set())
    users.discard(module.__name__)
    left: list[str] = []
    try:
        yield the_lab
    finally:
        if getattr(module, FAILED, False):
            dest = _save_artifacts(the_lab, module.__name__)
            print(f"lab consoles kept in {dest}")
        if users:  # others still to come: they need it as this module found it
            left = _problems(the_lab, shape)
            # What the daemons finish on their own after a module's last command (a pool the
            # agent is still removing) gets a bounded time; a real leak stays and is reported.
            deadline = time.monotonic() + SETTLE_S
            while left and time.monotonic() < deadline:
                time.sleep(5)
                left = _problems(the_lab, shape)
        if left or not users:
            the_lab.down()
    if left:
        pytest.fail(f"{module.__name__} left the shared lab {shape!r} dirty (replaced): " + "; ".join(left))


def _problems(the_lab: Lab, shape: str) -> list[str]:
    """shared_labs.problems, where a check that cannot run (a hung guest) is itself a problem: the
    lab is replaced, never handed on unchecked to the next module."""
    try:
        return shared_labs.problems(the_lab, shape)
    except Exception as e:  # whatever broke the check, the lab is not known clean
        return [f"cleanliness check failed: {str(e).splitlines()[0][:300]}"]
