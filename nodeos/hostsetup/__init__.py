"""The GPU node's side of the fabric, shipped with the product: nvme-stas configuration that
finds the storage nodes over mDNS and keeps every granted volume connected by itself.

Stock Linux hosts run nvme-stas (Debian `nvme-stas`, with `avahi-daemon`): `stafd` keeps a
persistent discovery controller to every storage node it hears of, `stacd` connects what their
discovery logs list and drops what they stop listing. These files are its settings for a nodeos
cluster (docs/network.md, "The GPU host"); the lab's GPU-node VMs carry them in /etc/stas/.
"""

from __future__ import annotations

from pathlib import Path

DIR = Path(__file__).resolve().parent
# file name -> where a GPU node keeps it
STAS_FILES: dict[str, str] = {
    "stafd.conf": "/etc/stas/stafd.conf",
    "stacd.conf": "/etc/stas/stacd.conf",
}


def stas_file(name: str) -> str:
    """The text of one of the shipped nvme-stas configuration files."""
    if name not in STAS_FILES:
        raise KeyError(f"no host set-up file {name!r}; there are {sorted(STAS_FILES)}")
    return (DIR / name).read_text()
