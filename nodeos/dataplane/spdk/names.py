"""How nodeos names its pools and volumes in SPDK: pool P is lvstore `nodeos_P`, volume V is lvol
`V`, addressed by its alias `nodeos_P/V`."""

from __future__ import annotations

from nodeos.dataplane.ids import check_id

LVS_PREFIX = "nodeos_"


def lvs_name(pool_id: str) -> str:
    return LVS_PREFIX + check_id(pool_id, "pool_id")


def alias(pool_id: str, vol_id: str, field: str = "vol_id") -> str:
    return f"{lvs_name(pool_id)}/{check_id(vol_id, field)}"
