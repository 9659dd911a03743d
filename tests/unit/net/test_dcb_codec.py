"""DCB codec: every attribute survives encode -> bytes -> decode, for any valid value."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from nodeos.net import dcb

u8 = st.integers(0, 255)
arr8 = st.tuples(*[u8] * 8)
prio_arr = st.tuples(*[st.integers(0, 7)] * 8)
u64s = st.tuples(*[st.integers(0, 2**64 - 1)] * 8)
u32s = st.tuples(*[st.integers(0, 2**32 - 1)] * 8)
ifnames = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=15)

ets_st = st.builds(dcb.Ets, u8, u8, u8, arr8, arr8, arr8, prio_arr, arr8, arr8, prio_arr)
pfc_st = st.builds(dcb.Pfc, u8, u8, u8, st.integers(0, 65535), u64s, u64s)
app_st = st.builds(
    dcb.App, st.sampled_from([*dcb.IEEE_SELECTORS, dcb.SEL_PCP]), st.integers(0, 7), st.integers(0, 65535)
)
buf_st = st.builds(dcb.Buffer, prio_arr, u32s, st.integers(0, 2**32 - 1))


def test_struct_sizes_match_the_kernel_uapi() -> None:
    assert len(dcb.Ets().pack()) == 59  # sizeof(struct ieee_ets)
    assert len(dcb.Pfc().pack()) == 136  # sizeof(struct ieee_pfc), u64 arrays 8-aligned
    assert len(dcb.App(5, 3, 26).pack()) == 4
    assert len(dcb.Buffer().pack()) == 44


def header(raw: bytes) -> tuple[int, int, int, int, int]:
    return struct.unpack_from("=IHHII", raw)


@given(ifname=ifnames, ets=ets_st, seq=st.integers(0, 2**32 - 1))
def test_ets_round_trip(ifname: str, ets: dcb.Ets, seq: int) -> None:
    raw = dcb.encode_set_ets(ifname, ets, seq=seq)
    length, mtype, flags, rseq, _pid = header(raw)
    assert (length, mtype, flags, rseq) == (len(raw), dcb.RTM_SETDCB, 5, seq)
    st_ = dcb.state_from_msg(dcb.decode(raw))
    assert st_.ifname == ifname and st_.ets == ets


@given(ifname=ifnames, pfc=pfc_st)
def test_pfc_round_trip(ifname: str, pfc: dcb.Pfc) -> None:
    st_ = dcb.state_from_msg(dcb.decode(dcb.encode_set_pfc(ifname, pfc)))
    assert st_.pfc == pfc
    assert st_.pfc is not None and st_.pfc.enabled == tuple(p for p in range(8) if pfc.pfc_en >> p & 1)


@given(ifname=ifnames, apps=st.lists(app_st, max_size=20), delete=st.booleans())
def test_app_table_round_trip(ifname: str, apps: list[dcb.App], delete: bool) -> None:
    raw = dcb.encode_app(ifname, apps, delete=delete)
    m = dcb.decode(raw)
    assert m["cmd"] == (dcb.DCB_CMD_IEEE_DEL if delete else dcb.DCB_CMD_IEEE_SET)
    assert dcb.state_from_msg(m).apps == tuple(sorted(apps))


@given(ifname=ifnames, buf=buf_st)
def test_buffer_round_trip(ifname: str, buf: dcb.Buffer) -> None:
    assert dcb.state_from_msg(dcb.decode(dcb.encode_set_buffer(ifname, buf))).buffer == buf


@given(
    ifname=ifnames,
    sels=st.lists(st.sampled_from([*dcb.IEEE_SELECTORS, dcb.SEL_PCP]), max_size=6, unique=True),
)
def test_trust_table_round_trip(ifname: str, sels: list[int]) -> None:
    assert dcb.state_from_msg(dcb.decode(dcb.encode_trust(ifname, tuple(sels)))).trust == tuple(sels)


@given(ifname=ifnames, mode=u8)
def test_dcbx_round_trip(ifname: str, mode: int) -> None:
    m = dcb.decode(dcb.encode_dcbx(ifname, mode))
    assert m["cmd"] == dcb.DCB_CMD_SDCBX
    assert dcb.state_from_msg(m).dcbx == mode


@given(ifname=ifnames)
def test_get_request(ifname: str) -> None:
    m = dcb.decode(dcb.encode_get(ifname, seq=7))
    assert m["header"]["type"] == dcb.RTM_GETDCB and m["cmd"] == dcb.DCB_CMD_IEEE_GET
    assert m.get_attr("DCB_ATTR_IFNAME") == ifname


@given(ets=ets_st, pfc=pfc_st, apps=st.lists(app_st, max_size=8), buf=buf_st, mode=u8)
def test_full_get_reply_decodes(
    ets: dcb.Ets, pfc: dcb.Pfc, apps: list[dcb.App], buf: dcb.Buffer, mode: int
) -> None:
    """A reply carrying every IEEE attribute at once (as a driver answers IEEE_GET)."""
    m = dcb.dcbmsg()
    m["cmd"] = dcb.DCB_CMD_IEEE_GET
    m["attrs"] = [
        ["DCB_ATTR_IFNAME", "ens1f0"],
        [
            "DCB_ATTR_IEEE",
            {
                "attrs": [
                    ["DCB_ATTR_IEEE_ETS", ets.pack()],
                    ["DCB_ATTR_IEEE_PFC", pfc.pack()],
                    [
                        "DCB_ATTR_IEEE_APP_TABLE",
                        {
                            "attrs": [
                                [
                                    "DCB_ATTR_IEEE_APP"
                                    if a.selector in dcb.IEEE_SELECTORS
                                    else "DCB_ATTR_DCB_APP",
                                    a.pack(),
                                ]
                                for a in apps
                            ]
                        },
                    ],
                    ["DCB_ATTR_DCB_BUFFER", buf.pack()],
                ]
            },
        ],
        ["DCB_ATTR_DCBX", mode],
    ]
    m["header"]["type"] = dcb.RTM_GETDCB
    m.encode()
    got = dcb.state_from_msg(dcb.decode(bytes(m.data[: m["header"]["length"]])))
    assert (got.ets, got.pfc, got.apps, got.buffer, got.dcbx) == (ets, pfc, tuple(sorted(apps)), buf, mode)


def test_truncated_structs_are_rejected() -> None:
    for cls, n in ((dcb.Ets, 58), (dcb.Pfc, 135), (dcb.App, 3), (dcb.Buffer, 43)):
        try:
            cls.unpack(b"\0" * n)
        except dcb.DcbCodecError:
            continue
        raise AssertionError(f"{cls.__name__} accepted {n} bytes")
