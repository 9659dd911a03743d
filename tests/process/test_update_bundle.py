"""Signed update bundles, end to end with the real tools: a small bundle built by RAUC (and
mksquashfs) with a key made by openssl, then checked by the real `nodeos node update` process.
A good bundle verifies; a tampered byte, a truncated file, a bundle for another architecture,
an older release, a foreign signer and a missing keyring are each refused with exit 2 naming
the reason, and nothing is written (not even the staged copy under the state directory)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import nodeos
from nodeos.update import build as ub
from nodeos.update.verify import node_arch

pytestmark = [pytest.mark.process, pytest.mark.timeout(180)]

NODEOS = str(Path(sys.executable).parent / "nodeos")
MISSING = [t for t in ("rauc", "mksquashfs", "openssl") if shutil.which(t) is None]
if MISSING:
    pytestmark.append(
        pytest.mark.skip(reason=f"{', '.join(MISSING)} not installed (images/bootstrap.sh installs them)")
    )

NEWER = "99.0.0"  # above any release this tree will have


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A signing key, a payload, and a bundle of each kind."""
    d = tmp_path_factory.mktemp("bundles")
    signing = ub.lab_key(d / "keys")
    foreign = ub.lab_key(d / "other-keys")
    payload = d / "payload"
    payload.mkdir()
    (payload / "rootfs.ext4").write_bytes(bytes(range(256)) * 2048)  # 512 KiB: several squashfs blocks
    (payload / "vmlinuz").write_bytes(b"kernel " * 1000)
    files = {"rootfs.ext4": payload / "rootfs.ext4", "vmlinuz": payload / "vmlinuz"}

    def make(
        name: str, *, version: str = NEWER, arch: str | None = None, key: ub.SigningKey = signing
    ) -> Path:
        return ub.make_bundle(
            files,
            d / f"{name}.raucb",
            version=version,
            arch=arch or node_arch(),
            build="test",
            metadata={"test": name},
            signing=key,
        )

    good = make("good")
    tampered = d / "tampered.raucb"
    data = bytearray(good.read_bytes())
    data[len(data) // 3] ^= 0x01  # one bit inside the signed image
    tampered.write_bytes(bytes(data))
    truncated = d / "truncated.raucb"
    truncated.write_bytes(good.read_bytes()[:-4096])
    other = "arm64" if node_arch() != "arm64" else "amd64"
    return {
        "dir": d,
        "keyring": signing.cert,
        "good": good,
        "tampered": tampered,
        "truncated": truncated,
        "other_arch": make("other-arch", arch=other),
        "older": make("older", version="0.0.1"),
        "foreign": make("foreign", key=foreign),
        "other": other,
    }


def _update(kit: dict[str, Any], bundle: Path, *extra: str, keyring: Path | None = None) -> tuple[int, Any]:
    state = kit["dir"] / "state"
    proc = subprocess.run(
        [NODEOS, "node", "update", str(bundle), "--keyring", str(keyring or kit["keyring"]),
         "--state-dir", str(state), "--json", *extra],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def _nothing_written(kit: dict[str, Any]) -> None:
    state = kit["dir"] / "state"
    assert not state.exists() or not any(state.rglob("*")), sorted(state.rglob("*"))


def test_a_good_bundle_verifies(kit: dict[str, Any]) -> None:
    rc, out = _update(kit, kit["good"], "--check")
    assert rc == 0, out
    assert out["result"] == "verified" and out["written"] is False
    assert (out["version"], out["running"], out["arch"], out["change"]) == (
        NEWER,
        nodeos.__version__,
        node_arch(),
        "upgrade",
    )
    assert [next(iter(i)) for i in out["images"]] == ["rootfs"]
    _nothing_written(kit)


def test_a_good_bundle_on_a_machine_without_slots_fails_and_writes_nothing(kit: dict[str, Any]) -> None:
    if Path("/etc/rauc/system.conf").exists():
        pytest.skip("this machine has RAUC slots: an install would write one")
    rc, out = _update(kit, kit["good"])
    assert rc == 1, out
    assert out["error"]["field"] == "slots" and "no A/B slots" in out["error"]["message"]
    _nothing_written(kit)


@pytest.mark.parametrize(
    ("kind", "reason", "words"),
    [
        ("tampered", "bad_signature", "bad signature"),
        ("foreign", "bad_signature", "bad signature"),
        ("truncated", "truncated", "truncated"),
        ("other_arch", "other_architecture", "another architecture"),
        ("older", "downgrade", "downgrade refused"),
    ],
)
@pytest.mark.parametrize("mode", ["--check", "install"])
def test_a_bad_bundle_is_refused_naming_the_reason(
    kit: dict[str, Any], kind: str, reason: str, words: str, mode: str
) -> None:
    rc, out = _update(kit, kit[kind], *([mode] if mode == "--check" else []))
    assert rc == 2, out
    err = out["error"]
    assert (err["code"], err["reason"], err["field"]) == ("bundle_refused", reason, "bundle")
    assert words in err["message"].split(":")[0], err["message"]
    if kind == "other_arch":
        assert kit["other"] in err["message"]
    _nothing_written(kit)


def test_an_older_bundle_installs_only_when_asked(kit: dict[str, Any]) -> None:
    rc, out = _update(kit, kit["older"], "--check", "--allow-downgrade")
    assert rc == 0, out
    assert out["change"] == "downgrade" and out["version"] == "0.0.1"


def test_no_keyring_is_refused(kit: dict[str, Any]) -> None:
    rc, out = _update(kit, kit["good"], "--check", keyring=kit["dir"] / "absent.pem")
    assert rc == 2, out
    assert out["error"]["reason"] == "no_keyring"
    _nothing_written(kit)


def test_human_output_names_the_reason(kit: dict[str, Any]) -> None:
    proc = subprocess.run(
        [NODEOS, "node", "update", str(kit["truncated"]), "--check", "--keyring", str(kit["keyring"])],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "the bundle is truncated" in proc.stderr and proc.stdout == ""
