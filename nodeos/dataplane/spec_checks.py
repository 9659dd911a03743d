"""Checks on an ExportSpec and a RemoteSpec's identities, shared by both backends (pure)."""

from __future__ import annotations

import ipaddress

from nodeos import tlskey
from nodeos.dataplane.base import ExportSpec, Listener, RemoteSpec
from nodeos.dataplane.ids import check_id, check_nqn, check_serial, normalize_nguid, normalize_uuid
from nodeos.errors import BadInput

ANA_STATES = ("optimized", "non-optimized", "inaccessible", "persistent-loss", "change")
TRANSPORTS = ("tcp", "rdma")
ADRFAMS = ("ipv4", "ipv6")
MAX_ANA_GROUP = 128  # nvmet's NVMET_MAX_ANAGRPS; SPDK allows more, the kernel does not
CNTLID_MAX = 0xFFEF


def check_ana_state(state: str) -> str:
    if state not in ANA_STATES:
        raise BadInput(f"ANA state {state!r} is unknown", field="ana_state", allowed=list(ANA_STATES))
    return state


def check_listener(li: Listener) -> None:
    if li.trtype not in TRANSPORTS:
        raise BadInput(f"transport {li.trtype!r} is unknown", field="trtype", allowed=list(TRANSPORTS))
    if li.adrfam not in ADRFAMS:
        raise BadInput(f"address family {li.adrfam!r} is unknown", field="adrfam", allowed=list(ADRFAMS))
    try:
        ip = ipaddress.ip_address(li.traddr)
    except ValueError:
        raise BadInput(f"traddr {li.traddr!r} is not an IP address", field="traddr") from None
    if (ip.version == 4) != (li.adrfam == "ipv4"):
        raise BadInput(f"traddr {li.traddr} is not an {li.adrfam} address", field="traddr")
    svc = str(li.trsvcid)
    if not svc.isdigit() or not 0 < int(svc) < 65536:
        raise BadInput(f"trsvcid {svc!r} is not a port number", field="trsvcid", allowed="1-65535")


def check_remote_ids(spec: RemoteSpec) -> None:
    """A replica to attach: its subsystem and host NQNs, host id, namespace NGUID and listener
    (each backend checks its own timeouts)."""
    check_nqn(spec.nqn)
    check_nqn(spec.host_nqn, "host_nqn")
    normalize_uuid(spec.host_id, "host_id")
    normalize_nguid(spec.nguid)
    check_listener(spec.listener)


def check_seconds(spec: RemoteSpec, names: tuple[str, ...]) -> None:
    """RemoteSpec timeouts in seconds, -1 (never) to an hour."""
    for name in names:
        v = getattr(spec, name)
        if not isinstance(v, int) or isinstance(v, bool) or not -1 <= v <= 3600:
            raise BadInput(f"{name} {v!r} is not a number of seconds", field=name, allowed="-1..3600")


def check_export_spec(spec: ExportSpec) -> None:
    check_nqn(spec.nqn)
    check_serial(spec.serial)
    check_id(spec.pool_id, "pool_id")
    check_id(spec.vol_id, "vol_id")
    normalize_uuid(spec.uuid)
    normalize_nguid(spec.nguid)
    for li in spec.listeners:
        check_listener(li)
    seen = set()
    for h in spec.hosts:
        check_nqn(h.host_nqn, "host_nqn")
        if h.host_nqn in seen:
            raise BadInput(f"host {h.host_nqn} is listed twice", field="host_nqn")
        seen.add(h.host_nqn)
        if h.dhchap_key is not None and not h.dhchap_key.startswith("DHHC-1:"):
            raise BadInput(
                "the DH-HMAC-CHAP key is not in DHHC-1 form",
                field="dhchap_key",
                allowed="DHHC-1:<hash>:<base64>: as made by `nvme gen-dhchap-key`",
            )
        tlskey.check_key(h.tls_key, "tls_key")
    if not 1 <= spec.ana_group <= MAX_ANA_GROUP:
        raise BadInput(
            f"ANA group {spec.ana_group} is out of range", field="ana_group", allowed=f"1-{MAX_ANA_GROUP}"
        )
    check_ana_state(spec.ana_state)
    if not 1 <= spec.cntlid_min <= spec.cntlid_max <= CNTLID_MAX:
        raise BadInput(
            f"controller id range {spec.cntlid_min}-{spec.cntlid_max} is invalid",
            field="cntlid_min",
            allowed=f"1 <= cntlid_min <= cntlid_max <= {CNTLID_MAX}",
        )
    if spec.device is not None:
        d = spec.device
        if not isinstance(d, str) or not d.startswith("/dev/") or ".." in d.split("/") or "\n" in d:
            raise BadInput(f"device {d!r} is not a device path", field="device", allowed="/dev/...")
    for field, v in (("qos_iops", spec.qos_iops), ("qos_mbps", spec.qos_mbps)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
            raise BadInput(f"{field} {v!r} is not a non-negative integer", field=field)
