"""Naming a guest kernel's failure from its serial console (pure: text in, description out).

A lab VM whose kernel oopsed shows up to the lab only as a guest agent that stops answering;
the console already says why (issue 25: h1's 6.12 kernel oopsed in Soft-RoCE and the lab
reported a 30 s agent timeout). `kernel_trouble` finds the kernel's own failure reports in a
console and names each by its first line and the functions of its call trace:

    BUG: kernel NULL pointer dereference, address: 0000000000000008 (via rdma_rxe):
        do_task -> rxe_receiver -> send_common_ack -> rxe_xmit_packet -> ... -> net_rx_action

A report is *fatal* when the kernel says it killed a context (an Oops, a panic, a general
protection or double fault, `kernel BUG at`); a WARNING, a hung task or a `BUG:` without an
Oops (soft lockup under a starved emulated CPU, sleeping in atomic context) is not, and is
named as trouble rather than as a crash.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from nodeos_devtools.lab.qga import AgentUnavailable

# `nodeos-lab` writes this into the console before each boot of a VM (lab.py, _start_vm): a
# report before the latest one belongs to an earlier boot, not to the VM as it runs now.
BOOT_MARKER = "===== nodeos-lab: starting "

# Up to the printk timestamp (and the caller id some kernels add): what follows is the message.
# Lazy prefix: a grep -n excerpt ("418:[  14.4] ...") or a tool's own prefix goes with it.
_STAMP = re.compile(r"^.*?\[\s*\d+\.\d+\]\s?(?:\[\s*[CT]\d+\]\s?)?")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[^\[]")

# (kind, pattern on the message). Anchored at the start of the message: a userspace line that
# merely mentions "BUG:" or "panic" (journald forwards units' output to the console as
# "unit[pid]: ...") is not the kernel reporting.
_SIGNATURES: list[tuple[str, re.Pattern[str]]] = [
    ("panic", re.compile(r"^Kernel panic - not syncing")),
    ("double fault", re.compile(r"^(?:\w+: )?(?:PANIC: )?double fault")),
    ("general protection fault", re.compile(r"^(?:Oops: )?general protection fault")),
    ("oops", re.compile(r"^Oops: ")),
    ("BUG", re.compile(r"^kernel BUG at ")),
    ("BUG", re.compile(r"^(?:\w+: )?BUG: ")),  # "watchdog: BUG: soft lockup" too
    ("warning", re.compile(r"^WARNING: CPU: ")),
    ("hung task", re.compile(r"^INFO: task \S+ blocked for more than")),
]
_ALWAYS_FATAL = {"panic", "double fault", "general protection fault", "oops"}

_FRAME = re.compile(r"^(\? )?([A-Za-z_.$][\w.$]*)\+0x[0-9a-f]+/0x[0-9a-f]+(?: \[(\w+)\])?")
_RIP = re.compile(r"^RIP: [0-9a-f]{4}:([A-Za-z_.$][\w.$]*)\+0x[0-9a-f]+/0x[0-9a-f]+(?: \[(\w+)\])?")
# Lines that belong to a call trace without being frames: stack markers (<IRQ>, </TASK>, <#DB>)
# and the register dumps of a nested exception ("RSP: ...", "Code: ...", "R13: ...").
_TRACE_NOISE = re.compile(r"^(</?[#\w]+>|[A-Z][A-Z0-9]{1,3}: |Code: )")
_END = re.compile(r"^---\[ end (trace|Kernel panic)")
# Compiler clones name the same function: send_common_ack.isra.0 is send_common_ack.
_CLONE = re.compile(r"(\.(isra|part|constprop|cold|llvm)(\.\d+)?)+$")
# Frames present in every trace of their kind (workqueue and kthread plumbing, syscall and
# exception entry, softirq dispatch, the report printing itself, the scheduler of a sleeping
# task): they name nothing about this failure and would crowd out the frames that do.
_PLUMBING = {
    "process_one_work", "worker_thread", "kthread", "ret_from_fork", "ret_from_fork_asm",
    "smpboot_thread_fn", "entry_SYSCALL_64_after_hwframe", "do_syscall_64", "x64_sys_call",
    "handle_softirqs", "__do_softirq", "do_softirq", "irq_exit_rcu", "__irq_exit_rcu",
    "dump_stack_lvl", "dump_stack", "panic", "oops_end", "__schedule", "schedule",
    "schedule_preempt_disabled", "schedule_timeout", "io_schedule",
}  # fmt: skip
MAX_CHAIN = 8  # frames shown; a longer chain keeps its outer 4 and inner 3 around "..."
MAX_REPORT_LINES = 250  # a report runs to its end marker; one without it stops here


@dataclass
class KernelReport:
    """One failure report of the kernel in a console."""

    kind: str  # a key of _SIGNATURES: panic, oops, BUG, warning, hung task, ...
    first_line: str  # the report's first line, timestamp stripped
    offset: int  # where it starts in the scanned text
    fatal: bool = False
    frames: list[str] = field(default_factory=list)  # innermost first, plumbing dropped
    rip: str | None = None  # the function the CPU was in
    modules: list[str] = field(default_factory=list)  # modules named in its trace

    @property
    def headline(self) -> str:
        line = self.first_line
        if self.kind == "warning":
            # "WARNING: CPU: 0 PID: 29 at FILE:LINE FUNC+0x../0x.. [MOD]": where, not who ran.
            m = re.match(r"WARNING: CPU: \d+ PID: \d+ at (\S+) ([\w.$]+)\+\S+(?: \[(\w+)\])?", line)
            if m:
                line = f"WARNING at {m.group(1)} in {_CLONE.sub('', m.group(2))}"
                line += f" [{m.group(3)}]" if m.group(3) else ""
        elif self.kind == "hung task":
            line = "hung task: " + line.removeprefix("INFO: task ").rstrip(".")
        line = re.sub(r"^(Oops: )+(?=\S)", "Oops: ", line)
        line = re.sub(r" \[#\d+\].*$", "", line)  # "[#1] PREEMPT SMP NOPTI": build flags
        return line[:160]

    @property
    def chain(self) -> list[str]:
        """Caller first, the faulting function last; the middle elided past MAX_CHAIN."""
        out: list[str] = []
        for f in [*reversed(self.frames), *([self.rip] if self.rip else [])]:
            if not out or out[-1] != f:
                out.append(f)
        if len(out) > MAX_CHAIN:
            out = [*out[:4], "...", *out[-3:]]
        return out

    def describe(self) -> str:
        text = self.headline
        if self.modules:
            text += f" (via {', '.join(self.modules)})"
        if self.chain:
            text += ": " + " -> ".join(self.chain)
        return text


@dataclass
class KernelTrouble:
    """What a VM's kernel reported: the first fatal report (if any) leads."""

    vm: str
    reports: list[KernelReport]

    @property
    def fatal(self) -> bool:
        return any(r.fatal for r in self.reports)

    @property
    def main(self) -> KernelReport:
        return next((r for r in self.reports if r.fatal), self.reports[0])

    def describe(self) -> str:
        main = self.main
        text = main.describe()
        i = self.reports.index(main)
        if i > 0:
            # What came first often is the cause (issue 25: a WARNING under rxe_receiver, then
            # the NULL dereference that took the VM down).
            text += f"; first sign: {self.reports[0].describe()}"
        rest = len(self.reports) - 1 - (1 if i > 0 else 0)
        if rest > 0:
            text += f"; {rest} more report(s) in the console"
        return text

    def message(self, console: Path | str) -> str:
        what = "crashed" if self.fatal else "reported trouble"
        return f"VM {self.vm}'s kernel {what}: {self.describe()} (console: {console})"


class GuestKernelCrashed(AgentUnavailable):
    """The guest agent is gone because the VM's kernel died; the message names the crash."""

    def __init__(self, message: str, trouble: KernelTrouble) -> None:
        super().__init__(message)
        self.trouble = trouble


def boot_offset(text: str) -> int:
    """Where the VM's latest boot starts in its console text (0 if no lab marker)."""
    return max(0, text.rfind(BOOT_MARKER))


def _message(line: str) -> str:
    return _STAMP.sub("", _ANSI.sub("", line), count=1).strip()


def _signature(msg: str) -> str | None:
    for kind, pat in _SIGNATURES:
        if pat.search(msg):
            return kind
    return None


def scan_console(text: str, offset: int = 0) -> list[KernelReport]:
    """Every kernel failure report in text[offset:], in order (a pure function)."""
    start = text.rfind("\n", 0, offset) + 1 if offset > 0 else 0  # from the start of that line
    reports: list[KernelReport] = []
    cur: KernelReport | None = None
    trace = "none"  # none -> in (collecting frames) -> done (first trace of the report only)
    lines_in = 0
    pos = start
    for raw in text[start:].splitlines(keepends=True):
        at = pos
        pos += len(raw)
        msg = _message(raw)
        kind = _signature(msg)
        if cur is not None and kind == "oops" and trace == "none" and cur.kind != "oops":
            # "BUG: kernel NULL pointer dereference" / "kernel BUG at" then "Oops: ... [#1]":
            # one report, and the Oops says the kernel killed the context: fatal.
            cur.fatal = True
            kind = None
        if kind is not None:
            cur = KernelReport(kind, msg, at, fatal=kind in _ALWAYS_FATAL)
            reports.append(cur)
            trace, lines_in = "none", 0
            continue
        if cur is None:
            continue
        lines_in += 1
        if _END.match(msg) or lines_in > MAX_REPORT_LINES:
            cur, trace = None, "none"
            continue
        if trace == "none":
            if msg.startswith("Call Trace:"):
                trace = "in"
            elif (m := _RIP.match(msg)) and cur.rip is None:
                cur.rip = _CLONE.sub("", m.group(1))
            continue
        if trace == "in":
            if (m := _FRAME.match(msg) or _RIP.match(msg)) is not None:
                unreliable = m.re is _FRAME and m.group(1)
                name = _CLONE.sub("", m.group(2) if m.re is _FRAME else m.group(1))
                module = m.group(3) if m.re is _FRAME else m.group(2)
                if module and module not in cur.modules:
                    cur.modules.append(module)
                if not unreliable and name not in _PLUMBING and not name.startswith(("asm_", "__pfx_")):
                    cur.frames.append(name)
            elif not _TRACE_NOISE.match(msg):
                trace = "done"
    return reports


def kernel_trouble(vm: str, text: str, offset: int | None = None) -> KernelTrouble | None:
    """The kernel failure reports of VM in its console text from offset (default: its latest
    boot), or None when the kernel reported nothing."""
    reports = scan_console(text, boot_offset(text) if offset is None else offset)
    return KernelTrouble(vm, reports) if reports else None
