"""NVMe drive inventory and SMART health.

Pure parsers of nvme-cli 2.x JSON (`nvme list -o json`, `nvme list -v -o json`,
`nvme smart-log -o json`), defensive about the shapes that changed between releases,
plus a small runner. `assess()` decides whether a drive is failing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from nodeos.bounded_run import run_bounded
from nodeos.errors import OperationFailed

KELVIN = 273


@dataclass(frozen=True)
class Smart:
    critical_warning: int
    percent_used: int
    media_errors: int
    temperature_c: int | None
    available_spare: int | None = None
    spare_threshold: int | None = None
    power_on_hours: int | None = None
    unsafe_shutdowns: int | None = None


@dataclass(frozen=True)
class Drive:
    device: str  # /dev/nvme0n1
    controller: str  # nvme0
    model: str
    serial: str
    firmware: str
    size_bytes: int
    nsid: int
    transport: str = "pcie"
    address: str = ""  # PCI BDF for pcie
    smart: Smart | None = None
    health: tuple[str, ...] = field(default=())  # reasons it is failing; empty: healthy

    @property
    def failing(self) -> bool:
        return bool(self.health)


def _num(v: Any) -> int | None:
    """nvme-cli prints numbers as ints, strings ("1,234", "35 C"), or {"value": n}."""
    if isinstance(v, dict):
        v = v.get("value", v.get("raw"))
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return int(v)
    if isinstance(v, str):
        m = re.match(r"^\s*(0x[0-9a-fA-F]+|-?[\d,]+)", v)
        if m:
            s = m.group(1).replace(",", "")
            return int(s, 16) if s.startswith("0x") else int(s)
    return None


def _text(v: Any) -> str:
    return str(v).strip() if v is not None else ""


def parse_smart(text: str) -> Smart:
    try:
        d = json.loads(text)
    except ValueError as e:
        raise OperationFailed(f"could not parse nvme smart-log JSON: {e}") from None
    temp = _num(d.get("temperature"))
    # nvme-cli reports Kelvin in JSON; some builds print Celsius strings ("35 C").
    if isinstance(d.get("temperature"), str) and "C" in d["temperature"]:
        temp_c = temp
    else:
        temp_c = temp - KELVIN if temp is not None and temp > 200 else temp
    return Smart(
        critical_warning=_num(d.get("critical_warning")) or 0,
        percent_used=_num(d.get("percent_used", d.get("percentage_used"))) or 0,
        media_errors=_num(d.get("media_errors")) or 0,
        temperature_c=temp_c,
        available_spare=_num(d.get("avail_spare", d.get("available_spare"))),
        spare_threshold=_num(d.get("spare_thresh", d.get("available_spare_threshold"))),
        power_on_hours=_num(d.get("power_on_hours")),
        unsafe_shutdowns=_num(d.get("unsafe_shutdowns")),
    )


def assess(smart: Smart, previous: Smart | None = None) -> tuple[str, ...]:
    """Why a drive counts as failing (empty: healthy). New volumes avoid failing drives."""
    why = []
    if smart.critical_warning:
        bits = {
            0: "spare below threshold",
            1: "temperature",
            2: "reliability degraded",
            3: "read-only",
            4: "volatile backup failed",
            5: "persistent memory read-only",
        }
        named = [bits.get(b, f"bit {b}") for b in range(8) if smart.critical_warning >> b & 1]
        why.append(f"critical warning 0x{smart.critical_warning:02x} ({', '.join(named)})")
    if smart.percent_used >= 100:
        why.append(f"endurance used up ({smart.percent_used}%)")
    if previous is not None and smart.media_errors > previous.media_errors:
        why.append(f"media errors rising ({previous.media_errors} -> {smart.media_errors})")
    if (
        smart.available_spare is not None
        and smart.spare_threshold is not None
        and smart.available_spare < smart.spare_threshold
    ):
        why.append(f"available spare {smart.available_spare}% below threshold {smart.spare_threshold}%")
    return tuple(why)


def _ctrl_of(dev: str) -> str:
    m = re.match(r"^(?:/dev/)?(nvme\d+)", dev)
    return m.group(1) if m else ""


def parse_list(text: str) -> list[Drive]:
    """`nvme list -o json`: a flat {"Devices": [...]} (2.x) or the verbose tree (-v)."""
    try:
        doc = json.loads(text) if text.strip() else {}
    except ValueError as e:
        raise OperationFailed(f"could not parse nvme list JSON: {e}") from None
    out: list[Drive] = []
    for dev in doc.get("Devices") or []:
        if "Subsystems" in dev:
            out.extend(_from_tree(dev))
        elif "DevicePath" in dev:
            out.append(_from_flat(dev))
    return sorted(out, key=lambda d: d.device)


def _size(ns: dict[str, Any]) -> int:
    phys = _num(ns.get("PhysicalSize"))
    if phys:
        return phys
    lba, ss = _num(ns.get("MaximumLBA")), _num(ns.get("SectorSize"))
    return (lba or 0) * (ss or 0)


def _from_flat(d: dict[str, Any]) -> Drive:
    path = _text(d.get("DevicePath"))
    return Drive(
        device=path,
        controller=_ctrl_of(path),
        model=_text(d.get("ModelNumber")),
        serial=_text(d.get("SerialNumber")),
        firmware=_text(d.get("Firmware")),
        size_bytes=_size(d),
        nsid=_num(d.get("NameSpace")) or 1,
    )


def _from_tree(host: dict[str, Any]) -> list[Drive]:
    out = []
    for sub in host.get("Subsystems") or []:
        ctrls = sub.get("Controllers") or []
        shared_ns = sub.get("Namespaces") or []
        for c in ctrls:
            namespaces = (c.get("Namespaces") or []) + shared_ns
            for ns in namespaces:
                name = _text(ns.get("NameSpace"))
                out.append(
                    Drive(
                        device=name if name.startswith("/dev/") else f"/dev/{name}",
                        controller=_text(c.get("Controller")),
                        model=_text(c.get("ModelNumber")),
                        serial=_text(c.get("SerialNumber")),
                        firmware=_text(c.get("Firmware")),
                        size_bytes=_size(ns),
                        nsid=_num(ns.get("NSID")) or 1,
                        transport=_text(c.get("Transport")) or "pcie",
                        address=_text(c.get("Address")),
                    )
                )
            if shared_ns:
                break  # shared namespaces listed once, under the first controller
    # One row per block device.
    seen: dict[str, Drive] = {}
    for d in out:
        seen.setdefault(d.device, d)
    return list(seen.values())


class NvmeCli:
    def __init__(self, binary: str = "nvme", timeout_s: float = 30.0) -> None:
        self.binary = binary
        self.timeout_s = timeout_s

    def run(self, args: list[str]) -> str:
        # Bounded even when nvme sits in the kernel on a namespace whose path is lost.
        p = run_bounded([self.binary, *args], self.timeout_s, package="nvme-cli")
        if p.returncode != 0:
            raise OperationFailed(f"nvme {' '.join(args)} failed: {p.stderr.strip()[-300:]}")
        return p.stdout

    def inventory(self, previous: dict[str, Smart] | None = None, local_only: bool = True) -> list[Drive]:
        """Drives with SMART and health. local_only drops fabrics-attached namespaces."""
        drives = parse_list(self.run(["list", "-v", "-o", "json"]))
        out = []
        for d in drives:
            if local_only and d.transport not in ("pcie", ""):
                continue
            try:
                target = f"/dev/{d.controller}" if d.controller else d.device
                smart = parse_smart(self.run(["smart-log", target, "-o", "json"]))
            except OperationFailed as e:
                out.append(_replace(d, None, (f"SMART unreadable: {e.message}",)))
                continue
            prev = (previous or {}).get(d.serial)
            out.append(_replace(d, smart, assess(smart, prev)))
        return out


def _replace(d: Drive, smart: Smart | None, health: tuple[str, ...]) -> Drive:
    from dataclasses import replace

    return replace(d, smart=smart, health=health)
