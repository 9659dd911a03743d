"""SPDK in the image: with `NODEOS_SPDK_DIR` (an operator's local SPDK build) the nodeos layer
carries its NVMe-oF target, the shared libraries it needs that Debian 13 lacks, and its unit;
without it the image is exactly the kernel-data-plane image (docs/image.md, "SPDK in the image").
The target is nodeos-tgt (native/nodeos-tgt: SPDK's nvmf_tgt with its RPC socket answered every
100 us, not every 4 ms), built against the build's tree; SPDK's own nvmf_tgt when the directory
is an install without its tree (said as the image is built).

Layout in the image:
  /usr/lib/nodeos/spdk/bin/nodeos-tgt the target (or bin/nvmf_tgt), RPATH $ORIGIN/../lib and
                                      /usr/lib/nodeos/spdk/lib (patchelf)
  /usr/lib/nodeos/spdk/lib/           sonames the image's Debian lacks (from the build host)
  /usr/lib/nodeos/spdk/BUILD.json     version, source, identity, CPU target, bundled libraries
  /usr/bin/nvmf_tgt                   -> the binary (what systemd/nodeos-spdk.service runs and
                                      nodeosd's `auto` looks for: nodeos/dataplane/select.py)
  /usr/bin/nodeos-spdk-setup          the unit's hugepages / init / wanted steps
  /usr/lib/ssl/openssl.cnf            an empty OpenSSL configuration, where none is: nvmf_tgt
                                      will not start without one

Nothing of SPDK is in the project: the build copies from the operator's directory only.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import nodeos
from nodeos.errors import EnvironmentProblem, OperationFailed
from nodeos_devtools import native_tgt

ENV = "NODEOS_SPDK_DIR"
IMAGE_DIR = "usr/lib/nodeos/spdk"
UNIT = "nodeos-spdk.service"
UNIT_FILE = Path(nodeos.__file__).resolve().parent.parent / "systemd" / UNIT
RECIPE = 4  # bumped when what is installed below changes meaning
RPATH = f"$ORIGIN/../lib:/{IMAGE_DIR}/lib"
RECORD = "dataplane.json"
OPENSSL_CNF = "usr/lib/ssl/openssl.cnf"  # Debian's OPENSSLDIR (the `openssl` package's link to /etc/ssl)
OPENSSL_CNF_TEXT = "# nodeos: OpenSSL's defaults (no openssl package here; nvmf_tgt needs a file)\n"
# glibc's own: always in the image, never bundled (a newer glibc runs an older build's binary).
GLIBC = frozenset(
    {"linux-vdso.so.1", "libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1",
     "libresolv.so.2", "ld-linux-x86-64.so.2", "libutil.so.1", "libanl.so.1"}
)  # fmt: skip
LIB_DIRS = ("usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu", "usr/lib", "lib")
_LDD = re.compile(r"^\s*(\S+)\s+=>\s+(not found|\S+)")
_VERSION = re.compile(rb"SPDK (v\d+\.\d+(?:\.\d+)?(?:-[0-9A-Za-z.]+)?)")

Progress = Callable[[str], None]


@dataclass(frozen=True)
class SpdkBuild:
    """An operator's SPDK build, as the image build sees it."""

    source: Path  # NODEOS_SPDK_DIR
    target: Path  # nodeos-tgt built against its tree, else its nvmf_tgt (symlinks resolved)
    version: str  # from the binary's version string (what spdk_get_version answers)
    arch: str  # the CPU target it was configured for (mk/config.mk CONFIG_ARCH), "" if unknown
    libs: tuple[tuple[str, Path], ...]  # every shared library it loads: (soname, build-host path)

    def identity(self) -> str:
        """A hash of everything the image takes from the build (its cache key part)."""
        h = hashlib.sha256(f"{RECIPE}\0{self.version}\0".encode())
        h.update(self.target.read_bytes())
        for soname, path in self.libs:
            h.update(soname.encode() + b"\0" + path.read_bytes())
        return h.hexdigest()[:16]

    def describe(self) -> str:
        return f"spdk ({self.version} from {self.source})"


def parse_ldd(text: str) -> list[tuple[str, Path]]:
    """`ldd` output -> (soname, path) of each library resolved by name; a missing one is an error."""
    out: list[tuple[str, Path]] = []
    for line in text.splitlines():
        m = _LDD.match(line)
        if not m:
            continue
        if m.group(2) == "not found":
            raise EnvironmentProblem(f"nvmf_tgt needs {m.group(1)}, which this build host lacks")
        out.append((m.group(1), Path(m.group(2))))
    return out


def version_of(binary: bytes) -> str:
    m = _VERSION.search(binary)
    return m.group(1).decode() if m else "unknown"


def arch_of(target: Path) -> str:
    """CONFIG_ARCH of the SPDK tree the binary was built in (build/bin/nvmf_tgt -> mk/config.mk)."""
    cfg = target.parents[2] / "mk" / "config.mk" if len(target.parents) > 2 else None
    if cfg is None or not cfg.is_file():
        return ""
    m = re.search(r"^CONFIG_ARCH\??=(\S+)", cfg.read_text(), re.MULTILINE)
    return m.group(1) if m else ""


def spdk_build(env: Mapping[str, str] = os.environ) -> SpdkBuild | None:
    """The build NODEOS_SPDK_DIR names (None when unset); a wrong directory is said at once."""
    d = env.get(ENV, "").strip()
    if not d:
        return None
    src = Path(d)
    candidates = [src / "bin" / "nvmf_tgt", src / "build" / "bin" / "nvmf_tgt"]
    found = next((p for p in candidates if p.is_file()), None)
    if found is None:
        raise EnvironmentProblem(
            f"{ENV}={d}: no bin/nvmf_tgt there (an SPDK build directory with bin/, lib/: docs/image.md)"
        )
    nvmf_tgt = found.resolve()
    tree = native_tgt.spdk_tree(nvmf_tgt)
    target = native_tgt.build(tree) if tree is not None else nvmf_tgt
    proc = subprocess.run(["ldd", str(target)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise EnvironmentProblem(f"ldd {target} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    libs = tuple(parse_ldd(proc.stdout))
    return SpdkBuild(src, target, version_of(target.read_bytes()), arch_of(nvmf_tgt), libs)


def key_part(build: SpdkBuild | None, unit: Path = UNIT_FILE) -> bytes:
    """What the image key adds for SPDK: nothing without it (the kernel image's key is unchanged)."""
    if build is None:
        return b""
    return f"spdk:{build.identity()}\0".encode() + unit.read_bytes()


def rootfs_has(rootfs: Path, soname: str) -> bool:
    return any((rootfs / d / soname).exists() for d in LIB_DIRS)


def needed_of(path: Path) -> list[str]:
    """DT_NEEDED of an ELF file (`objdump -p`)."""
    out = _run(["objdump", "-p", str(path)]).stdout
    return [ln.split()[1] for ln in out.splitlines() if ln.strip().startswith("NEEDED")]


def to_bundle(
    target: Path,
    libs: Iterable[tuple[str, Path]],
    has: Callable[[str], bool],
    needed: Callable[[Path], list[str]] | None = None,
) -> list[tuple[str, Path]]:
    """The libraries to carry beside nvmf_tgt: what it needs that the image lacks, and what those
    need in turn (glibc's never). A library the image has brings its own dependencies, so the
    build host's closure beyond it (ICU 72 behind its libxml2, say) stays behind."""
    needed = needed or needed_of
    where = dict(libs)
    out: list[tuple[str, Path]] = []
    todo = list(needed(target))
    seen: set[str] = set()
    while todo:
        soname = todo.pop(0)
        if soname in seen or soname in GLIBC or has(soname) or soname not in where:
            continue
        seen.add(soname)
        out.append((soname, where[soname]))
        todo.extend(needed(where[soname]))
    return out


def record(build: SpdkBuild | None, bundled: Iterable[str] = ()) -> dict[str, object]:
    """The build metadata of the data plane an image carries (image dir, bundles, the image)."""
    if build is None:
        return {"dataplane": "kernel"}
    return {
        "dataplane": "spdk",
        "spdk": {
            "target": build.target.name,
            "version": build.version,
            "source": str(build.source),
            "identity": build.identity(),
            "cpu_target": build.arch or "unknown",
            "bundled_libs": sorted(bundled),
        },
    }


def describe(rec: Mapping[str, object]) -> str:
    """`data plane: ...` as the build prints it."""
    spdk = rec.get("spdk")
    if rec.get("dataplane") == "spdk" and isinstance(spdk, dict):
        return f"spdk ({spdk.get('version')} from {spdk.get('source')})"
    return "kernel"


def read_record(image_dir: Path) -> dict[str, object]:
    p = image_dir / RECORD
    return dict(json.loads(p.read_text())) if p.exists() else {"dataplane": "kernel"}


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    except FileNotFoundError as e:
        raise EnvironmentProblem(f"{argv[0]} is not installed (apt-get install {argv[0]})") from e
    if proc.returncode != 0:
        raise OperationFailed(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()[-1000:]}")
    return proc


def install(
    rootfs: Path, build: SpdkBuild | None, progress: Progress, unit: Path = UNIT_FILE
) -> dict[str, object]:
    """Add SPDK to the staging tree (nothing without a build); returns the record to keep."""
    if build is None:
        progress("data plane: kernel (no NODEOS_SPDK_DIR)")
        return record(None)
    if build.arch in ("", "native"):
        progress(
            f"WARNING: {build.target} was built for CPU target {build.arch or 'unknown'}: it may die "
            "with SIGILL on other CPUs (configure SPDK with --target-arch=x86-64-v2: docs/image.md)"
        )
    dst = rootfs / IMAGE_DIR
    shutil.rmtree(dst, ignore_errors=True)
    (dst / "bin").mkdir(parents=True)
    (dst / "lib").mkdir()
    binary = dst / "bin" / build.target.name
    shutil.copyfile(build.target, binary)
    binary.chmod(0o755)
    bundled = to_bundle(build.target, build.libs, lambda s: rootfs_has(rootfs, s), needed_of)
    for soname, path in bundled:
        shutil.copyfile(path, dst / "lib" / soname)
    # DT_RPATH, not RUNPATH: it also applies to the bundled libraries' own dependencies. The
    # absolute entry too: $ORIGIN comes from /proc/self/exe, absent in a chroot without /proc
    # (the check below), and started as /usr/bin/nvmf_tgt (a link) it would name /usr/bin.
    _run(["patchelf", "--force-rpath", "--set-rpath", RPATH, str(binary)])
    # SPDK's env init loads OpenSSL's configuration and refuses to start without one ("Failed to
    # initialize OpenSSL": measured in a Debian 13 root); the image has no `openssl` package.
    cnf = rootfs / OPENSSL_CNF
    if not (cnf.exists() or cnf.is_symlink()):
        cnf.parent.mkdir(parents=True, exist_ok=True)
        cnf.write_text(OPENSSL_CNF_TEXT)
    link = rootfs / "usr" / "bin" / "nvmf_tgt"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(f"/{IMAGE_DIR}/bin/{build.target.name}")
    setup = rootfs / "usr" / "bin" / "nodeos-spdk-setup"
    main = "from nodeos.dataplane.spdk.target_setup import main"
    setup.write_text(f"#!/usr/bin/python3\nimport sys\n{main}\nsys.exit(main())\n")
    setup.chmod(0o755)
    sysd = rootfs / "etc" / "systemd" / "system"
    shutil.copyfile(unit, sysd / UNIT)
    wants = sysd / "multi-user.target.wants" / UNIT
    if wants.is_symlink() or wants.exists():
        wants.unlink()
    wants.symlink_to(f"/etc/systemd/system/{UNIT}")
    rec = record(build, [s for s, _ in bundled])
    (dst / "BUILD.json").write_text(json.dumps(rec, indent=2) + "\n")
    # Every library resolves inside the image (Debian 13's own plus the bundled): -h exits 0.
    _run(["chroot", str(rootfs), "/usr/bin/nvmf_tgt", "-h"])
    if build.target.name == "nvmf_tgt":
        progress(
            f"WARNING: {build.source} is not an SPDK tree: the image carries SPDK's own nvmf_tgt, whose RPC "
            "socket is answered every 4 ms (snapshots hold writes longer; nodeos-tgt: docs/spdk.md)"
        )
    carried = ", ".join(s for s, _ in bundled) or "none"
    progress(
        f"data plane: {build.describe()}: {build.target.name} in /{IMAGE_DIR} (CPU target "
        f"{build.arch or 'unknown'}; bundled from the build host: {carried})"
    )
    return rec
