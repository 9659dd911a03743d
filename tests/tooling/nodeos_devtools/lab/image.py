"""The appliance image build: Debian 13 (trixie) base + the nodeos layer.

Two cached layers, each keyed by a hash of its inputs:

- base (slow, ~1-3 min): `mmdebstrap --variant=minbase` of trixie with the kernel, systemd and
  every Debian package nodeos and the lab need, as a directory plus the kernel and initramfs.
  Its key covers the package list, suite, mirror and the base customisation below.
- image (fast, seconds): the base hard-linked into a staging tree, the nodeos package, its
  console scripts and systemd units added, then an ext4 file system made from it with
  `mke2fs -d` (no loop device, no mount). Its key covers the base key and every file of the
  nodeos package and the unit, so a code change refreshes only this layer.

The raw UEFI disk image (GPT, systemd-boot, ESP + root) is assembled from the image layer on
demand, again without loop devices (sgdisk, mkfs.vfat + mtools, dd).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import nodeos
from nodeos.errors import EnvironmentProblem, OperationFailed
from nodeos_devtools.lab import image_spdk
from nodeos_devtools.lab.image_files import product_files
from nodeos_devtools.lab.image_recipe import BASE_RECIPE, DISABLED_UNITS, MASKED_UNITS, PACKAGES, TLSHD_CONF
from nodeos_devtools.lab.image_ssh import HOSTKEY_UNIT, install_sshd
from nodeos_devtools.lab.image_update import gate_unit_file
from nodeos_devtools.lab.image_update import install as install_updater

SUITE = "trixie"
MIRROR = os.environ.get("NODEOS_DEBIAN_MIRROR", "http://deb.debian.org/debian")

# A small initramfs: only what finds the root file system on the disks the image boots from
# (virtio in the lab, NVMe/SATA/SAS/USB on bare metal), plus virtio_net so a lab VM's eth0
# exists before systemd starts (under a loaded TCG host udev can take minutes to get to it).
# MODULES=most made it 40 MB, which costs seconds of decompression per boot under TCG.
INITRAMFS_MODULES: tuple[str, ...] = (
    "virtio_pci", "virtio_blk", "virtio_scsi", "nvme", "ahci", "sd_mod", "mpt3sas", "megaraid_sas",
    "usb_storage", "uas", "xhci_pci", "ehci_pci", "ext4", "crc32c_generic", "virtio_net",
)  # fmt: skip
IMAGE_RECIPE = 4

ROOT_LABEL = "nodeos-root"
ROOT_SIZE_MIB = 3072
ESP_SIZE_MIB = 256
# Fixed partition GUID of the raw image's root (slot A), so the boot entry can name it.
ROOT_PARTUUID = "6e6f6465-6f73-4000-8000-726f6f746673"  # = nodeos.update.layout.SLOT_PARTUUIDS["a"]

GUEST_DIR = Path(__file__).resolve().parent / "guest"
PROJECT_DIR = Path(nodeos.__file__).resolve().parent.parent
SCRIPTS = {
    "nodeos": "nodeos.cli.main:main",
    "nodeosd": "nodeos.daemon.main:main",
    "nodeos-fence": "nodeos.node.stopfence:main",  # the unit's ExecStopPost
    "nodeos-boot-backend": "nodeos.update.backend:main",  # RAUC's boot-loader backend (docs/image.md)
    "nodeos-health-gate": "nodeos.update.gate:main",  # systemd/nodeos-health-gate.service
}

Progress = Callable[[str], None]


def default_progress(msg: str) -> None:
    print(f"image: {msg}", file=sys.stderr, flush=True)


def cache_root() -> Path:
    """Where builds are kept between runs: NODEOS_CACHE, else /var/cache/nodeos as root."""
    env = os.environ.get("NODEOS_CACHE")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/cache/nodeos")
    return Path.home() / ".cache" / "nodeos"


@dataclass(frozen=True)
class Image:
    """A built lab image: what QEMU boots directly."""

    dir: Path
    key: str

    @property
    def kernel(self) -> Path:
        return self.dir / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.dir / "initrd.img"

    @property
    def rootfs(self) -> Path:
        return self.dir / "rootfs.ext4"

    @property
    def raw(self) -> Path:
        return self.dir / "disk.raw"

    @property
    def has_daemon(self) -> bool:
        """Whether the nodeos layer in this image carries a `nodeosd` entry module."""
        return (self.dir / "has-daemon").exists()


def _hash_update_file(h: hashlib._Hash, path: Path, rel: str) -> None:
    h.update(rel.encode() + b"\0")
    h.update(path.read_bytes())
    h.update(b"\0")


def base_key() -> str:
    h = hashlib.sha256()
    h.update(
        json.dumps(
            [BASE_RECIPE, SUITE, MIRROR, sorted(PACKAGES), sorted(MASKED_UNITS), INITRAMFS_MODULES]
        ).encode()
    )
    return h.hexdigest()[:16]


def unit_file() -> Path | None:
    p = PROJECT_DIR / "systemd" / "nodeosd.service"
    return p if p.is_file() else None


# Units of systemd/ besides nodeosd's, installed and enabled in every image: first-boot
# provisioning (docs/provisioning.md) and the node's own SSH host keys.
EXTRA_UNITS = ("nodeos-provision.service", "nodeos-provision-cluster.service", HOSTKEY_UNIT)


def extra_unit_files() -> list[Path]:
    return [p for p in (PROJECT_DIR / "systemd" / n for n in EXTRA_UNITS) if p.is_file()]


def image_key(bkey: str | None = None) -> str:
    h = hashlib.sha256()
    h.update(f"{IMAGE_RECIPE}:{bkey or base_key()}\0".encode())
    for path, rel in product_files():
        _hash_update_file(h, path, rel)
    unit = unit_file()
    if unit is not None:
        _hash_update_file(h, unit, "systemd/nodeosd.service")
    for extra in [*extra_unit_files(), gate_unit_file(PROJECT_DIR)]:
        _hash_update_file(h, extra, f"systemd/{extra.name}")
    from nodeos_devtools.lab.bundle import keyring_source  # the certificates update bundles are checked with

    _hash_update_file(h, keyring_source(), "keyring")
    h.update(image_spdk.key_part(image_spdk.spdk_build()))
    return h.hexdigest()[:16]


def run_step(argv: list[str], progress: Progress, *, quiet: bool = False) -> None:
    """Run a build step; its output goes to our stderr so long steps show their progress."""
    try:
        proc = subprocess.run(
            argv,
            stdout=subprocess.PIPE if quiet else sys.stderr,
            stderr=subprocess.STDOUT if quiet else sys.stderr,
            check=False,
        )
    except FileNotFoundError as e:
        raise EnvironmentProblem(f"{argv[0]} is not installed (run images/bootstrap.sh)") from e
    if proc.returncode != 0:
        out = proc.stdout.decode(errors="replace")[-2000:] if quiet and proc.stdout else ""
        raise OperationFailed(f"image build step failed ({proc.returncode}): {' '.join(argv)}\n{out}")


def need_root() -> None:
    if os.geteuid() != 0:
        raise EnvironmentProblem("building the image needs root (mmdebstrap root mode, device nodes)")


def build_base(progress: Progress = default_progress) -> Path:
    """The cached base layer directory (rootfs/, vmlinuz, initrd.img); built when missing."""
    key = base_key()
    root = cache_root()
    done = root / f"base-{key}"
    if (done / "ok").exists():
        return done
    need_root()
    if shutil.which("mmdebstrap") is None:
        raise EnvironmentProblem("mmdebstrap is not installed (run images/bootstrap.sh)")
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f"base-{key}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    rootfs = tmp / "rootfs"
    t0 = time.monotonic()
    progress(f"building the Debian {SUITE} base layer {key} with mmdebstrap (1-3 minutes)")
    run_step(
        [
            "mmdebstrap",
            "--mode=root",
            "--variant=minbase",
            "--components=main",
            "--include=" + ",".join(PACKAGES),
            # Documentation and other locales are dead weight in an appliance.
            "--dpkgopt=path-exclude=/usr/share/man/*",
            "--dpkgopt=path-exclude=/usr/share/doc/*",
            "--dpkgopt=path-include=/usr/share/doc/*/copyright",
            "--dpkgopt=path-exclude=/usr/share/locale/*",
            "--dpkgopt=path-exclude=/usr/share/info/*",
            '--setup-hook=mkdir -p "$1/etc/initramfs-tools/conf.d" "$1/usr/share/initramfs-tools/modules.d"',
            '--setup-hook=echo MODULES=list > "$1/etc/initramfs-tools/conf.d/nodeos.conf"',
            # Before mdadm's postinst: it keeps an existing mdadm.conf. Arrays are assembled by
            # nodeos from the members the control plane names, never auto-assembled by udev or
            # the initramfs from whatever superblocks appear (remote legs, replica LVs).
            '--setup-hook=mkdir -p "$1/etc/mdadm" && printf "%s\\n" "AUTO -all" "HOMEHOST <ignore>" '
            '> "$1/etc/mdadm/mdadm.conf"',
            "--setup-hook=printf '%s\\n' "
            + " ".join(INITRAMFS_MODULES)
            + ' > "$1/usr/share/initramfs-tools/modules.d/nodeos"',
            SUITE,
            str(rootfs),
            MIRROR,
        ],
        progress,
    )
    progress(f"base packages installed in {time.monotonic() - t0:.0f} s; customising")
    _customise_base(rootfs)
    boot = rootfs / "boot"
    kernels = sorted(boot.glob("vmlinuz-*"))
    initrds = sorted(boot.glob("initrd.img-*"))
    if not kernels or not initrds:
        raise OperationFailed(f"no kernel or initramfs in {boot} after the base build")
    shutil.copy2(kernels[-1], tmp / "vmlinuz")
    shutil.copy2(initrds[-1], tmp / "initrd.img")
    (tmp / "kernel-version").write_text(kernels[-1].name.removeprefix("vmlinuz-") + "\n")
    (tmp / "ok").write_text(f"{time.monotonic() - t0:.1f}\n")
    shutil.rmtree(done, ignore_errors=True)
    tmp.rename(done)
    progress(f"base layer ready in {time.monotonic() - t0:.0f} s: {done}")
    return done


def _symlink(target: str, link: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target)


def _customise_base(rootfs: Path) -> None:
    etc = rootfs / "etc"
    (etc / "hostname").write_text("nodeos\n")
    (etc / "hosts").write_text("127.0.0.1 localhost\n::1 localhost\n")
    (etc / "fstab").write_text(f"LABEL={ROOT_LABEL} / ext4 defaults,errors=remount-ro 0 1\n")
    # Identity is per machine: generated at first boot (or given by the lab), never baked in.
    (etc / "machine-id").write_text("")
    for name in ("hostnqn", "hostid"):
        p = etc / "nvme" / name
        if p.exists():
            p.unlink()
    for unit in MASKED_UNITS:
        _symlink("/dev/null", etc / "systemd" / "system" / unit)
    # The links point into the image (/usr/lib/...), so they dangle here: test is_symlink, not
    # exists (a glob for the name does the latter and finds none).
    for wants in (etc / "systemd" / "system").glob("*.wants"):
        for unit in DISABLED_UNITS:
            if (wants / unit).is_symlink():
                (wants / unit).unlink()
    # tlshd reads NVMe/TCP PSKs from the kernel's .nvme keyring (where nvmet's hosts' keys and
    # `nvme connect --tls` put them); without the link the handshake finds no key and fails.
    (etc / "tlshd.conf").write_text(TLSHD_CONF)
    # ... and links it when it starts: the keyring must exist by then. nvme_keyring makes it,
    # and would otherwise load only with nvmet-tcp at the first export, after tlshd (the lab:
    # "failed to search 'psk' key" until tlshd was restarted).
    (etc / "modules-load.d").mkdir(parents=True, exist_ok=True)
    (etc / "modules-load.d" / "nodeos-tls.conf").write_text("nvme_keyring\n")
    # No apt lists in the image: it is rebuilt, not upgraded in place.
    lists = rootfs / "var" / "lib" / "apt" / "lists"
    for p in lists.glob("*"):
        if p.is_file():
            p.unlink()


def _write_script(path: Path, module_attr: str) -> None:
    module, attr = module_attr.split(":")
    path.write_text(f"#!/usr/bin/python3\nimport sys\nfrom {module} import {attr}\nsys.exit({attr}())\n")
    path.chmod(0o755)


def _add_nodeos_layer(rootfs: Path) -> bool:
    """Copy the nodeos package, scripts and units in; returns whether nodeosd's module exists."""
    site = rootfs / "usr" / "lib" / "python3" / "dist-packages"
    dst = site / "nodeos"
    if dst.exists():
        shutil.rmtree(dst)
    for path, rel in product_files():
        out = site / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, out)
    for name, target in SCRIPTS.items():
        p = rootfs / "usr" / "bin" / name
        if p.exists():
            p.unlink()
        _write_script(p, target)
    sysd = rootfs / "etc" / "systemd" / "system"
    wants = sysd / "multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    units = [p for p in GUEST_DIR.glob("*.service")]
    unit = unit_file()
    if unit is not None:
        units.append(unit)
    units += extra_unit_files()
    for u in units:
        shutil.copyfile(u, sysd / u.name)
        _symlink(f"/etc/systemd/system/{u.name}", wants / u.name)
    libexec = rootfs / "usr" / "lib" / "nodeos"
    libexec.mkdir(parents=True, exist_ok=True)
    for s in GUEST_DIR.glob("*.sh"):
        shutil.copyfile(s, libexec / s.name)
        (libexec / s.name).chmod(0o755)
    (rootfs / "etc" / "nodeos").mkdir(exist_ok=True)
    from nodeos_devtools.lab.bundle import image_arch, install_keyring

    install_keyring(rootfs)
    install_sshd(rootfs)
    install_updater(rootfs, PROJECT_DIR, image_arch())  # RAUC's system.conf, /efi, the health gate
    # Mark /etc and /var as up to date with /usr, so first boot skips ldconfig, the journal
    # catalog rebuild and friends (ConditionNeedsUpdate): seconds under TCG.
    usr_mtime = (rootfs / "usr").stat().st_mtime
    for d in ("etc", "var"):
        p = rootfs / d / ".updated"
        p.write_text("# written by the nodeos image build\n")
        os.utime(p, (usr_mtime + 1, usr_mtime + 1))
    return (dst / "daemon" / "main.py").exists()


def compile_bytecode(rootfs: Path, progress: Progress) -> None:
    """Bytecode for the nodeos package, made by the image's own Python (3.13, not the host's).

    The daemon runs with ProtectSystem=full, so Python cannot write bytecode at run time: without
    this every start compiled the package from source (tens of seconds under TCG). checked-hash
    .pyc files stay valid whatever the file times in the image are, and a source edited inside a
    VM is still noticed. Debian's own Python packages come with bytecode (py3compile)."""
    progress("compiling the nodeos package to bytecode (the image's python3)")
    run_step(
        [
            "chroot", str(rootfs), "/usr/bin/python3", "-B", "-m", "compileall", "-q",
            "--invalidation-mode", "checked-hash", "/usr/lib/python3/dist-packages/nodeos",
        ],
        progress,
        quiet=True,
    )  # fmt: skip


def build_image(progress: Progress = default_progress, *, raw: bool = False) -> Image:
    """The lab image for the current work tree: built or refreshed when stale, else reused."""
    bkey = base_key()
    key = image_key(bkey)
    root = cache_root()
    out = root / f"image-{key}"
    img = Image(out, key)
    if not (out / "ok").exists() or (raw and not img.raw.exists()):
        with _build_lock(root, progress):
            img = _build_image_locked(progress, raw=raw, bkey=bkey, key=key)
    progress(f"data plane: {image_spdk.describe(image_spdk.read_record(img.dir))}")
    os.utime(img.dir)  # marks it in use for _prune
    os.utime(cache_root() / f"base-{bkey}")
    return img


@contextmanager
def _build_lock(root: Path, progress: Progress) -> Iterator[None]:
    """One build at a time per cache (several labs or engineers may ask at once)."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".build.lock", "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress("another image build is running: waiting for it")
            fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _build_image_locked(progress: Progress, *, raw: bool, bkey: str, key: str) -> Image:
    root = cache_root()
    out = root / f"image-{key}"
    img = Image(out, key)
    if not (out / "ok").exists():
        base = build_base(progress)
        need_root()
        if shutil.which("mke2fs") is None:
            raise EnvironmentProblem("mke2fs is not installed (run images/bootstrap.sh)")
        t0 = time.monotonic()
        progress(f"assembling image {key} (base {bkey} + nodeos layer)")
        tmp = root / f"image-{key}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        staging = tmp / "staging"
        # Hard links: the base is not copied, and the layer only adds or replaces files.
        run_step(["cp", "-al", str(base / "rootfs"), str(staging)], progress)
        has_daemon = _add_nodeos_layer(staging)
        rec = image_spdk.install(staging, image_spdk.spdk_build(), progress)
        (tmp / image_spdk.RECORD).write_text(json.dumps(rec) + "\n")
        compile_bytecode(staging, progress)
        progress("making the ext4 root file system (mke2fs -d)")
        run_step(
            [
                "mke2fs", "-q", "-F", "-t", "ext4", "-L", ROOT_LABEL, "-d", str(staging),
                str(tmp / "rootfs.ext4"), f"{ROOT_SIZE_MIB}M",
            ],
            progress,
        )  # fmt: skip
        shutil.rmtree(staging)
        shutil.copy2(base / "vmlinuz", tmp / "vmlinuz")
        shutil.copy2(base / "initrd.img", tmp / "initrd.img")
        if has_daemon:
            (tmp / "has-daemon").write_text("")
        (tmp / "ok").write_text(f"{time.monotonic() - t0:.1f}\n")
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
        progress(f"image ready in {time.monotonic() - t0:.0f} s: {out}")
        _prune(root, keep={f"base-{bkey}", f"image-{key}"})
    if raw and not img.raw.exists():
        from nodeos_devtools.lab.rawdisk import build_raw

        build_raw(img, progress)
    return img


def _prune(root: Path, keep: Iterable[str]) -> None:
    """Drop image layers unused for hours, keeping the three most recent (a running lab may
    still boot from one: `up` touches the image it uses), and bases unused for a day."""
    keep = set(keep)
    now = time.time()
    for pattern, n_keep, max_age in (("image-*", 3, 4 * 3600), ("base-*", 1, 24 * 3600)):
        old = sorted(
            (
                p
                for p in root.glob(pattern)
                if p.is_dir() and p.name not in keep and not p.name.endswith(".tmp")
            ),
            key=lambda p: p.stat().st_mtime,
        )
        for p in old[:-n_keep] if n_keep else old:
            if now - p.stat().st_mtime > max_age:
                shutil.rmtree(p, ignore_errors=True)
