"""Errors of the cluster service that clients must tell apart.

A client retrying a write needs to know whether the cluster may have applied it:
`NotLeader` means nothing was done (safe to retry elsewhere); `OutcomeUnknown` means the
command may or may not have been applied (record it as such; never assume either).
"""

from __future__ import annotations

from typing import Any

from nodeos.errors import NodeosError, OperationFailed, error_from_dict


class NotLeader(OperationFailed):
    """This node cannot take the request and did nothing with it."""

    code = "not_leader"


class OutcomeUnknown(OperationFailed):
    """The command may or may not have been applied (timeout, leader change, lost link)."""

    code = "unknown_outcome"


_CLASSES = {cls.code: cls for cls in (NotLeader, OutcomeUnknown)}


def remote_error(d: dict[str, Any]) -> NodeosError:
    """Rebuild an error from `{code, message, ...}`, keeping the cluster's own codes."""
    code = str(d.get("code", "failed"))
    cls = _CLASSES.get(code)
    if cls is not None:
        return cls(str(d.get("message", "")), field=d.get("field"), allowed=d.get("allowed"))
    return error_from_dict(d)


class PeerUnreachable(OperationFailed):
    """This node could not get an answer from a peer (down, cut off, or too slow)."""

    code = "peer_unreachable"


_CLASSES[PeerUnreachable.code] = PeerUnreachable
