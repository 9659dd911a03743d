"""Who holds a block device open: the answer an operator needs when `mdadm --stop` says
"Device or resource busy" and gives no name (the lab's delete retried for minutes with only
mdadm's "Perhaps a running process..."). Read from sysfs (kernel users: dm, md) and from
/proc/<pid>/fd (processes); both are plain reads, bounded by the number of open files."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable
from pathlib import Path

from nodeos.sysfs import read_attr

PROC = Path("/proc")
SYS_BLOCK = Path("/sys/block")
MAX_NAMED = 5  # enough to act on; the rest counted


def is_block_device(majmin: str) -> Callable[[os.stat_result], bool]:
    """A test for an open file's stat: the block device `majmin` ("9:127")."""
    major, minor = (int(x) for x in majmin.split(":"))

    def test(st: os.stat_result) -> bool:
        return stat.S_ISBLK(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (major, minor)

    return test


def processes_holding(
    is_it: Callable[[os.stat_result], bool], proc_dir: Path = PROC
) -> list[tuple[int, str]]:
    """(pid, command name) of every process with an open file for which `is_it` holds."""
    out: list[tuple[int, str]] = []
    for entry in proc_dir.iterdir() if proc_dir.is_dir() else ():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):  # gone, or not ours to read
            for fd in (entry / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if is_it(os.stat(fd)):
                        out.append((int(entry.name), read_attr(entry / "comm") or "?"))
                        break
    return sorted(out)


def holders_of(kname: str, sys_block: Path = SYS_BLOCK, proc_dir: Path = PROC) -> list[str]:
    """What holds block device `kname` open, each named: 'dm-3 (kernel)', 'dd (pid 1329)'."""
    names = (
        [f"{h} (kernel)" for h in sorted(os.listdir(p))]
        if (p := sys_block / kname / "holders").is_dir()
        else []
    )
    majmin = read_attr(sys_block / kname / "dev")
    if majmin:
        names += [f"{comm} (pid {pid})" for pid, comm in processes_holding(is_block_device(majmin), proc_dir)]
    if len(names) > MAX_NAMED:
        names = [*names[:MAX_NAMED], f"{len(names) - MAX_NAMED} more"]
    return names
