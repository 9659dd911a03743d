"""DSCP marking of storage traffic (tcp-dctcp): one nftables table owned by nodeos.

The table `inet nodeos_qos` sets the DSCP of TCP segments to or from the storage ports on
output, so switches put NVMe/TCP in its lossy, ECN-marking class. Its rules carry a comment
naming what they set; reading the comments back is how drift is seen. The table is replaced
atomically in one `nft -f` transaction. Must run in the target namespace.
"""

from __future__ import annotations

import json
import shutil
import subprocess

from nodeos.errors import EnvironmentProblem, OperationFailed

TABLE = "nodeos_qos"
RULES_PER_SPEC = 4  # {ipv4, ipv6} x {sport, dport}
NFT_MISSING = "nft-missing"


def spec_comment(dscp: int, ports: tuple[int, ...]) -> str:
    return f"nodeos storage dscp {dscp} ports {','.join(str(p) for p in ports)}"


def render(dscp: int, ports: tuple[int, ...]) -> str:
    comment = spec_comment(dscp, ports)
    portset = ", ".join(str(p) for p in ports)
    rules = [
        f'meta nfproto {fam} tcp {d} {{ {portset} }} {ipk} dscp set {dscp} comment "{comment}"'
        for fam, ipk in (("ipv4", "ip"), ("ipv6", "ip6"))
        for d in ("sport", "dport")
    ]
    body = "\n    ".join(rules)
    # "table ...; delete table ..." makes the replace work whether or not the table exists.
    return (
        f"table inet {TABLE}\ndelete table inet {TABLE}\ntable inet {TABLE} {{\n  chain output {{\n"
        f"    type filter hook output priority mangle; policy accept;\n    {body}\n  }}\n}}\n"
    )


def _nft(args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    if shutil.which("nft") is None:
        raise EnvironmentProblem(
            "nft (Debian package nftables) is not installed: needed to mark storage traffic with DSCP",
            field="qos.storage_dscp",
        )
    return subprocess.run(
        ["nft", *args], input=stdin, capture_output=True, text=True, timeout=30, check=False
    )


def read() -> str | None:
    """The comment of our rules (None: no table; NFT_MISSING: no nft; "modified": edited by hand)."""
    if shutil.which("nft") is None:
        return NFT_MISSING
    res = _nft(["-j", "list", "table", "inet", TABLE])
    if res.returncode != 0:
        return None
    comments = [
        item["rule"].get("comment") for item in json.loads(res.stdout).get("nftables", []) if "rule" in item
    ]
    if len(comments) == RULES_PER_SPEC and len(set(comments)) == 1 and comments[0]:
        return str(comments[0])
    return f"modified ({len(comments)} rules)"


def apply(dscp: int | None, ports: tuple[int, ...]) -> None:
    if dscp is None:
        res = _nft(["delete", "table", "inet", TABLE])
        if res.returncode != 0 and "No such file" not in res.stderr:
            raise OperationFailed(f"cannot remove nftables table {TABLE}: {res.stderr.strip()}")
        return
    res = _nft(["-f", "-"], stdin=render(dscp, ports))
    if res.returncode != 0:
        raise OperationFailed(
            f"cannot load DSCP marking rules: {res.stderr.strip()}", field="qos.storage_dscp"
        )


def parse_comment(comment: str) -> tuple[int, tuple[int, ...]] | None:
    """Back from a comment to (dscp, ports), so a rollback can restore what was there."""
    parts = comment.split()
    if len(parts) != 6 or parts[:3] != ["nodeos", "storage", "dscp"] or parts[4] != "ports":
        return None
    return int(parts[3]), tuple(int(p) for p in parts[5].split(","))
