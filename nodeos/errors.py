"""Errors shared by the daemon, the CLI and the lab.

The CLI maps them onto exit codes: BadInput -> 2, EnvironmentProblem -> 1,
OperationFailed -> 1. Every error that a user can cause names the field at fault
and, where it makes sense, the values that are allowed.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the console's start-up
if TYPE_CHECKING:
    from typing import Any

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2


class NodeosError(Exception):
    """Base class: a failure with a message meant for an operator."""

    code = "failed"
    exit_code = EXIT_FAILED

    def __init__(self, message: str, *, field: str | None = None, allowed: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.allowed = allowed

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            out["field"] = self.field
        if self.allowed is not None:
            out["allowed"] = self.allowed
        return out


class BadInput(NodeosError):
    """The request itself is wrong; nothing was changed."""

    code = "bad_input"
    exit_code = EXIT_BAD_INPUT


class NotFound(BadInput):
    """A named object (volume, pool, host, VM...) does not exist."""

    code = "not_found"


class AlreadyExists(BadInput):
    code = "already_exists"


class OperationFailed(NodeosError):
    """A valid request that could not be carried out."""

    code = "failed"


class EnvironmentProblem(NodeosError):
    """The machine lacks something (a tool, a kernel module, permissions)."""

    code = "environment"


class NotSupported(OperationFailed):
    """The chosen backend cannot do this (e.g. QoS on the kernel data plane)."""

    code = "not_supported"


class CorruptState(OperationFailed):
    """A stored record failed its checksum or does not decode: never used, reported."""

    code = "corrupt_record"


class NoSpace(OperationFailed):
    """The node's state could not be written: its file system (or LMDB map) is full."""

    code = "no_space"


_BY_CODE: dict[str, type[NodeosError]] = {
    cls.code: cls
    for cls in (
        NodeosError,
        BadInput,
        NotFound,
        AlreadyExists,
        OperationFailed,
        EnvironmentProblem,
        NotSupported,
        CorruptState,
        NoSpace,
    )
}


# Codes of BadInput subclasses defined elsewhere (a client need not import their modules):
# they keep exit code 2 end to end.
FOREIGN_BAD_INPUT_CODES = frozenset({"placement_refused", "bundle_refused"})


def error_from_dict(d: dict[str, Any]) -> NodeosError:
    """Rebuild an error sent over RPC as `{code, message, field?, allowed?}`.

    A code this module has no class for (e.g. the cluster's `not_leader`, `unknown_outcome`)
    is kept as it came: a script must be able to tell "nothing done" from "may be applied".
    """
    code = str(d.get("code", "failed"))
    cls = _BY_CODE.get(code, BadInput if code in FOREIGN_BAD_INPUT_CODES else OperationFailed)
    err = cls(str(d.get("message", "unknown error")), field=d.get("field"), allowed=d.get("allowed"))
    if code != cls.code:
        err.code = code
    return err
