"""Console requests applied once, though asked again (client sessions, Raft dissertation 6.3).

A control write whose outcome the console could not learn (the leader changed or the link to
it dropped before the answer) is asked again with the same request id. The map records the
outcome of the last MAX_REQUESTS ids with the index that applied them, so an id applied
already is answered from that record and never applied twice. The leader looks at the same
record after its read barrier, before it decides again: a second decision would refuse what
the first attempt did (e.g. "snapshot snap1 exists"). Pure and deterministic: the oldest
record goes by index, never by dict order (a restored map may order its dicts differently).
"""

from __future__ import annotations

import copy
from typing import Any

from nodeos.errors import BadInput

MAX_REQUESTS = 256  # a console asks again within seconds; 256 control writes is far longer
MAX_ID = 64


def empty_section() -> dict[str, Any]:
    return {"requests": {}}


def check_id(rid: Any) -> str:
    if not isinstance(rid, str) or not 1 <= len(rid) <= MAX_ID:
        raise BadInput(f"request id must be a string of 1 to {MAX_ID} characters", field="rid")
    return rid


def recorded(st: dict[str, Any], rid: str) -> dict[str, Any] | None:
    """The outcome an earlier apply of `rid` gave (`{index, result}` or `{index, error}`)."""
    return st.get("requests", {}).get(rid)


def record(st: dict[str, Any], rid: str, index: int, outcome: dict[str, Any]) -> None:
    # A copy: a result may be part of the map itself (a volume's record), which changes later.
    reqs = st.setdefault("requests", {})
    reqs[rid] = {"index": index, **copy.deepcopy(outcome)}
    if len(reqs) > MAX_REQUESTS:
        del reqs[min(reqs, key=lambda k: reqs[k]["index"])]
