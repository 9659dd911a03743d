"""`nodeos-lab up --boot disk` and `--provision VM=FILE` (docs/lab.md "Booting the real disk").

With `--boot disk` each storage VM boots the raw GPT disk image (`disk.raw`: ESP with
systemd-boot, root slots A and B, state partition) under OVMF, from a copy of its own (a qcow2
overlay over the image's file, kept across `kill` + `start`, with its own UEFI variable store), so
slots, reboots and the state partition persist as on a server. Its kernel command line is the
loader entry's; the lab's own words (nodeos.lab=1, the VM's role, address, host NQN, the units it
masks) are appended by systemd-boot from SMBIOS type 11 (`io.systemd.boot.kernel-cmdline-extra`),
as a BMC could.

Provisioning: a storage VM's configuration is the systemd credential `nodeos.provision`, handed
over by QEMU's fw_cfg (`opt/io.systemd.credentials/nodeos.provision`), the same path a bare-metal
node takes from its BMC. `--provision VM=FILE` gives that file (either boot mode); with
`--boot disk` a VM without one gets the lab's own identity as such a file (host name, eth0's
address, storage address, peer port).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from nodeos.errors import BadInput, EnvironmentProblem
from nodeos.provision.sources import CREDENTIAL
from nodeos_devtools.lab.qemu import OVMF_DIR, PEER_PORT, VmSpec, kernel_cmdline

BOOT_MODES = ("kernel", "disk")
DISK = "disk.qcow2"
VARS = "OVMF_VARS.fd"
PROVISION = "provision.toml"
CREDENTIALS = "credentials"  # other systemd credentials, one file each
_CREDENTIAL_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
OVMF_CODE = OVMF_DIR / "OVMF_CODE_4M.fd"
OVMF_VARS = OVMF_DIR / "OVMF_VARS_4M.fd"
# Words of the direct-kernel command line that the loader entry or the credential give instead.
_DROPPED = ("root=", "console=", "net.ifnames=", "systemd.mount-extra=", "nodeos.hostname=",
            "nodeos.address=", "nodeos.storage=", "nodeos.peer_port=")  # fmt: skip
# rauc install talks to its service over D-Bus: a disk-booted VM keeps it.
_KEPT_UNITS = ("dbus.service", "dbus.socket")


def check_boot(boot: str) -> str:
    if boot not in BOOT_MODES:
        raise BadInput(f"boot {boot!r} is not known", field="boot", allowed=", ".join(BOOT_MODES))
    return boot


def parse_provision(specs: list[str] | tuple[str, ...], storage: list[str]) -> dict[str, Path]:
    """`VM=FILE` options -> {vm: file} (storage VMs only, each once, FILE a readable file)."""
    allowed = f"VM=FILE with VM one of {', '.join(storage)} (once each) and FILE a readable file"
    out: dict[str, Path] = {}
    for spec in specs:
        vm, sep, file = spec.partition("=")
        p = Path(file)
        if not sep or vm not in storage or vm in out or not p.is_file():
            raise BadInput(f"provision {spec!r} is not valid", field="provision", allowed=allowed)
        try:
            p.read_bytes()
        except OSError:
            raise BadInput(f"provision {spec!r}: {file} is not readable", field="provision",
                           allowed=allowed) from None  # fmt: skip
        out[vm] = p
    return out


def lab_provision(vm: VmSpec) -> str:
    """The lab's identity of a storage VM as a provisioning file (docs/provisioning.md)."""
    return (
        "# written by nodeos-lab: this VM's identity in the lab\n"
        f'version = 1\nhostname = "{vm.name}"\nstorage_addresses = ["{vm.addr}"]\npeer_port = {PEER_PORT}\n\n'
        f'[[network.interfaces]]\nname = "eth0"\naddresses = ["{vm.ip}"]\n'
    )


def prepare(vm: VmSpec, vm_dir: Path, raw: Path, provision: Path | None) -> None:
    """The VM's own disk (an overlay over `raw`), UEFI variables and provisioning file."""
    if not OVMF_CODE.is_file():
        raise EnvironmentProblem(f"{OVMF_CODE} missing: install ovmf (images/bootstrap.sh)")
    vm_dir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(raw), "-F", "raw", str(vm_dir / DISK)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise EnvironmentProblem(f"qemu-img could not make {vm.name}'s disk: {proc.stderr.strip()}")
    shutil.copyfile(OVMF_VARS, vm_dir / VARS)
    write_provision(vm, vm_dir, provision)


def write_provision(vm: VmSpec, vm_dir: Path, provision: Path | None) -> None:
    (vm_dir / PROVISION).write_bytes(provision.read_bytes() if provision else lab_provision(vm).encode())


def cmdline_extra(vm: VmSpec, accel: str) -> str:
    """The lab's words appended to the loader entry's command line (SMBIOS type 11)."""
    words = []
    for w in kernel_cmdline(vm, accel).split():
        if w == "rw" or w.startswith(_DROPPED):
            continue
        if w.startswith("systemd.mask=") and w.removeprefix("systemd.mask=") in _KEPT_UNITS:
            continue
        words.append(w)
    return " ".join(words)


def credential_args(vm_dir: Path) -> list[str]:
    """The VM's provisioning file as the systemd credential, when it has one, and every other
    credential set for it (`Lab.set_credential`: a join token), read by QEMU at each start."""
    files = [(CREDENTIAL, vm_dir / PROVISION)]
    files += sorted((f.name, f) for f in (vm_dir / CREDENTIALS).glob("*") if f.is_file())
    out: list[str] = []
    for name, f in files:
        if f.is_file():
            out += ["-fw_cfg", f"name=opt/io.systemd.credentials/{name},file={f}"]
    return out


def write_credential(vm_dir: Path, name: str, data: bytes) -> None:
    """Hand a VM systemd credential `name` from its next start on (owner-only: it may be a secret)."""
    if not _CREDENTIAL_NAME.fullmatch(name):
        raise BadInput(f"credential name {name!r} is not valid", field="name", allowed="[A-Za-z0-9._-]{1,64}")
    if name == CREDENTIAL:
        f = vm_dir / PROVISION
    else:
        (vm_dir / CREDENTIALS).mkdir(mode=0o700, parents=True, exist_ok=True)
        f = vm_dir / CREDENTIALS / name
    tmp = f.with_name(f".{f.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    tmp.replace(f)


def boot_args(vm: VmSpec, vm_dir: Path, accel: str) -> list[str]:
    """QEMU's firmware, disk and SMBIOS arguments of a disk-booted VM (in place of -kernel ...)."""
    extra = cmdline_extra(vm, accel).replace(",", ",,")  # QEMU's option syntax doubles commas
    return [
        "-drive", f"if=pflash,format=raw,unit=0,readonly=on,file={OVMF_CODE}",
        "-drive", f"if=pflash,format=raw,unit=1,file={vm_dir / VARS}",
        "-drive", f"file={vm_dir / DISK},if=none,id=root,format=qcow2,cache=unsafe",
        "-device", "virtio-blk-pci,drive=root,bootindex=0",
        "-smbios", f"type=11,value=io.systemd.boot.kernel-cmdline-extra={extra}",
    ]  # fmt: skip
