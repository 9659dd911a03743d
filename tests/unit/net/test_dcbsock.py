"""Parsing of the kernel's SET replies: the u8 status the driver returns."""

from __future__ import annotations

import struct

import pytest

from nodeos.net import dcb, dcbsock


def set_reply(cmd: int, attr: int, status: int) -> bytes:
    body = bytes([0, cmd, 0, 0]) + struct.pack("=HHB3x", 5, attr, status)
    return struct.pack("=IHHII", 16 + len(body), dcb.RTM_SETDCB, 0, 9, 0) + body


@pytest.mark.parametrize(
    ("cmd", "attr"), [(dcb.DCB_CMD_IEEE_SET, dcb.DCB_ATTR_IEEE), (dcb.DCB_CMD_SDCBX, dcb.DCB_ATTR_DCBX)]
)
@pytest.mark.parametrize("status", [0, 1])
def test_status_of_a_set_reply(cmd: int, attr: int, status: int) -> None:
    assert dcbsock._status(dcb.decode(set_reply(cmd, attr, status))) == status


def test_several_messages_in_one_datagram_are_split() -> None:
    one = set_reply(dcb.DCB_CMD_IEEE_SET, dcb.DCB_ATTR_IEEE, 0)
    got = list(dcbsock._messages(one + one))
    assert [(t, s) for t, s, _ in got] == [(dcb.RTM_SETDCB, 9), (dcb.RTM_SETDCB, 9)]
