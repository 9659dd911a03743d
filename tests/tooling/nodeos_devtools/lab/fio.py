"""fio on a lab VM, run to its end: its JSON report read from a file, never from qemu-ga's pipe.

Seen twice in CI, on a host VM under TCG, after or during a clean verify: fio killed by SIGPIPE
(exit 141, no report) and, before the jobs ran as threads, a forked job killed by SIGPIPE and
fio's main process aborting in its clean-up (double free, exit 134). Neither is the product: a
volume's fault shows as an I/O or verify error in the report (`error` != 0, exit 1), never as
fio dying of a signal. So fio runs detached from the guest agent's pipes (stdin /dev/null, its
output to files), and a run that died of SIGPIPE or SIGABRT without a report is run once more,
said on stdout; a second such death fails the caller, with fio's own log.
"""

from __future__ import annotations

import json
from typing import Any

from nodeos.errors import OperationFailed
from nodeos_devtools.lab.lab import Lab

# fio dying of SIGPIPE or SIGABRT (128 + signal): its own clean-up, not the device.
FIO_DIED = {128 + 13, 128 + 6}


def report_job(text: str) -> dict[str, Any]:
    """The first job of fio's JSON report, past any notice fio wrote ahead of it (a SIGINT's
    "fio: terminating on signal 2", a verify warning). ValueError when there is no report."""
    try:
        return dict(json.loads(text[text.index("{") :])["jobs"][0])
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise ValueError(f"not a fio report: {text[-300:]!r}") from e


def run(lab: Lab, vm: str, tag: str, args: str, *, timeout: float = 1200.0) -> dict[str, Any]:
    """Run `fio --name=TAG ARGS` on vm to its end and return its report's first job.

    ARGS are the job's own options; the runner adds the threads, the JSON report and its file.
    """
    base = f"/root/fio-{tag}"
    cmd = (
        f"fio --name={tag} {args} --thread --output-format=json --output={base}.json "
        f"</dev/null >{base}.log 2>&1"
    )
    for attempt in (1, 2):
        r = lab.sh(vm, f"rm -f {base}.json {base}.log; rc=0; {cmd} || rc=$?; echo $rc", timeout=timeout)
        rc = int(r.stdout.split()[-1])
        report = lab.sh(vm, f"cat {base}.json 2>/dev/null || true").stdout
        log = lab.sh(vm, f"tail -c 2000 {base}.log 2>/dev/null || true").stdout
        try:
            job = report_job(report)
        except ValueError:
            if rc in FIO_DIED and attempt == 1:
                print(f"\nfio {tag} on {vm}: died of signal {rc - 128}, no report; again. {log[-300:]}")
                continue
            raise OperationFailed(f"{vm}: fio {tag} exited {rc} and left no report; its log: {log}") from None
        if rc != 0:
            job["fio_exit"], job["fio_log"] = rc, log  # the caller's assertions on `error` decide
        return job
    raise AssertionError("unreachable")
