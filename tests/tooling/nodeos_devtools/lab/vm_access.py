"""Reaching into a running lab VM through its guest agent: commands (exec, exec_stream, sh) and
waiting until a VM has booted and is ready (agent answers, systemd up, nodeosd active on storage)."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from typing import Any

from nodeos.errors import BadInput, OperationFailed
from nodeos_devtools.lab import netcopy, qemu
from nodeos_devtools.lab.console_scan import GuestKernelCrashed
from nodeos_devtools.lab.plan import subnet_of
from nodeos_devtools.lab.qemu import VmSpec
from nodeos_devtools.lab.qga import AgentUnavailable, CommandTimedOut, ExecResult, GuestAgent
from nodeos_devtools.lab.state import LabState

# Generous: on a 2-core host shared by many TCG VMs a boot has taken 10-15 min (a bound, not a wait).
BOOT_TIMEOUT = float(os.environ.get("NODEOS_LAB_BOOT_TIMEOUT", "1800"))


class VmAccess(LabState):
    """A lab's VMs from the inside: run commands, wait for boot."""

    def exec(
        self,
        vm: str,
        argv: list[str],
        timeout: float = 120.0,
        input: bytes | str | None = None,
        *,
        check: bool = False,
    ) -> ExecResult:
        """Run argv inside the VM through its guest agent; check=True raises on rc != 0."""
        agent = self._running_agent(vm, argv)
        since = self._console_size(vm)
        try:
            r = agent.exec(list(argv), timeout=timeout, input=input)
        except AgentUnavailable as e:
            raise self._agent_lost(vm, e) from e
        except OperationFailed as e:  # the command outlived its timeout (killed), or qemu-ga refused
            raise OperationFailed(self._kernel_note(vm, since) + str(e)) from e
        if check and r.rc != 0:
            raise OperationFailed(
                self._kernel_note(vm, since)
                + f"{vm}: {argv!r} exited {r.rc}\nstdout: {r.stdout[-2000:]}\nstderr: {r.stderr[-2000:]}"
            )
        return r

    def exec_stream(
        self,
        vm: str,
        argv: list[str],
        on_stdout: Callable[[bytes], None],
        on_stderr: Callable[[bytes], None],
        timeout: float = 600.0,
        input: bytes | None = None,
    ) -> int:
        """Like exec, but output is handed to the callbacks while the command runs."""
        agent = self._running_agent(vm, argv)
        since = self._console_size(vm)
        try:
            return agent.exec_stream(list(argv), on_stdout, on_stderr, timeout=timeout, input=input)
        except AgentUnavailable as e:
            raise self._agent_lost(vm, e) from e
        except OperationFailed as e:
            raise OperationFailed(self._kernel_note(vm, since) + str(e)) from e

    # ---- the guest kernel, as its console tells ------------------------------------------
    def _agent_lost(self, vm: str, e: AgentUnavailable) -> AgentUnavailable:
        """The error for a guest agent that stopped answering: a kernel that died says so
        (issue 25: an rxe oops surfaced as a bare 30 s agent timeout); otherwise the console's
        last lines, which show what else it was (OOM, hung task, qemu-ga gone)."""
        if isinstance(e, GuestKernelCrashed):
            return e
        trouble = self.kernel_trouble(vm)
        console = self.vm_dir(vm) / "console.log"
        if trouble is not None and trouble.fatal:
            return GuestKernelCrashed(f"{trouble.message(console)}\n({e})", trouble)
        note = f"{trouble.message(console)}\n" if trouble is not None else ""
        tail = "\n".join(self.console_tail(vm, 30))
        return AgentUnavailable(f"{note}{e}\n{vm}'s console, last lines:\n{tail}")

    def _kernel_note(self, vm: str, since: int) -> str:
        """A first line naming what VM's kernel reported since byte `since` of its console, for
        a command that failed or timed out; empty when it reported nothing."""
        trouble = self.kernel_trouble(vm, since)
        return f"{trouble.message(self.vm_dir(vm) / 'console.log')}\n" if trouble is not None else ""

    def _running_agent(self, vm: str, argv: list[str]) -> GuestAgent:
        """The agent of a running VM, for a command (argv) to run there."""
        if not argv:
            raise BadInput("no command given", field="argv")
        v = self._vm(self._load(), vm)
        if not qemu.is_ours(v.pid, self._tag(vm)):
            raise OperationFailed(f"{vm} is not running (start it first){qemu.exit_note(v.pid)}")
        return self._agent(vm)

    def copy(self, src: str | os.PathLike[str], vm: str, path: str, timeout: float = 120.0) -> int:
        """Put file `src` at `path` in VM; it appears there whole (written beside, then renamed).
        Over the lab network (netcopy.py: seconds), else through its guest agent (no network
        needed; ~250 MB took 13 min under TCG). Returns its size."""
        p = os.fspath(src)
        if not os.path.isfile(p) or not os.access(p, os.R_OK):
            raise BadInput(f"{p} is not a readable file", field="file", allowed="a readable file here")
        if not path.startswith("/") or path.endswith("/"):
            raise BadInput(f"{path!r} is not a file path in the VM", field="path", allowed="an absolute path")
        agent = self._running_agent(vm, ["copy", path])
        part = f"{path}.nodeos-lab-part"
        st = self._load()
        try:
            if self._vm(st, vm).cut:
                raise OperationFailed(f"{vm} is cut off the lab network")

            def run(vm: str, argv: list[str], t: float) -> tuple[int, str, str]:
                r = self.exec(vm, argv, timeout=t)
                return r.rc, r.stdout, r.stderr

            n = netcopy.copy(self.ns, f"{subnet_of(st['subnet'])}.1", p, vm, part, run, timeout)
        except (OperationFailed, OSError) as e:  # the slow way, which needs no network
            self.progress(f"{vm}: copy over the lab network failed ({e}): through the guest agent")
            try:
                with open(p, "rb") as f:
                    n = agent.write_file(part, f)
            except AgentUnavailable as e:
                raise self._agent_lost(vm, e) from e
        self.exec(vm, ["mv", "-f", part, path], timeout=timeout, check=True)
        return n

    def sh(self, vm: str, script: str, timeout: float = 120.0, *, check: bool = True) -> ExecResult:
        """A shell snippet inside the VM (`sh -ec`); raises unless it succeeds by default."""
        return self.exec(vm, ["sh", "-ec", script], timeout=timeout, check=check)

    def _wait_ready(self, st: dict[str, Any], names: list[str], timeout: float = BOOT_TIMEOUT) -> None:
        """Every VM answers through its agent, finished booting, and (storage) runs nodeosd."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        pending = list(names)
        next_note = t0 + 30
        next_crash_check = t0  # then every 10 s
        while pending:
            if time.monotonic() > next_crash_check:
                # A kernel that died while booting never gets its agent up: say so now, not
                # after BOOT_TIMEOUT (30 min).
                next_crash_check += 10
                for n in pending:
                    trouble = self.kernel_trouble(n)
                    if trouble is not None and trouble.fatal:
                        msg = trouble.message(self.vm_dir(n) / "console.log")
                        raise GuestKernelCrashed(f"{msg} (while booting)", trouble)
            if time.monotonic() > next_note:
                next_note += 30
                for n in pending:
                    line = self._last_console_line(n)
                    self.progress(f"{n}: booting ({time.monotonic() - t0:.0f} s): {line}")
            for n in list(pending):
                v = st["vms"][n]
                if not qemu.is_ours(v.pid, self._tag(n)):
                    raise OperationFailed(
                        f"{n}: QEMU exited while booting; see {self.vm_dir(n) / 'console.log'}"
                    )
                if self._ready(st, v, deadline):
                    pending.remove(n)
                    self.progress(f"{n}: ready after {time.monotonic() - t0:.0f} s")
            if pending:
                if time.monotonic() > deadline:
                    raise OperationFailed(f"{', '.join(pending)} not ready after {timeout:.0f} s; "
                                          f"see the consoles under {self.dir / 'vms'}")  # fmt: skip
                time.sleep(1.0)

    def _last_console_line(self, vm: str) -> str:
        """The latest line of the VM's console (progress display)."""
        lines = self.console_tail(vm, 1)
        return lines[-1][:100] if lines else ""

    def console_tail(self, vm: str, n: int) -> list[str]:
        """The last n non-empty lines of the VM's console, escape sequences dropped."""
        try:
            with open(self.vm_dir(vm) / "console.log", "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 200 * n - 4096))
                tail = f.read().decode(errors="replace")
        except OSError:
            return []
        lines = [re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[^\[]", "", ln).strip() for ln in tail.splitlines()]
        return [ln for ln in lines if ln][-n:]

    def _ready(self, st: dict[str, Any], v: VmSpec, deadline: float) -> bool:
        # A probe that outlives its 30 s is a guest too busy right after boot (TCG, other VMs
        # booting: seen failing a demo's `up` at 181 s), not a failed one: asked again.
        try:
            return self._ready_now(st, v, deadline)
        except CommandTimedOut as e:
            self.progress(f"{v.name}: not ready yet ({e})")
            return False

    def _ready_now(self, st: dict[str, Any], v: VmSpec, deadline: float) -> bool:
        agent = self._agent(v.name)
        if not agent.ping(timeout=2.0):
            return False
        try:
            r = agent.exec(
                ["systemctl", "is-system-running", "--wait"], timeout=max(10.0, deadline - time.monotonic())
            )
        except AgentUnavailable:
            return False
        if r.stdout.strip() not in ("running", "degraded"):
            return False
        init = agent.exec(["systemctl", "is-active", "nodeos-lab-init.service"], timeout=30)
        if init.stdout.strip() != "active":
            log = agent.exec(
                ["journalctl", "-b", "-u", "nodeos-lab-init", "--no-pager", "-n", "30"], timeout=30
            )
            raise OperationFailed(f"{v.name}: lab setup failed in the VM:\n{log.stdout}")
        if v.role == "storage" and st.get("has_daemon"):
            # Starting (Type=notify) can take long under an emulated CPU, and Restart=always may
            # be between attempts: wait while it is on its way, give up when it keeps failing.
            failures = 0
            while True:
                a = agent.exec(["systemctl", "is-active", "nodeosd.service"], timeout=30)
                state = a.stdout.strip()
                if state == "active":
                    break
                restarts = agent.exec(["systemctl", "show", "-P", "NRestarts", "nodeosd.service"], timeout=30)
                failures = int(restarts.stdout.strip() or 0) + (state == "failed")
                # "failed": systemd gave up (e.g. exit 2, a bad configuration, is never restarted).
                if time.monotonic() > deadline or failures >= 3 or state in ("inactive", "failed"):
                    log = agent.exec(
                        ["journalctl", "-b", "-u", "nodeosd", "--no-pager", "-n", "40"], timeout=30
                    )
                    raise OperationFailed(
                        f"{v.name}: nodeosd is not active ({state}, {failures} failed start(s)):\n"
                        + log.stdout
                    )
                time.sleep(2)
        return True

    def wait_ready(self, vm: str, timeout: float = BOOT_TIMEOUT) -> None:
        st = self._load()
        self._vm(st, vm)
        self._wait_ready(st, [vm], timeout)
