"""DCB over a NETLINK_ROUTE socket: send one request, collect its reply and ACK.

A plain AF_NETLINK socket carries the bytes from dcb.py, so the same code runs against
any pyroute2 version. Must be called in the target namespace (see netns.run_in).
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from collections.abc import Callable, Iterator

from nodeos.errors import NotSupported, OperationFailed
from nodeos.net import dcb

NLMSG_ERROR = 2
NLMSG_DONE = 3
SOL_NETLINK = 270
NETLINK_ADD_MEMBERSHIP = 1
_HDR = struct.Struct("=IHHII")


class NoDcbSupport(NotSupported):
    """The interface's driver implements no DCB operations (e.g. veth, virtio)."""


def _messages(buf: bytes) -> Iterator[tuple[int, int, bytes]]:
    off = 0
    while off + _HDR.size <= len(buf):
        length, mtype, _flags, seq, _pid = _HDR.unpack_from(buf, off)
        if length < _HDR.size:
            break
        yield mtype, seq, buf[off : off + length]
        off += (length + 3) & ~3


class DcbSocket:
    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        self.sock.bind((0, 0))
        self.sock.settimeout(5.0)
        self.seq = int.from_bytes(os.urandom(3), "big")

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> DcbSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, build: Callable[[int], bytes], ifname: str, what: str) -> list[dcb.dcbmsg]:
        """Send build(seq); return the DCB replies; raise on a kernel error."""
        self.seq += 1
        seq = self.seq
        self.sock.send(build(seq))
        replies: list[dcb.dcbmsg] = []
        while True:
            data = self.sock.recv(65536)
            for mtype, mseq, raw in _messages(data):
                if mseq != seq:
                    continue
                if mtype == NLMSG_ERROR:
                    code = -struct.unpack_from("=i", raw, _HDR.size)[0]
                    if code == 0:
                        return replies
                    if code in (errno.EOPNOTSUPP, errno.ENOTSUP):
                        raise NoDcbSupport(
                            f"this NIC has no DCB support: interface {ifname} rejected {what} "
                            "(the driver implements no DCB netlink operations)",
                            field="interfaces.name",
                        )
                    if code == errno.ENODEV:
                        raise OperationFailed(f"interface {ifname} does not exist", field="interfaces.name")
                    raise OperationFailed(f"{what} on {ifname} failed: {os.strerror(code)}")
                if mtype == NLMSG_DONE:
                    return replies
                if mtype in (dcb.RTM_GETDCB, dcb.RTM_SETDCB):
                    replies.append(dcb.decode(raw))

    def get(self, ifname: str) -> dcb.DcbState:
        replies = self.request(lambda s: dcb.encode_get(ifname, s), ifname, "DCB read")
        if not replies:
            raise OperationFailed(f"DCB read on {ifname}: no reply")
        return dcb.state_from_msg(replies[0])

    def set(self, ifname: str, build: Callable[[int], bytes], what: str) -> None:
        replies = self.request(build, ifname, what)
        for r in replies:
            status = _status(r)
            if status:
                raise OperationFailed(f"{what} on {ifname}: the driver refused it (status {status})")


def _status(m: dcb.dcbmsg) -> int:
    """The u8 a SET reply carries in DCB_ATTR_IEEE / DCB_ATTR_DCBX (0 = accepted)."""
    raw = bytes(m.data[: m["header"]["length"]])
    off = _HDR.size + 4
    while off + 4 <= len(raw):
        alen, atype = struct.unpack_from("=HH", raw, off)
        if alen < 4:
            break
        if atype & 0x3FFF in (dcb.DCB_ATTR_IEEE, dcb.DCB_ATTR_DCBX) and alen == 5:
            return raw[off + 4]
        off += (alen + 3) & ~3
    return 0


def subscribe_socket() -> socket.socket:
    """A socket on the DCB multicast group: drivers and other agents announce changes there."""
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    s.bind((0, 0))
    s.setsockopt(SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, dcb.RTNLGRP_DCB)
    return s


def notifications(data: bytes) -> list[dcb.DcbState]:
    return [
        dcb.state_from_msg(dcb.decode(raw))
        for mtype, _seq, raw in _messages(data)
        if mtype in (dcb.RTM_GETDCB, dcb.RTM_SETDCB)
    ]
