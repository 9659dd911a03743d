"""DCB netlink codec (RTM_GETDCB / RTM_SETDCB), built on pyroute2's message classes.

pyroute2 has no DCB support. The message layout follows the kernel's uapi
include/linux/dcbnl.h: a `struct dcbmsg` header, DCB_ATTR_IFNAME, then either a nested
DCB_ATTR_IEEE (ETS, PFC, APP table, buffer, APP trust) or DCB_ATTR_DCBX. The C structs
inside are packed here with `struct` in host byte order, as the kernel reads them.
Requests are laid out the way iproute2's `dcb` lays them out (tests compare the bytes).
Pure: no sockets here (see dcbsock.py).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from pyroute2.netlink import NLA_F_NESTED, NLM_F_ACK, NLM_F_REQUEST, nla, nlmsg

RTM_GETDCB = 78
RTM_SETDCB = 79
RTNLGRP_DCB = 23
AF_UNSPEC = 0

# enum dcbnl_commands
DCB_CMD_IEEE_SET = 20
DCB_CMD_IEEE_GET = 21
DCB_CMD_GDCBX = 22
DCB_CMD_SDCBX = 23
DCB_CMD_IEEE_DEL = 27

# enum dcbnl_attrs
DCB_ATTR_IFNAME = 1
DCB_ATTR_IEEE = 13
DCB_ATTR_DCBX = 14

# enum ieee_attrs
DCB_ATTR_IEEE_ETS = 1
DCB_ATTR_IEEE_PFC = 2
DCB_ATTR_IEEE_APP_TABLE = 3
DCB_ATTR_IEEE_MAXRATE = 7
DCB_ATTR_DCB_BUFFER = 10
DCB_ATTR_DCB_APP_TRUST_TABLE = 11

# APP selectors: IEEE 802.1Qaz values, plus the kernel's non-IEEE PCP selector.
SEL_ETHERTYPE = 1
SEL_STREAM = 2
SEL_DGRAM = 3
SEL_ANY = 4
SEL_DSCP = 5
SEL_PCP = 255
IEEE_SELECTORS = (SEL_ETHERTYPE, SEL_STREAM, SEL_DGRAM, SEL_ANY, SEL_DSCP)
TRUST_NAMES = {
    "ethtype": SEL_ETHERTYPE,
    "stream": SEL_STREAM,
    "dgram": SEL_DGRAM,
    "any": SEL_ANY,
    "dscp": SEL_DSCP,
    "pcp": SEL_PCP,
}

# DCBX capability bits (DCB_CAP_DCBX_*)
DCBX_HOST = 0x01
DCBX_LLD_MANAGED = 0x02
DCBX_VER_CEE = 0x04
DCBX_VER_IEEE = 0x08
DCBX_STATIC = 0x10
DCBX_MODE_BITS = {
    "host-ieee": DCBX_HOST | DCBX_VER_IEEE,
    "host-cee": DCBX_HOST | DCBX_VER_CEE,
    "firmware": DCBX_LLD_MANAGED | DCBX_VER_IEEE,
}

# Transmission selection algorithms (IEEE_8021QAZ_TSA_*)
TSA_BY_NAME = {"strict": 0, "cbs": 1, "ets": 2, "vendor": 255}
TSA_NAMES = {v: k for k, v in TSA_BY_NAME.items()}

_ETS = struct.Struct("=BBB8s8s8s8s8s8s8s")  # struct ieee_ets, 59 bytes
_PFC = struct.Struct("=BBBxH2x8Q8Q")  # struct ieee_pfc, 136 bytes (u64 arrays 8-aligned)
_APP = struct.Struct("=BBH")  # struct dcb_app
_BUF = struct.Struct("=8s8II")  # struct dcbnl_buffer, 44 bytes


class DcbCodecError(ValueError):
    """A message or struct that does not decode as DCB."""


def _arr(values: tuple[int, ...] | list[int], n: int = 8) -> bytes:
    if len(values) != n:
        raise DcbCodecError(f"expected {n} values, got {len(values)}")
    return bytes(values)


@dataclass(frozen=True)
class Ets:
    willing: int = 0
    ets_cap: int = 0
    cbs: int = 0
    tc_tx_bw: tuple[int, ...] = (0,) * 8
    tc_rx_bw: tuple[int, ...] = (0,) * 8
    tc_tsa: tuple[int, ...] = (0,) * 8
    prio_tc: tuple[int, ...] = (0,) * 8
    tc_reco_bw: tuple[int, ...] = (0,) * 8
    tc_reco_tsa: tuple[int, ...] = (0,) * 8
    reco_prio_tc: tuple[int, ...] = (0,) * 8

    def pack(self) -> bytes:
        return _ETS.pack(
            self.willing,
            self.ets_cap,
            self.cbs,
            _arr(self.tc_tx_bw),
            _arr(self.tc_rx_bw),
            _arr(self.tc_tsa),
            _arr(self.prio_tc),
            _arr(self.tc_reco_bw),
            _arr(self.tc_reco_tsa),
            _arr(self.reco_prio_tc),
        )

    @classmethod
    def unpack(cls, data: bytes) -> Ets:
        if len(data) < _ETS.size:
            raise DcbCodecError(f"ieee_ets needs {_ETS.size} bytes, got {len(data)}")
        w, cap, cbs, *arrays = _ETS.unpack_from(data)
        return cls(w, cap, cbs, *(tuple(a) for a in arrays))


@dataclass(frozen=True)
class Pfc:
    pfc_cap: int = 0
    pfc_en: int = 0  # bit i = PFC on priority i
    mbc: int = 0
    delay: int = 0
    requests: tuple[int, ...] = (0,) * 8  # pause frames sent, per priority (read only)
    indications: tuple[int, ...] = (0,) * 8  # pause frames received, per priority (read only)

    def pack(self) -> bytes:
        if len(self.requests) != 8 or len(self.indications) != 8:
            raise DcbCodecError("ieee_pfc counters need 8 values each")
        return _PFC.pack(self.pfc_cap, self.pfc_en, self.mbc, self.delay, *self.requests, *self.indications)

    @classmethod
    def unpack(cls, data: bytes) -> Pfc:
        if len(data) < _PFC.size:
            raise DcbCodecError(f"ieee_pfc needs {_PFC.size} bytes, got {len(data)}")
        cap, en, mbc, delay, *counters = _PFC.unpack_from(data)
        return cls(cap, en, mbc, delay, tuple(counters[:8]), tuple(counters[8:]))

    @property
    def enabled(self) -> tuple[int, ...]:
        return tuple(p for p in range(8) if self.pfc_en >> p & 1)


@dataclass(frozen=True, order=True)
class App:
    selector: int
    priority: int
    protocol: int

    def pack(self) -> bytes:
        return _APP.pack(self.selector, self.priority, self.protocol)

    @classmethod
    def unpack(cls, data: bytes) -> App:
        if len(data) < _APP.size:
            raise DcbCodecError(f"dcb_app needs {_APP.size} bytes, got {len(data)}")
        return cls(*_APP.unpack_from(data))


@dataclass(frozen=True)
class Buffer:
    prio2buffer: tuple[int, ...] = (0,) * 8
    buffer_size: tuple[int, ...] = (0,) * 8
    total_size: int = 0

    def pack(self) -> bytes:
        if len(self.buffer_size) != 8:
            raise DcbCodecError("dcbnl_buffer needs 8 buffer sizes")
        return _BUF.pack(_arr(self.prio2buffer), *self.buffer_size, self.total_size)

    @classmethod
    def unpack(cls, data: bytes) -> Buffer:
        if len(data) < _BUF.size:
            raise DcbCodecError(f"dcbnl_buffer needs {_BUF.size} bytes, got {len(data)}")
        p2b, *rest = _BUF.unpack_from(data)
        return cls(tuple(p2b), tuple(rest[:8]), rest[8])


@dataclass(frozen=True)
class DcbState:
    """What a GET returned for one interface (None: the driver did not report it)."""

    ifname: str
    ets: Ets | None = None
    pfc: Pfc | None = None
    apps: tuple[App, ...] = ()
    buffer: Buffer | None = None
    trust: tuple[int, ...] | None = None
    dcbx: int | None = None
    maxrate: bytes | None = None
    extra: dict[str, bytes] = field(default_factory=dict)


# --- pyroute2 message classes ----------------------------------------------------------------


class _app_table(nla):
    nla_flags = NLA_F_NESTED  # libmnl's nest_start sets it; so do we (byte-for-byte with dcb)
    # DCB_ATTR_IEEE_APP holds an IEEE-selector dcb_app; DCB_ATTR_DCB_APP a non-IEEE one (PCP).
    nla_map = (
        (0, "DCB_ATTR_IEEE_APP_UNSPEC", "none"),
        (1, "DCB_ATTR_IEEE_APP", "cdata"),
        (2, "DCB_ATTR_DCB_APP", "cdata"),
    )


class _trust_table(nla):
    nla_flags = NLA_F_NESTED
    nla_map = (
        (0, "DCB_ATTR_IEEE_APP_UNSPEC", "none"),
        (1, "DCB_ATTR_IEEE_APP", "uint8"),
        (2, "DCB_ATTR_DCB_APP", "uint8"),
    )


class _ieee(nla):
    nla_flags = NLA_F_NESTED
    nla_map = (
        (0, "DCB_ATTR_IEEE_UNSPEC", "none"),
        (1, "DCB_ATTR_IEEE_ETS", "cdata"),
        (2, "DCB_ATTR_IEEE_PFC", "cdata"),
        (3, "DCB_ATTR_IEEE_APP_TABLE", "_app_table"),
        (4, "DCB_ATTR_IEEE_PEER_ETS", "cdata"),
        (5, "DCB_ATTR_IEEE_PEER_PFC", "cdata"),
        (6, "DCB_ATTR_IEEE_PEER_APP", "cdata"),
        (7, "DCB_ATTR_IEEE_MAXRATE", "cdata"),
        (8, "DCB_ATTR_IEEE_QCN", "cdata"),
        (9, "DCB_ATTR_IEEE_QCN_STATS", "cdata"),
        (10, "DCB_ATTR_DCB_BUFFER", "cdata"),
        (11, "DCB_ATTR_DCB_APP_TRUST_TABLE", "_trust_table"),
        (12, "DCB_ATTR_DCB_REWR_TABLE", "cdata"),
    )
    _app_table = _app_table
    _trust_table = _trust_table


class dcbmsg(nlmsg):
    """struct dcbmsg { __u8 dcb_family; __u8 cmd; __u16 dcb_pad; } + attributes."""

    fields = (("family", "B"), ("cmd", "B"), ("pad", "H"))
    nla_map = (
        (0, "DCB_ATTR_UNDEFINED", "none"),
        (1, "DCB_ATTR_IFNAME", "asciiz"),
        (2, "DCB_ATTR_STATE", "uint8"),
        (3, "DCB_ATTR_PFC_STATE", "cdata"),
        (4, "DCB_ATTR_PFC_CFG", "cdata"),
        (5, "DCB_ATTR_NUM_TC", "cdata"),
        (6, "DCB_ATTR_PG_CFG", "cdata"),
        (7, "DCB_ATTR_SET_ALL", "uint8"),
        (8, "DCB_ATTR_PERM_HWADDR", "cdata"),
        (9, "DCB_ATTR_CAP", "cdata"),
        (10, "DCB_ATTR_NUMTCS", "cdata"),
        (11, "DCB_ATTR_BCN", "cdata"),
        (12, "DCB_ATTR_APP", "cdata"),
        (13, "DCB_ATTR_IEEE", "_ieee"),
        (14, "DCB_ATTR_DCBX", "uint8"),
        (15, "DCB_ATTR_FEATCFG", "cdata"),
        (16, "DCB_ATTR_CEE", "cdata"),
    )
    _ieee = _ieee


# --- requests ---------------------------------------------------------------------------------


def _msg(msg_type: int, cmd: int, ifname: str, attrs: list[list[object]], seq: int, pid: int) -> bytes:
    m = dcbmsg()
    m["family"] = AF_UNSPEC
    m["cmd"] = cmd
    m["pad"] = 0
    m["attrs"] = [["DCB_ATTR_IFNAME", ifname], *attrs]
    m["header"]["type"] = msg_type
    m["header"]["flags"] = NLM_F_REQUEST | NLM_F_ACK
    m["header"]["sequence_number"] = seq
    m["header"]["pid"] = pid
    m.encode()
    return bytes(m.data[: m["header"]["length"]])


def encode_get(ifname: str, seq: int = 0, pid: int = 0) -> bytes:
    """IEEE_GET: the kernel answers with every IEEE attribute the driver has, plus DCBX."""
    return _msg(RTM_GETDCB, DCB_CMD_IEEE_GET, ifname, [], seq, pid)


def _ieee_set(ifname: str, cmd: int, inner: list[list[object]], seq: int, pid: int) -> bytes:
    return _msg(RTM_SETDCB, cmd, ifname, [["DCB_ATTR_IEEE", {"attrs": inner}]], seq, pid)


def encode_set_ets(ifname: str, ets: Ets, seq: int = 0, pid: int = 0) -> bytes:
    return _ieee_set(ifname, DCB_CMD_IEEE_SET, [["DCB_ATTR_IEEE_ETS", ets.pack()]], seq, pid)


def encode_set_pfc(ifname: str, pfc: Pfc, seq: int = 0, pid: int = 0) -> bytes:
    return _ieee_set(ifname, DCB_CMD_IEEE_SET, [["DCB_ATTR_IEEE_PFC", pfc.pack()]], seq, pid)


def encode_set_buffer(ifname: str, buf: Buffer, seq: int = 0, pid: int = 0) -> bytes:
    return _ieee_set(ifname, DCB_CMD_IEEE_SET, [["DCB_ATTR_DCB_BUFFER", buf.pack()]], seq, pid)


def _app_entries(apps: tuple[App, ...] | list[App]) -> list[list[object]]:
    return [
        ["DCB_ATTR_IEEE_APP" if a.selector in IEEE_SELECTORS else "DCB_ATTR_DCB_APP", a.pack()] for a in apps
    ]


def encode_app(
    ifname: str, apps: tuple[App, ...] | list[App], delete: bool = False, seq: int = 0, pid: int = 0
) -> bytes:
    """Add (IEEE_SET) or remove (IEEE_DEL) APP table entries."""
    cmd = DCB_CMD_IEEE_DEL if delete else DCB_CMD_IEEE_SET
    table = ["DCB_ATTR_IEEE_APP_TABLE", {"attrs": _app_entries(apps)}]
    return _ieee_set(ifname, cmd, [table], seq, pid)


def encode_trust(ifname: str, selectors: tuple[int, ...], seq: int = 0, pid: int = 0) -> bytes:
    entries = [["DCB_ATTR_IEEE_APP" if s in IEEE_SELECTORS else "DCB_ATTR_DCB_APP", s] for s in selectors]
    table = ["DCB_ATTR_DCB_APP_TRUST_TABLE", {"attrs": entries}]
    return _ieee_set(ifname, DCB_CMD_IEEE_SET, [table], seq, pid)


def encode_dcbx(ifname: str, mode: int, seq: int = 0, pid: int = 0) -> bytes:
    return _msg(RTM_SETDCB, DCB_CMD_SDCBX, ifname, [["DCB_ATTR_DCBX", mode]], seq, pid)


# --- replies ----------------------------------------------------------------------------------


def decode(data: bytes) -> dcbmsg:
    if len(data) < 20:
        raise DcbCodecError(f"a DCB message needs at least 20 bytes, got {len(data)}")
    m = dcbmsg(data)
    m.decode()
    return m


def state_from_msg(m: dcbmsg) -> DcbState:
    """Turn a decoded IEEE_GET reply (or a multicast notification) into a DcbState."""
    ifname = m.get_attr("DCB_ATTR_IFNAME") or ""
    dcbx = m.get_attr("DCB_ATTR_DCBX")
    ieee = m.get_attr("DCB_ATTR_IEEE")
    if ieee is None:
        return DcbState(ifname=ifname, dcbx=dcbx)
    ets_raw = ieee.get_attr("DCB_ATTR_IEEE_ETS")
    pfc_raw = ieee.get_attr("DCB_ATTR_IEEE_PFC")
    buf_raw = ieee.get_attr("DCB_ATTR_DCB_BUFFER")
    table = ieee.get_attr("DCB_ATTR_IEEE_APP_TABLE")
    apps: list[App] = []
    if table is not None:
        for name, value in ((a[0], a[1]) for a in table["attrs"]):
            if name in ("DCB_ATTR_IEEE_APP", "DCB_ATTR_DCB_APP"):
                apps.append(App.unpack(value))
    trust_tab = ieee.get_attr("DCB_ATTR_DCB_APP_TRUST_TABLE")
    trust = None
    if trust_tab is not None:
        trust = tuple(
            int(a[1]) for a in trust_tab["attrs"] if a[0] in ("DCB_ATTR_IEEE_APP", "DCB_ATTR_DCB_APP")
        )
    return DcbState(
        ifname=ifname,
        ets=None if ets_raw is None else Ets.unpack(ets_raw),
        pfc=None if pfc_raw is None else Pfc.unpack(pfc_raw),
        apps=tuple(sorted(apps)),
        buffer=None if buf_raw is None else Buffer.unpack(buf_raw),
        trust=trust,
        dcbx=dcbx,
        maxrate=ieee.get_attr("DCB_ATTR_IEEE_MAXRATE"),
    )
