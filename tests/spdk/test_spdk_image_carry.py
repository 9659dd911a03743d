"""What the image takes from the real SPDK build (issue 27, NODEOS_SPDK_DIR): a portable binary,
its libraries laid out as the image carries them, and a target that starts from that layout,
also against Debian 13's own libraries when a base layer of the image is in the cache.

Skipped without NODEOS_SPDK_DIR (tests/spdk/conftest.py). The target runs niced, in interrupt
mode, without hugepages or a PCI scan, for a few seconds.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from nodeos_devtools.lab import image_spdk
from nodeos_devtools.lab.image import cache_root
from tests.spdk.conftest import need_root, spdk_dir, start_target, stop_target

pytestmark = pytest.mark.spdk


@pytest.fixture(scope="module")
def build() -> image_spdk.SpdkBuild:
    d = spdk_dir().parent  # .../bin -> the build directory NODEOS_SPDK_DIR names
    b = image_spdk.spdk_build({"NODEOS_SPDK_DIR": str(d)})
    assert b is not None
    return b


@pytest.fixture(scope="module")
def carried(build: image_spdk.SpdkBuild, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The image's /usr/lib/nodeos/spdk, made by the image build's own step over an empty root
    (so every library but glibc's is bundled); the chroot check is the image build's, not ours."""
    root = tmp_path_factory.mktemp("root")
    for d in ("usr/bin", "etc/systemd/system/multi-user.target.wants"):
        (root / d).mkdir(parents=True)
    real = image_spdk._run

    def run(argv: list[str]) -> object:
        return None if argv[0] == "chroot" else real(argv)

    mp = pytest.MonkeyPatch()
    mp.setattr(image_spdk, "_run", run)
    try:
        image_spdk.install(root, build, lambda _: None)
    finally:
        mp.undo()
    return root / image_spdk.IMAGE_DIR


def test_the_build_is_portable_and_names_its_version(build: image_spdk.SpdkBuild) -> None:
    assert build.version.startswith("v26.05"), build.version
    # -march=native here would die with SIGILL under the lab's -cpu Westmere and on older servers.
    assert build.arch not in ("", "native"), build.arch
    assert build.arch in ("x86-64-v2", "x86-64", "westmere", "corei7", "nehalem"), build.arch


def test_dpdk_is_linked_in_and_libaio_is_carried(build: image_spdk.SpdkBuild, carried: Path) -> None:
    sonames = {s for s, _ in build.libs}
    assert not any(s.startswith("librte_") for s in sonames), sonames  # DPDK 22.11 static
    # Debian 13 renamed libaio.so.1 (libaio1t64): the build host's one goes with the binary.
    assert (carried / "lib" / "libaio.so.1").is_file()


def test_the_image_carries_nodeos_tgt(build: image_spdk.SpdkBuild, carried: Path) -> None:
    """The build's tree is at hand: the target carried is nodeos-tgt, built against it."""
    assert build.target.name == "nodeos-tgt", build.target
    assert (carried / "bin" / "nodeos-tgt").is_file()
    assert json.loads((carried / "BUILD.json").read_text())["spdk"]["target"] == "nodeos-tgt"


def test_the_carried_target_resolves_its_libraries_through_its_rpath(
    build: image_spdk.SpdkBuild, carried: Path
) -> None:
    out = subprocess.run(
        ["ldd", str(carried / "bin" / build.target.name)], capture_output=True, text=True
    ).stdout
    for soname, path in image_spdk.parse_ldd(out):
        if soname not in image_spdk.GLIBC:
            assert path.resolve().parent == (carried / "lib").resolve(), (soname, path)


def test_the_carried_target_starts_and_answers(
    build: image_spdk.SpdkBuild, carried: Path, tmp_path: Path
) -> None:
    need_root()
    binary = carried / "bin" / build.target.name
    t = start_target(
        carried / "bin", tmp_path / "t", ("--interrupt-mode",), nice=19, discovery_svcid=None, binary=binary
    )
    try:
        assert t.dp.call(("spdk_get_version", {}))["version"].startswith("SPDK v26.05")
    finally:
        stop_target(t)


def debian13_base() -> Path:
    for base in sorted(cache_root().glob("base-*")):
        version = base / "rootfs" / "etc" / "debian_version"
        if (base / "ok").exists() and version.exists() and version.read_text().startswith(("13", "trixie")):
            return base / "rootfs"
    pytest.skip(f"no Debian 13 base layer in {cache_root()} (build one: nodeos-lab image)")
    raise AssertionError  # unreachable


@pytest.fixture(scope="module")
def on_debian13(build: image_spdk.SpdkBuild, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(Debian 13 root, carried dir): the image build's step over a root whose library directory
    is the base layer's, so only what Debian 13 lacks is bundled, as in the image."""
    base = debian13_base()
    root = tmp_path_factory.mktemp("root13")
    for d in ("usr/bin", "etc/systemd/system/multi-user.target.wants", "usr/lib"):
        (root / d).mkdir(parents=True)
    (root / "usr/lib/x86_64-linux-gnu").symlink_to(base / "usr/lib/x86_64-linux-gnu")
    real = image_spdk._run
    mp = pytest.MonkeyPatch()
    mp.setattr(image_spdk, "_run", lambda argv: None if argv[0] == "chroot" else real(argv))
    try:
        rec = image_spdk.install(root, build, lambda _: None)
    finally:
        mp.undo()
    spdk = rec["spdk"]
    assert isinstance(spdk, dict) and "libaio.so.1" in spdk["bundled_libs"]
    assert "libssl.so.3" not in spdk["bundled_libs"]  # Debian 13 has it: its own is used
    return base, root / image_spdk.IMAGE_DIR


def loader(base: Path, binary: Path, *args: str) -> list[str]:
    """Run `binary` with Debian 13's loader and libraries (its RPATH, the carried ones, first)."""
    libs = str(base / "usr/lib/x86_64-linux-gnu")
    return [str(base / "usr/lib64/ld-linux-x86-64.so.2"), "--library-path", libs, *args, str(binary)]


def test_with_debian13s_own_libraries_every_library_resolves(
    build: image_spdk.SpdkBuild, on_debian13: tuple[Path, Path]
) -> None:
    """Nothing may come from this (Debian 12) host."""
    base, carried = on_debian13
    proc = subprocess.run(
        loader(base, carried / "bin" / build.target.name, "--list"), capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    resolved = image_spdk.parse_ldd(proc.stdout)
    assert resolved
    for soname, path in resolved:
        real = path.resolve()
        assert real.is_relative_to(carried.resolve()) or real.is_relative_to(base.resolve()), (soname, path)


def test_with_debian13s_own_libraries_the_target_starts_and_answers(
    build: image_spdk.SpdkBuild, on_debian13: tuple[Path, Path], tmp_path: Path
) -> None:
    need_root()
    base, carried = on_debian13
    wrapper = tmp_path / "bin" / "target"
    wrapper.parent.mkdir()
    cmd = " ".join(loader(base, carried / "bin" / build.target.name))
    wrapper.write_text(f'#!/bin/sh\nexec {cmd} "$@"\n')
    wrapper.chmod(0o755)
    t = start_target(
        wrapper.parent, tmp_path / "t", ("--interrupt-mode",), nice=19, discovery_svcid=None, binary=wrapper
    )
    try:
        assert t.dp.call(("spdk_get_version", {}))["version"].startswith("SPDK v26.05")
    finally:
        stop_target(t)
