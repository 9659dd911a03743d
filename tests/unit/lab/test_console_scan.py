"""Naming a guest kernel's failure from its console (tests/tooling/nodeos_devtools/lab/console_scan.py), no
VMs:
the recorded rxe oops of issue 25, small made-up consoles, and a clean boot that must stay clean."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeos_devtools.lab.console_scan import BOOT_MARKER, kernel_trouble, scan_console

RXE_OOPS = Path("evidence/lab-rxe-oops/h1-console-oops.txt")
CLEAN = [Path(f"evidence/demo-delete-hang/{vm}-console-excerpt.txt") for vm in ("s1", "s2", "s3")]


def _recorded(shared_dir: Path, rel: Path) -> str:
    p = shared_dir / rel
    if not p.is_file():
        pytest.skip(f"{p} is absent: the recorded console is not here")
    return p.read_text(errors="replace")


def test_the_recorded_rxe_oops_is_named_with_its_call_trace(shared_dir: Path) -> None:
    text = _recorded(shared_dir, RXE_OOPS)
    warning, bug = scan_console(text)
    assert (warning.kind, warning.fatal) == ("warning", False)
    assert warning.headline == "WARNING at arch/x86/kernel/traps.c:1120 in exc_debug_kernel"
    assert warning.chain == [
        "do_task", "rxe_receiver", "send_common_ack", "prepare_ack_packet", "rxe_init_packet",
        "__alloc_skb", "kmem_cache_alloc_node_noprof", "exc_debug_kernel",
    ]  # fmt: skip
    # The BUG and the "Oops: ... [#1]" after it are one report, and a fatal one.
    assert (bug.kind, bug.fatal, bug.rip) == ("BUG", True, "net_rx_action")
    assert bug.headline == "BUG: kernel NULL pointer dereference, address: 0000000000000008"
    assert bug.modules == ["rdma_rxe"]
    assert " -> ".join(bug.chain) == (
        "do_task -> rxe_receiver -> send_common_ack -> rxe_xmit_packet -> ... -> __dev_queue_xmit"
        " -> __local_bh_enable_ip -> net_rx_action"
    )

    trouble = kernel_trouble("h1", text)
    assert trouble is not None and trouble.fatal
    msg = trouble.message("/lab/vms/h1/console.log")
    assert msg.startswith("VM h1's kernel crashed: BUG: kernel NULL pointer dereference")
    assert "rxe_receiver -> send_common_ack" in msg and "first sign: WARNING at" in msg
    assert msg.endswith("(console: /lab/vms/h1/console.log)")


def test_a_clean_boot_reports_nothing(shared_dir: Path) -> None:
    for rel in CLEAN:
        text = _recorded(shared_dir, rel)
        assert scan_console(text) == [], rel
        assert kernel_trouble("s3", text) is None


def test_scanning_from_an_offset_past_the_oops_finds_nothing(shared_dir: Path) -> None:
    text = _recorded(shared_dir, RXE_OOPS)
    after = text.index("\n", text.index("---[ end trace", text.index("BUG: kernel NULL"))) + 1
    assert scan_console(text, after) == []
    # An offset in the middle of a line scans from that line's start.
    assert [r.kind for r in scan_console(text, text.index("NULL pointer"))] == ["BUG"]


def test_an_earlier_boot_of_the_vm_does_not_count(shared_dir: Path) -> None:
    oops = _recorded(shared_dir, RXE_OOPS)
    again = f"{oops}\n{BOOT_MARKER}h1 at 2026-11-29 04:00:00 =====\n[    0.000000] Linux version 6.12\n"
    assert kernel_trouble("h1", again) is None
    assert kernel_trouble("h1", again, 0) is not None  # the whole console still has it


PANIC = """\
[    2.912345] VFS: Cannot open root device "vda" or unknown-block(0,0): error -6
[    2.913000] Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)
[    2.913100] CPU: 0 UID: 0 PID: 1 Comm: swapper/0 Not tainted 6.12.117+deb13-amd64 #1
[    2.913200] Call Trace:
[    2.913210]  <TASK>
[    2.913220]  dump_stack_lvl+0x5d/0x80
[    2.913230]  panic+0x118/0x2d0
[    2.913240]  mount_root_generic+0x1d1/0x270
[    2.913250]  prepare_namespace+0x1fc/0x240
[    2.913260]  kernel_init_freeable+0x253/0x290
[    2.913270]  ? __pfx_kernel_init+0x10/0x10
[    2.913280]  kernel_init+0x1a/0x140
[    2.913290]  ret_from_fork+0x34/0x50
[    2.913300]  ret_from_fork_asm+0x1a/0x30
[    2.913310]  </TASK>
[    2.913400] Kernel Offset: 0x9000000 from 0xffffffff81000000
[    2.913500] ---[ end Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0) ]---
"""


def test_a_panic_is_fatal_and_named_without_the_printing_frames() -> None:
    (r,) = scan_console(PANIC)
    assert (r.kind, r.fatal) == ("panic", True)
    assert r.headline == "Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)"
    assert r.chain == ["kernel_init", "kernel_init_freeable", "prepare_namespace", "mount_root_generic"]
    t = kernel_trouble("s1", PANIC)
    assert t is not None and t.message("c.log").startswith("VM s1's kernel crashed: Kernel panic")


HUNG = """\
[  727.123456] INFO: task kworker/u4:2:88 blocked for more than 120 seconds.
[  727.123500]       Not tainted 6.12.117+deb13-amd64 #1 Debian 6.12.117-1
[  727.123600] "echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.
[  727.123700] task:kworker/u4:2    state:D stack:0     pid:88    tgid:88    ppid:2      flags:0x00004000
[  727.123800] Workqueue: nvme-wq nvme_scan_work [nvme_core]
[  727.123900] Call Trace:
[  727.123910]  <TASK>
[  727.123920]  __schedule+0x403/0xbf0
[  727.123930]  schedule+0x27/0xf0
[  727.123940]  blk_mq_freeze_queue_wait+0x6b/0xa0
[  727.123950]  ? __pfx_autoremove_wake_function+0x10/0x10
[  727.123960]  nvme_update_ns_info_block+0x1a2/0x6e0 [nvme_core]
[  727.123970]  nvme_scan_ns+0x2b4/0x3e0 [nvme_core]
[  727.123980]  process_one_work+0x18b/0x340
[  727.123990]  worker_thread+0x191/0x2f0
[  727.124000]  kthread+0xd2/0x100
[  727.124010]  ret_from_fork+0x34/0x50
[  727.124020]  ret_from_fork_asm+0x1a/0x30
[  727.124030]  </TASK>
[  730.000000] systemd[1]: Started some.service.
"""


def test_a_hung_task_is_trouble_but_not_a_crash() -> None:
    (r,) = scan_console(HUNG)
    assert (r.kind, r.fatal) == ("hung task", False)
    assert r.headline == "hung task: kworker/u4:2:88 blocked for more than 120 seconds"
    assert r.chain == ["nvme_scan_ns", "nvme_update_ns_info_block", "blk_mq_freeze_queue_wait"]
    assert r.modules == ["nvme_core"]
    t = kernel_trouble("h1", HUNG)
    assert t is not None and not t.fatal
    assert t.message("c.log").startswith("VM h1's kernel reported trouble: hung task: kworker/u4:2:88")


GPF_AND_DOUBLE = """\
[   50.100000] Oops: general protection fault, probably for non-canonical address 0xdead000000000122: \
0000 [#1] PREEMPT SMP NOPTI
[   50.100100] CPU: 0 UID: 0 PID: 412 Comm: nvme Not tainted 6.12.117+deb13-amd64 #1
[   50.100200] RIP: 0010:nvme_rdma_free_queue+0x2a/0x60 [nvme_rdma]
[   50.100300] Call Trace:
[   50.100310]  <TASK>
[   50.100320]  nvme_rdma_teardown_io_queues.part.0+0x8c/0xa0 [nvme_rdma]
[   50.100330]  nvme_rdma_delete_ctrl+0x2d/0x90 [nvme_rdma]
[   50.100340]  </TASK>
[   50.100400] ---[ end trace 0000000000000000 ]---
[   60.000000] traps: PANIC: double fault, error_code: 0x0
"""


def test_general_protection_and_double_faults_are_fatal() -> None:
    gpf, df = scan_console(GPF_AND_DOUBLE)
    assert (gpf.kind, gpf.fatal) == ("general protection fault", True)
    assert (df.kind, df.fatal) == ("double fault", True)
    assert gpf.headline.startswith("Oops: general protection fault, probably for non-canonical")
    assert "[#1]" not in gpf.headline
    assert gpf.chain == ["nvme_rdma_delete_ctrl", "nvme_rdma_teardown_io_queues", "nvme_rdma_free_queue"]
    t = kernel_trouble("h2", GPF_AND_DOUBLE)
    assert t is not None and t.main == gpf and "1 more report(s)" in t.describe()


def test_a_module_warning_names_its_module_and_function() -> None:
    text = (
        "[   10.0] WARNING: CPU: 0 PID: 7 at drivers/infiniband/sw/rxe/rxe_comp.c:772 "
        "rxe_completer+0x9a/0xc80 [rdma_rxe]\n"
    )
    (r,) = scan_console(text)
    assert r.headline == "WARNING at drivers/infiniband/sw/rxe/rxe_comp.c:772 in rxe_completer [rdma_rxe]"


def test_no_false_positive_from_userspace_or_a_soft_lockup() -> None:
    text = (
        "[   90.1] nodeos-lab-init.sh[334]: BUG: this is a script talking, not the kernel\n"
        "[   90.2] demo[9]: Kernel panic - not syncing is a string in a log line\n"
        "[   90.3] systemd[1]: kernel-panic.service: nothing to see\n"
    )
    assert scan_console(text) == []
    lockup = "[  300.0] watchdog: BUG: soft lockup - CPU#0 stuck for 64s! [kworker/0:1:12]\n"
    (r,) = scan_console(lockup)
    assert (r.kind, r.fatal) == ("BUG", False)  # a starved emulated CPU, not a dead kernel
