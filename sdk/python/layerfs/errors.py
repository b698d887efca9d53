"""Typed errors, one class per error code of the LayerFS API.

Every failed call raises a :class:`LayerFSError`; its subclass tells what
went wrong (``except layerfs.NotFound``), ``code`` is the API's error code
and ``message`` its explanation.
"""

from __future__ import annotations

from typing import Any

from .types import Conflict as ConflictInfo
from .types import Node, from_json

__all__ = [
    "LayerFSError",
    "InvalidArgument",
    "Unauthorized",
    "NotFound",
    "AlreadyExists",
    "HeadMoved",
    "UncommittedChanges",
    "Busy",
    "TooLarge",
    "Unavailable",
    "InternalError",
    "NoSpace",
    "Misdirected",
    "Conflict",
    "DaemonUnreachable",
    "DaemonLost",
    "error_for",
]


class LayerFSError(Exception):
    """An error answered by layerfsd (or met on the way to it)."""

    code = "internal"

    def __init__(self, message: str, code: str | None = None, status: int | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.status = status

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class InvalidArgument(LayerFSError):
    """A malformed request: bad name, ref, path (``..`` above the root), value (400)."""

    code = "invalid_argument"


class Unauthorized(LayerFSError):
    """A missing or wrong bearer token on a TCP listener (401)."""

    code = "unauthorized"


class NotFound(LayerFSError):
    """No such project, branch, ref, workspace or file (404)."""

    code = "not_found"


class AlreadyExists(LayerFSError):
    """The project or branch exists already (409)."""

    code = "already_exists"


class HeadMoved(LayerFSError):
    """Another commit reached the branch first (409)."""

    code = "head_moved"


class UncommittedChanges(LayerFSError):
    """The workspace holds changes that ending it would drop (409)."""

    code = "uncommitted_changes"


class Busy(LayerFSError):
    """The workspace is busy with another operation (409)."""

    code = "busy"


class TooLarge(LayerFSError):
    """An upload past the daemon's limit (413)."""

    code = "too_large"


class Unavailable(LayerFSError):
    """The daemon is shutting down, or a platform is not available (503)."""

    code = "unavailable"


class InternalError(LayerFSError):
    """A failure inside the daemon; its log has the details (500)."""

    code = "internal"


class NoSpace(LayerFSError):
    """A file system of the Store or of a workspace is full (507); nothing
    was published."""

    code = "no_space"


class Misdirected(LayerFSError):
    """On a fleet, another host serves the workspace (421); nothing was done.
    ``node`` names that host (``name``, ``address``, ``live``). A workspace
    handle sends the request there once by itself; this is raised when it
    cannot (the host advertises no address, is not live, or the request's
    body was a stream already sent) or when that host too answers
    misdirected."""

    code = "misdirected"

    def __init__(self, message: str, code: str | None = None, status: int | None = None, node: Node | None = None):
        super().__init__(message, code=code, status=status)
        self.node = node


class Conflict(LayerFSError):
    """A merge (of branches, a commit with ``merge=True``, an update) found
    paths it cannot decide and published nothing (409). ``conflicts`` lists
    them (:class:`layerfs.types.Conflict`: path, kind, the three sides)."""

    code = "conflict"

    def __init__(self, message: str, code: str | None = None, status: int | None = None,
                 conflicts: list[ConflictInfo] | None = None):
        super().__init__(message, code=code, status=status)
        self.conflicts = conflicts or []


class DaemonLost(LayerFSError):
    """The connection broke during the call (the daemon crashed or was
    killed): its outcome is unknown. A restarted daemon recovers the
    workspace; look before retrying what is not idempotent."""

    code = "daemon_lost"


class PortUnreachable(LayerFSError):
    """Nothing listens on the workspace's port (502): the message names
    it."""

    code = "port_unreachable"


class DaemonUnreachable(LayerFSError):
    """No daemon answers at the address (not started, or gone)."""

    code = "unreachable"


_BY_CODE = {
    cls.code: cls
    for cls in (InvalidArgument, Unauthorized, NotFound, AlreadyExists, HeadMoved,
                UncommittedChanges, Busy, TooLarge, Unavailable, InternalError, NoSpace, Misdirected, Conflict,
                PortUnreachable)
}

_BY_STATUS = {400: InvalidArgument, 401: Unauthorized, 404: NotFound, 409: Busy,
              413: TooLarge, 421: Misdirected, 502: PortUnreachable, 503: Unavailable, 507: NoSpace}


def error_for(code: str | None, message: str, status: int | None = None,
              node: dict[str, Any] | None = None, conflicts: list[dict[str, Any]] | None = None) -> LayerFSError:
    """The typed error for an API error code (or, without one, an HTTP
    status); ``node`` is a misdirected answer's host, ``conflicts`` a
    conflict's paths."""
    cls = _BY_CODE.get(code or "") or _BY_STATUS.get(status or 0, InternalError)
    if cls is Misdirected:
        return Misdirected(message, code=code or cls.code, status=status, node=from_json(Node, node) if node else None)
    if cls is Conflict:
        return Conflict(message, code=code or cls.code, status=status,
                        conflicts=[from_json(ConflictInfo, c) for c in conflicts or []])
    return cls(message, code=code or cls.code, status=status)
