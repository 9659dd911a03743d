"""Discovery referrals per transport on a REAL nvmf_tgt (marker `spdk`, issue 28). SPDK keeps
referrals for its whole discovery subsystem, not per port: setting a TCP port's referrals must
leave the RDMA ones alone, and back (the agent sets each transport's in turn)."""

from __future__ import annotations

import pytest

from nodeos.dataplane.base import Listener
from tests.spdk.conftest import SpdkTarget

pytestmark = pytest.mark.spdk

TCP_PORT = Listener("tcp", "127.0.0.1", "8009")
RDMA_PORT = Listener("rdma", "127.0.0.1", "8009")
TCP_REFS = (Listener("tcp", "10.0.0.2", "8009"), Listener("tcp", "10.0.0.3", "8009"))
RDMA_REFS = (Listener("rdma", "10.0.1.2", "8009"), Listener("rdma", "10.0.1.3", "8009"))


def test_each_transports_referrals_are_set_apart(spdk_target: SpdkTarget) -> None:
    dp = spdk_target.dp
    dp.set_referrals(TCP_PORT, TCP_REFS)
    dp.set_referrals(RDMA_PORT, RDMA_REFS)
    assert set(dp.list_referrals(TCP_PORT)) == set(TCP_REFS + RDMA_REFS)
    dp.set_referrals(TCP_PORT, TCP_REFS[:1])  # a TCP node left: RDMA's stay
    assert set(dp.list_referrals(TCP_PORT)) == {TCP_REFS[0], *RDMA_REFS}
    dp.set_referrals(RDMA_PORT, ())
    dp.set_referrals(TCP_PORT, ())
    assert dp.list_referrals(TCP_PORT) == []
