"""The base layer's customisation (tests/tooling/nodeos_devtools/lab/image.py) on a stand-in root
file system: what a booted appliance then runs, or does not."""

from __future__ import annotations

from pathlib import Path

from nodeos_devtools.lab import image
from nodeos_devtools.lab.image_recipe import DISABLED_UNITS, MASKED_UNITS


def _enabled_as_postinst_leaves_it(root: Path, wants: str, unit: str) -> Path:
    link = root / "etc" / "systemd" / "system" / wants / unit
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(f"/usr/lib/systemd/system/{unit}")  # dangles outside the image
    return link


def test_the_gpu_node_services_are_installed_but_not_enabled_and_others_stay(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    links = [
        _enabled_as_postinst_leaves_it(tmp_path, "multi-user.target.wants", "stafd.service"),
        _enabled_as_postinst_leaves_it(tmp_path, "multi-user.target.wants", "stacd.service"),
        _enabled_as_postinst_leaves_it(tmp_path, "multi-user.target.wants", "avahi-daemon.service"),
        _enabled_as_postinst_leaves_it(tmp_path, "sockets.target.wants", "avahi-daemon.socket"),
    ]
    kept = _enabled_as_postinst_leaves_it(tmp_path, "multi-user.target.wants", "tlshd.service")
    image._customise_base(tmp_path)
    assert {p.name for p in links} <= set(DISABLED_UNITS)
    assert not [p for p in links if p.is_symlink()], "a GPU-node service is still enabled in the base"
    assert kept.is_symlink(), "an unrelated enabled unit was disabled"
    for unit in MASKED_UNITS:
        assert (tmp_path / "etc" / "systemd" / "system" / unit).readlink() == Path("/dev/null")
