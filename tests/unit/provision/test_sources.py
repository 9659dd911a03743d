"""Where the configuration comes from: a credential, the config partition, the kernel command
line, in that order (the first present is the whole configuration). Real files in a temporary
directory stand for the credentials directory and the mounted partition."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from nodeos.errors import BadInput
from nodeos.provision import sources
from nodeos.provision.apply import check_found
from nodeos.provision.sources import choose, from_cmdline, from_credentials, from_partition

from .helpers import KEY, VALID_TOML

LAB_CMDLINE = (
    "root=/dev/vda rw console=ttyS0,115200 systemd.hostname=s1 nodeos.lab=1 nodeos.role=storage "
    "nodeos.ip=198.18.7.11/24 nodeos.hostid=x nodeos.hostnqn=y nodeos.peer=198.18.7.11:7100"
)
CMDLINE = (
    "root=/dev/sda2 ro quiet nodeos.hostname=s3 nodeos.address=eth0:192.0.2.13/24 "
    "nodeos.route=eth0:0.0.0.0/0,192.0.2.1 nodeos.address=eth1:198.51.100.13/24 nodeos.mtu=eth1:9000 "
    "nodeos.management=192.0.2.13 nodeos.storage=198.51.100.13 nodeos.ntp=192.0.2.1,ntp.example.net "
    f"nodeos.label=rack=r3 nodeos.label=switch=sw2 {shlex.quote('nodeos.ssh_key=' + KEY)} "
    "nodeos.cluster=join nodeos.cluster_address=198.51.100.11:7100 nodeos.token_credential=nodeos.join-token"
)


def _creds(tmp: Path, text: str = VALID_TOML) -> Path:
    d = tmp / "creds"
    d.mkdir(mode=0o700)
    (d / sources.CREDENTIAL).write_text(text)
    return d


def _part(tmp: Path, text: str = VALID_TOML.replace('"s1"', '"s2"')) -> Path:
    d = tmp / "cfg"
    d.mkdir()
    (d / sources.PARTITION_FILE).write_text(text)
    return d


def test_credential_source(tmp_path: Path) -> None:
    found = from_credentials(_creds(tmp_path))
    assert found is not None and found.source == "credential"
    plan = check_found(found)
    assert plan.hostname == "s1"
    assert plan.cluster is not None and plan.cluster.token_file == str(tmp_path / "creds" / "join.token")
    assert from_credentials(tmp_path / "nowhere") is None
    assert (
        sources.credentials_dir({"CREDENTIALS_DIRECTORY": "/run/credentials/x.service"})
        == "/run/credentials/x.service"
    )
    assert sources.credentials_dir({}) == "/run/credentials/@system"


def test_partition_source(tmp_path: Path) -> None:
    found = from_partition(_part(tmp_path))
    assert found is not None and found.source == "partition"
    plan = check_found(found)
    assert plan.hostname == "s2"
    assert plan.cluster is not None and plan.cluster.token_file == str(tmp_path / "cfg" / "join.token")
    assert from_partition(None) is None
    assert sources.partition_device(by_label=str(tmp_path)) is None


def test_cmdline_source_means_what_the_file_means() -> None:
    found = from_cmdline(CMDLINE)
    assert found is not None and found.source == "cmdline"
    plan = check_found(found)
    assert plan.hostname == "s3"
    assert [(i.name, i.mtu, i.addresses) for i in plan.interfaces] == [
        ("eth0", None, ("192.0.2.13/24",)),
        ("eth1", 9000, ("198.51.100.13/24",)),
    ]
    assert plan.interfaces[0].routes[0].gateway == "192.0.2.1"
    assert plan.management_address == "192.0.2.13" and plan.storage_addresses == ("198.51.100.13",)
    assert plan.ntp == ("192.0.2.1", "ntp.example.net")
    assert plan.labels == {"rack": "r3", "switch": "sw2"}
    assert plan.ssh_keys == (KEY,)
    assert plan.cluster is not None and plan.cluster.address == "198.51.100.11:7100"
    assert plan.cluster.token_credential == "nodeos.join-token"


def test_the_labs_own_words_are_not_a_configuration() -> None:
    assert from_cmdline(LAB_CMDLINE) is None
    assert from_cmdline("") is None


def test_a_bad_cmdline_value_names_the_documents_field() -> None:
    found = from_cmdline("nodeos.address=eth0:192.0.2.300/24")
    assert found is not None
    with pytest.raises(BadInput) as exc:
        check_found(found)
    assert exc.value.field == "network.interfaces[0].addresses[0]" and exc.value.allowed


def test_an_unknown_cmdline_key_is_named_with_the_known_ones() -> None:
    found = from_cmdline("nodeos.hostnam=s1")
    assert found is not None
    with pytest.raises(BadInput) as exc:
        check_found(found)
    assert exc.value.field == "nodeos.hostnam"
    assert "nodeos.hostname" in exc.value.allowed


def test_a_file_that_is_not_toml_is_refused_whole(tmp_path: Path) -> None:
    found = from_partition(_part(tmp_path, "hostname = s1\n"))
    assert found is not None
    with pytest.raises(BadInput) as exc:
        check_found(found)
    assert exc.value.field == "config" and exc.value.allowed


def test_precedence_credential_then_partition_then_cmdline(tmp_path: Path) -> None:
    cred, part, cmd = (
        from_credentials(_creds(tmp_path)),
        from_partition(_part(tmp_path)),
        from_cmdline(CMDLINE),
    )
    chosen, ignored = choose([cred, part, cmd])
    assert chosen is cred and ignored == [part, cmd]
    chosen, ignored = choose([None, part, cmd])
    assert chosen is part and ignored == [cmd]
    chosen, ignored = choose([None, None, cmd])
    assert chosen is cmd and ignored == []
    assert choose([None, None, None]) == (None, [])


def test_the_first_source_is_used_whole_even_when_invalid(tmp_path: Path) -> None:
    """No falling back to a later source: the operator meant the first one."""
    cred = from_credentials(_creds(tmp_path, VALID_TOML.replace('"s1"', '"s_1"')))
    chosen, _ = choose([cred, from_cmdline(CMDLINE)])
    assert chosen is cred
    with pytest.raises(BadInput) as exc:
        check_found(chosen)
    assert exc.value.field == "hostname"


def test_the_digest_follows_the_text_and_the_source(tmp_path: Path) -> None:
    a = from_partition(_part(tmp_path))
    b = from_credentials(_creds(tmp_path, (tmp_path / "cfg" / "nodeos.toml").read_text()))
    assert a is not None and b is not None and a.digest != b.digest


def test_a_partition_that_does_not_mount_is_a_configuration_refused(tmp_path: Path) -> None:
    """The mount itself is run for real (a device that is not there: no loop device is made)."""
    mnt = tmp_path / "run" / "cfg"
    with sources.mounted_partition(str(tmp_path / "no-such-device"), mnt=str(mnt)) as found:
        assert found is not None and found.source == "partition"
        with pytest.raises(BadInput) as exc:
            check_found(found)
    assert exc.value.field == "config" and "cannot be mounted" in exc.value.message and exc.value.allowed
    assert (mnt.parent.stat().st_mode & 0o077) == 0, "the mount point's directory is root-only"
    with sources.mounted_partition(None) as nothing:
        assert nothing is None


def _kernel_mounts(fs: str) -> bool:
    return any(line.split()[-1] == fs for line in Path("/proc/filesystems").read_text().splitlines() if line)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting the config partition needs root")
@pytest.mark.skipif(not Path("/dev/loop-control").exists(), reason="no loop devices here")
@pytest.mark.skipif(not _kernel_mounts("ext4") or shutil.which("mkfs.ext4") is None, reason="no ext4 here")
def test_a_real_config_partition_is_mounted_read_and_unmounted(tmp_path: Path) -> None:
    """An ext4 file system labelled NODEOS-CFG with nodeos.toml and join.token on it, made with
    `mkfs.ext4 -d` (no mount to fill it), then mounted by the code under test (a loop device
    the kernel releases at the unmount). A USB stick is usually FAT: the same mount, another
    file system type."""
    content = tmp_path / "content"
    content.mkdir()
    (content / "nodeos.toml").write_text(VALID_TOML)
    (content / "join.token").write_text("t\n")
    img = tmp_path / "part.img"
    subprocess.run(
        ["mkfs.ext4", "-q", "-F", "-L", sources.PARTITION_LABEL, "-d", str(content), str(img), "8M"],
        check=True,
        capture_output=True,
    )
    mnt = tmp_path / "run" / "cfg"
    with sources.mounted_partition(str(img), mnt=str(mnt)) as found:
        assert found is not None and found.error is None, found
        assert os.path.ismount(mnt)
        plan = check_found(found)
        assert plan.hostname == "s1"
        assert plan.cluster is not None and Path(str(plan.cluster.token_file)).read_text() == "t\n"
        with pytest.raises(OSError):
            (mnt / "written").write_text("x")  # read-only
    assert not os.path.ismount(mnt)


def test_a_credential_that_is_not_utf8_is_refused_whole(tmp_path: Path) -> None:
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / sources.CREDENTIAL).write_bytes(b"hostname = \xff\xfe\n")
    found = from_credentials(creds)
    assert found is not None
    with pytest.raises(BadInput) as exc:
        check_found(found)
    assert exc.value.field == "config" and exc.value.allowed
