"""SPDK in the image (issue 27): what the image build takes from an operator's SPDK build
(NODEOS_SPDK_DIR), what it leaves alone without one, and what it records and prints."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from nodeos.errors import EnvironmentProblem
from nodeos_devtools.lab import image, image_spdk
from nodeos_devtools.lab.image_spdk import SpdkBuild

LDD = """\
\tlinux-vdso.so.1 (0x00007ffc5b7f2000)
\tlibnuma.so.1 => /lib/x86_64-linux-gnu/libnuma.so.1 (0x00007f7c1c9e0000)
\tlibaio.so.1 => /lib/x86_64-linux-gnu/libaio.so.1 (0x00007f7c1c9d0000)
\tlibssl.so.3 => /lib/x86_64-linux-gnu/libssl.so.3 (0x00007f7c1c900000)
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f7c1c600000)
\t/lib64/ld-linux-x86-64.so.2 (0x00007f7c1ca20000)
"""


def fake_build(tmp_path: Path, version: bytes = b"v26.05", arch: str = "x86-64-v2") -> SpdkBuild:
    """An SPDK tree as a build leaves it (build/bin/nvmf_tgt, mk/config.mk) plus dist/bin -> it."""
    tree = tmp_path / "spdk"
    (tree / "build" / "bin").mkdir(parents=True)
    (tree / "mk").mkdir()
    (tree / "mk" / "config.mk").write_text(f"CONFIG_PREFIX=/usr/local\nCONFIG_ARCH?={arch}\n")
    target = tree / "build" / "bin" / "nvmf_tgt"
    target.write_bytes(b"\x7fELF...SPDK " + version + b" git sha1 abc\0...")
    libs = []
    for soname in ("libnuma.so.1", "libaio.so.1", "libssl.so.3", "libc.so.6"):
        p = tmp_path / "hostlib" / soname
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(soname.encode())
        libs.append((soname, p))
    dist = tmp_path / "dist"
    (dist / "bin").mkdir(parents=True)
    (dist / "bin" / "nvmf_tgt").symlink_to(target)
    t = target.resolve()
    return SpdkBuild(dist, t, image_spdk.version_of(t.read_bytes()), image_spdk.arch_of(t), tuple(libs))


def test_without_nodeos_spdk_dir_the_image_is_the_kernel_image(tmp_path: Path) -> None:
    assert image_spdk.spdk_build({}) is None
    assert image_spdk.spdk_build({"NODEOS_SPDK_DIR": "  "}) is None
    assert image_spdk.key_part(None) == b""  # the image key is what it was before SPDK
    lines: list[str] = []
    rec = image_spdk.install(tmp_path, None, lines.append)
    assert rec == {"dataplane": "kernel"}
    assert list(tmp_path.iterdir()) == []  # nothing added to the tree
    assert lines == ["data plane: kernel (no NODEOS_SPDK_DIR)"]
    assert image_spdk.describe(image_spdk.read_record(tmp_path)) == "kernel"


def test_a_directory_without_nvmf_tgt_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentProblem) as e:
        image_spdk.spdk_build({"NODEOS_SPDK_DIR": str(tmp_path)})
    assert "NODEOS_SPDK_DIR" in e.value.message and "bin/nvmf_tgt" in e.value.message


def test_the_build_is_read_from_the_binary_and_its_tree(tmp_path: Path) -> None:
    b = fake_build(tmp_path)
    assert b.version == "v26.05" and b.arch == "x86-64-v2"
    assert b.describe() == f"spdk (v26.05 from {tmp_path / 'dist'})"
    assert image_spdk.version_of(b"no version here") == "unknown"


def test_ldd_output_is_parsed_and_a_missing_library_refused() -> None:
    assert [s for s, _ in image_spdk.parse_ldd(LDD)] == [
        "libnuma.so.1",
        "libaio.so.1",
        "libssl.so.3",
        "libc.so.6",
    ]
    with pytest.raises(EnvironmentProblem, match=r"libfoo\.so\.2"):
        image_spdk.parse_ldd("\tlibfoo.so.2 => not found\n")


# DT_NEEDED as on the build host: the binary, and libarchive (not in the image) needing libxml2,
# which the image has (its own, built against its own ICU) while the host's needs ICU 72.
NEEDED = {
    "nvmf_tgt": ["libnuma.so.1", "libaio.so.1", "libssl.so.3", "libarchive.so.13", "libc.so.6"],
    "libarchive.so.13": ["libxml2.so.2", "libzstd.so.1", "libc.so.6"],
    "libxml2.so.2": ["libicuuc.so.72", "libc.so.6"],
    "libicuuc.so.72": ["libicudata.so.72"],
}
HOST = [(s, Path("/lib/x86_64-linux-gnu") / s) for s in ["libarchive.so.13", "libxml2.so.2", "libzstd.so.1",
        "libicuuc.so.72", "libicudata.so.72"]]  # fmt: skip


def needed(path: Path) -> list[str]:
    return NEEDED.get(path.name, [])


def test_only_libraries_the_image_lacks_are_bundled_never_glibc(tmp_path: Path) -> None:
    libs = image_spdk.parse_ldd(LDD) + HOST
    # Debian 13 has libssl.so.3, libnuma.so.1, libxml2 and libzstd, but calls libaio libaio.so.1t64.
    in_image = {"libssl.so.3", "libnuma.so.1", "libaio.so.1t64", "libxml2.so.2", "libzstd.so.1"}
    bundled = image_spdk.to_bundle(Path("/x/nvmf_tgt"), libs, lambda s: s in in_image, needed)
    assert [s for s, _ in bundled] == [
        "libaio.so.1",
        "libarchive.so.13",
    ]  # not ICU 72: libxml2 is the image's
    everything = image_spdk.to_bundle(Path("/x/nvmf_tgt"), libs, lambda s: False, needed)
    assert [s for s, _ in everything] == [
        "libnuma.so.1", "libaio.so.1", "libssl.so.3", "libarchive.so.13", "libxml2.so.2", "libzstd.so.1",
        "libicuuc.so.72", "libicudata.so.72",
    ]  # fmt: skip
    root = tmp_path / "root"
    (root / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    (root / "usr/lib/x86_64-linux-gnu/libssl.so.3").write_text("")
    assert image_spdk.rootfs_has(root, "libssl.so.3") and not image_spdk.rootfs_has(root, "libaio.so.1")


def test_the_key_tells_builds_apart(tmp_path: Path) -> None:
    a = fake_build(tmp_path / "a")
    b = fake_build(tmp_path / "b", version=b"v26.09")
    assert image_spdk.key_part(a) != b"" and image_spdk.key_part(a) != image_spdk.key_part(b)
    assert image_spdk.key_part(a) == image_spdk.key_part(fake_build(tmp_path / "a2"))  # same bytes, same key
    (a.libs[1][1]).write_bytes(b"another libaio")  # a bundled library changed: another image
    assert image_spdk.key_part(a) != image_spdk.key_part(fake_build(tmp_path / "a3"))


def test_image_key_differs_with_spdk_and_not_without(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODEOS_SPDK_DIR", raising=False)
    keyring = tmp_path / "keyring.pem"  # not the lab key (made with openssl in the cache on first use)
    keyring.write_text("certificates\n")
    monkeypatch.setenv("NODEOS_UPDATE_KEYRING", str(keyring))
    kernel_key = image.image_key("base")
    assert image.image_key("base") == kernel_key
    b = fake_build(tmp_path)
    monkeypatch.setattr(image_spdk, "spdk_build", lambda env=None: b)
    assert image.image_key("base") != kernel_key


def make_rootfs(tmp_path: Path) -> Path:
    root = tmp_path / "rootfs"
    for d in ("usr/bin", "usr/lib/x86_64-linux-gnu", "etc/systemd/system/multi-user.target.wants"):
        (root / d).mkdir(parents=True)
    for soname in ("libssl.so.3", "libnuma.so.1", "libc.so.6"):
        (root / "usr/lib/x86_64-linux-gnu" / soname).write_text("")
    return root


def test_install_lays_out_what_the_unit_and_nodeosd_expect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = fake_build(tmp_path)
    root = make_rootfs(tmp_path)
    ran: list[list[str]] = []
    monkeypatch.setattr(image_spdk, "_run", lambda argv: ran.append(argv))
    monkeypatch.setattr(image_spdk, "needed_of", needed)
    lines: list[str] = []
    rec = image_spdk.install(root, b, lines.append)
    spdk = root / "usr/lib/nodeos/spdk"
    assert (spdk / "bin/nvmf_tgt").read_bytes() == b.target.read_bytes()
    assert sorted(p.name for p in (spdk / "lib").iterdir()) == ["libaio.so.1"]
    assert (root / "usr/bin/nvmf_tgt").readlink() == Path("/usr/lib/nodeos/spdk/bin/nvmf_tgt")
    assert (
        "nodeos.dataplane.spdk.target_setup import main" in (root / "usr/bin/nodeos-spdk-setup").read_text()
    )
    assert (root / "usr/lib/ssl/openssl.cnf").read_text().startswith("#")  # nvmf_tgt needs one
    unit = root / "etc/systemd/system/nodeos-spdk.service"
    assert unit.read_text() == image_spdk.UNIT_FILE.read_text()
    wants = root / "etc/systemd/system/multi-user.target.wants/nodeos-spdk.service"
    assert wants.readlink() == Path("/etc/systemd/system/nodeos-spdk.service")
    assert [
        "patchelf",
        "--force-rpath",
        "--set-rpath",
        "$ORIGIN/../lib:/usr/lib/nodeos/spdk/lib",
        str(spdk / "bin/nvmf_tgt"),
    ] in ran
    assert ran[-1] == ["chroot", str(root), "/usr/bin/nvmf_tgt", "-h"]  # it must start inside the image
    assert rec == json.loads((spdk / "BUILD.json").read_text())
    assert rec["dataplane"] == "spdk"
    assert rec["spdk"] == {
        "target": "nvmf_tgt",  # an install without its tree (fake_build): SPDK's own, said
        "version": "v26.05",
        "source": str(tmp_path / "dist"),
        "identity": b.identity(),
        "cpu_target": "x86-64-v2",
        "bundled_libs": ["libaio.so.1"],
    }
    assert image_spdk.describe(rec) == f"spdk (v26.05 from {tmp_path / 'dist'})"
    assert lines[-1].startswith(f"data plane: spdk (v26.05 from {tmp_path / 'dist'}): nvmf_tgt in")
    assert any(ln.startswith("WARNING:") and "every 4 ms" in ln for ln in lines)
    shutil.rmtree(spdk)
    image_spdk.install(root, b, lines.append)  # again over the same tree: no error, same layout
    assert (spdk / "bin/nvmf_tgt").exists()


def test_a_native_build_is_warned_about(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    b = fake_build(tmp_path, arch="native")
    monkeypatch.setattr(image_spdk, "_run", lambda argv: None)
    monkeypatch.setattr(image_spdk, "needed_of", needed)
    lines: list[str] = []
    image_spdk.install(make_rootfs(tmp_path), b, lines.append)
    assert any("SIGILL" in line and "x86-64-v2" in line for line in lines)


def test_with_the_build_tree_at_hand_the_image_carries_nodeos_tgt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NODEOS_SPDK_DIR inside the SPDK tree the build was made in: nodeos-tgt is built against it
    and carried as the target (/usr/bin/nvmf_tgt, what the unit runs, names it), no warning."""
    tree = tmp_path / "spdk"
    for d in ("build/bin", "build/lib", "mk"):
        (tree / d).mkdir(parents=True)
    (tree / "mk" / "spdk.common.mk").write_text("")
    (tree / "mk" / "config.mk").write_text("CONFIG_ARCH?=x86-64-v2\n")
    shutil.copyfile("/bin/true", tree / "build/bin/nvmf_tgt")  # something ldd can read
    ours = tmp_path / "native" / "nodeos-tgt"
    ours.parent.mkdir()
    shutil.copyfile("/bin/true", ours)
    built: list[Path] = []
    monkeypatch.setattr(image_spdk.native_tgt, "build", lambda t: built.append(t) or ours)
    b = image_spdk.spdk_build({"NODEOS_SPDK_DIR": str(tree / "build")})
    assert b is not None and built == [tree]
    assert b.target == ours and b.arch == "x86-64-v2"  # the CPU target is the tree's
    root = make_rootfs(tmp_path)
    monkeypatch.setattr(image_spdk, "_run", lambda argv: None)
    monkeypatch.setattr(image_spdk, "needed_of", needed)
    lines: list[str] = []
    rec = image_spdk.install(root, b, lines.append)
    assert (root / "usr/lib/nodeos/spdk/bin/nodeos-tgt").read_bytes() == ours.read_bytes()
    assert (root / "usr/bin/nvmf_tgt").readlink() == Path("/usr/lib/nodeos/spdk/bin/nodeos-tgt")
    assert rec["spdk"]["target"] == "nodeos-tgt"  # type: ignore[index]
    assert not any(ln.startswith("WARNING:") for ln in lines), lines
    assert "nodeos-tgt in /usr/lib/nodeos/spdk" in lines[-1]
