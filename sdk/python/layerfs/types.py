"""The values the API returns, as dataclasses.

Each is built from the API's JSON by ``from_json``, which ignores fields it
does not know (so a newer daemon does not break an older SDK) and parses
times into timezone-aware datetimes.
"""

from __future__ import annotations

import base64
import dataclasses
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

T = TypeVar("T")


_FRACTION = re.compile(r"(\.\d{6})\d+")


def _time(v: Any) -> datetime | None:
    """An RFC 3339 time as Go writes it (nanoseconds, "Z"), on Python 3.9+."""
    if not isinstance(v, str) or not v:
        return None
    v = _FRACTION.sub(r"\1", v.replace("Z", "+00:00"))
    return datetime.fromisoformat(v)


def from_json(cls: type[T], d: dict[str, Any] | None) -> T:
    """Build dataclass ``cls`` from a JSON object, keeping known fields."""
    d = d or {}
    kw = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name == "raw":
            kw["raw"] = d
            continue
        key = f.metadata.get("json", f.name)
        if key not in d:
            continue
        v = d[key]
        conv = f.metadata.get("conv")
        kw[f.name] = conv(v) if conv else v
    return cls(**kw)


def _j(name: str | None = None, conv: Any = None, default: Any = None, factory: Any = None) -> Any:
    md = {}
    if name:
        md["json"] = name
    if conv:
        md["conv"] = conv
    if factory is not None:
        return field(default_factory=factory, metadata=md)
    return field(default=default, metadata=md)


@dataclass
class Version:
    """What the daemon says about itself (``Client.version()``)."""

    version: str = ""
    api: str = ""
    go_version: str = ""
    pid: int = 0
    store: str = ""


@dataclass
class Project:
    """A named history of commits."""

    name: str = ""
    created: datetime | None = _j(conv=_time)
    layers: int = 0
    branches: int = 0
    image: str = ""  # the image its workspaces get when they name none


@dataclass
class Branch:
    """A named, writable line of commits."""

    project: str = ""
    name: str = ""
    head: str = ""
    created: datetime | None = _j(conv=_time)
    updated: datetime | None = _j(conv=_time)


@dataclass
class CommitStats:
    files: int = 0
    dirs: int = 0
    bytes: int = 0
    changed: int = 0


@dataclass
class Commit:
    """An immutable snapshot of a tree."""

    id: str = ""
    root: str = ""
    parent: str = ""  # the first parent
    parents: list[str] = _j(factory=list)  # every parent, the first first: two or more for a merge
    message: str = ""
    author: str = ""
    time: datetime | None = _j(conv=_time)
    stats: CommitStats = _j(conv=lambda v: from_json(CommitStats, v), factory=CommitStats)


@dataclass
class Change:
    """One path that differs between two trees."""

    path: str = ""
    kind: str = ""  # added, removed, modified, type-changed
    old_type: str = ""
    new_type: str = ""


@dataclass
class OpStats:
    """One FUSE opcode's requests and the daemon's time serving them."""

    count: int = 0
    service_ns: int = 0


def _by_op(v: Any) -> dict[str, OpStats]:
    return {k: from_json(OpStats, o) for k, o in (v or {}).items()}


@dataclass
class FUSEStats:
    """FUSE requests served by the daemon, in total and by opcode."""

    requests: int = 0
    service_ns: int = 0
    by_op: dict[str, OpStats] = _j(conv=_by_op, factory=dict)
    service_p50_ns: int = 0


@dataclass
class UpperStats:
    """What a workspace's upper layer holds, or what an exec changed in it."""

    files: int = 0
    bytes: int = 0
    dirs: int = 0
    whiteouts: int = 0
    metacopies: int = 0
    copy_ups: int = 0


@dataclass
class SQLStats:
    """The Store's SQL work for one request."""

    statements: int = 0
    rows: int = 0
    transactions: int = 0
    tx_ns: int = 0


@dataclass
class QuotaUsage:
    """A workspace's quota and its use; ``full`` within 1 MiB (or 1%) of
    its bytes, or no inode left."""

    bytes: int = 0
    bytes_used: int = 0
    inodes: int = 0
    inodes_used: int = 0
    full: bool = False


@dataclass
class NetworkRule:
    """One thing a workspace with network ``egress`` may reach: exactly one
    of ``domain`` (a name, or ``*.suffix`` for its subdomains) and ``cidr``
    (an IPv4 prefix, which also admits the ranges no name does), on
    ``ports`` ("443", "8000-8100"; none: every port)."""

    domain: str = ""
    cidr: str = ""
    ports: list[str] = _j(factory=list)


def _rules(v: Any) -> list[NetworkRule]:
    return [r if isinstance(r, NetworkRule) else from_json(NetworkRule, r) for r in (v or [])]


@dataclass
class NetworkChange:
    """The body of ``ws.set_network()``: the new mode and, for egress, its
    rules."""

    mode: str = ""
    egress: list[NetworkRule] = _j(conv=_rules, factory=list)


@dataclass
class NetEvent:
    """One decision of a workspace's egress: a name asked (``proto``
    "dns") or a connection, ``verdict`` "allowed" or "denied" and why."""

    proto: str = ""
    name: str = ""
    address: str = ""
    port: int = 0
    verdict: str = ""
    reason: str = ""
    time: datetime | None = _j(conv=_time)


@dataclass
class NetUsage:
    """An exec's network on its receipt: the mode and, with egress, its
    connections and names allowed and denied and the bytes they carried."""

    mode: str = ""
    connections_allowed: int = 0
    connections_denied: int = 0
    names_allowed: int = 0
    names_denied: int = 0
    bytes_out: int = 0
    bytes_in: int = 0


@dataclass
class Receipt:
    """What an exec or a commit cost, as the daemon measured it, counted on
    the request's own account: work other requests did meanwhile is not on
    it. ``shared_mount``: another exec of the workspace ran at the same
    time, and the FUSE work of both while they overlapped is on neither.

    ``raw`` keeps the whole receipt as the daemon sent it.
    """

    wall_ns: int = 0
    command_ns: int = 0
    launch_ns: int = 0
    capture_ns: int = 0
    fuse: FUSEStats = _j(conv=lambda v: from_json(FUSEStats, v), factory=FUSEStats)
    upper: UpperStats = _j(conv=lambda v: from_json(UpperStats, v), factory=UpperStats)
    sql: SQLStats = _j(conv=lambda v: from_json(SQLStats, v), factory=SQLStats)
    upper_bytes: int = 0
    store_bytes_written: int = 0
    store_bytes_read: int = 0
    cache_bytes_written: int = 0
    new_objects: int = 0
    reused_objects: int = 0
    new_bytes: int = 0
    reused_bytes: int = 0
    platform: str = ""
    image: str = ""  # NAME@DIGEST of the workspace's image, if it has one
    user_namespace: str = ""  # the command's uid_map, or "none: " and why
    quota: QuotaUsage | None = _j(conv=lambda v: from_json(QuotaUsage, v) if v else None)
    shared_mount: bool = False
    network: NetUsage | None = _j(conv=lambda v: from_json(NetUsage, v) if v else None)
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def wall_ms(self) -> float:
        return self.wall_ns / 1e6

    @property
    def fuse_requests(self) -> int:
        return self.fuse.requests


def _receipt(v: Any) -> Receipt | None:
    return from_json(Receipt, v) if v else None


@dataclass
class MergeInfo:
    """How a commit with ``merge=True`` was merged: the workspace's own
    commit (the merge's second parent), the merge bases, the merges made."""

    own: str = ""
    bases: list[str] = _j(factory=list)
    tries: int = 0


@dataclass
class CommitResult:
    """The answer to a commit: ``result`` is ``created``, ``up-to-date``,
    ``head-moved`` (then ``commit`` is stored but not on the branch, whose
    head is ``head``), or ``merged`` (a commit with ``merge=True``: the
    merge is the head, ``merge`` tells what was merged)."""

    commit: str = ""
    result: str = ""
    head: str = ""
    merge: MergeInfo | None = _j(conv=lambda v: from_json(MergeInfo, v) if v else None)
    receipt: Receipt | None = _j(conv=_receipt)

    @property
    def created(self) -> bool:
        return self.result == "created"


@dataclass
class Node:
    """A host of a fleet (daemons sharing one Store), as a ``Misdirected``
    error names it."""

    name: str = ""
    address: str = ""  # where its daemon answers (tcp://HOST:PORT); "" when it advertises none
    seen: datetime | None = _j(conv=_time)  # its last heartbeat
    live: bool = False  # heard from within the heartbeat's expiry


@dataclass
class ShareRequest:
    """A request for a share of a workspace's port (``public``: a token
    anyone can guess, the workspace's id and the port)."""

    port: int = 0
    public: bool = False


@dataclass
class PortShare:
    """A share of a workspace's port: ``url`` (on the daemon's TCP listener)
    reaches the port with ``token`` as its authority, until it is revoked
    or the workspace ends."""

    workspace: str = ""
    port: int = 0
    token: str = ""
    path: str = ""  # /share/TOKEN/
    url: str = ""  # "" when the daemon has no TCP listener
    public: bool = False
    created: datetime | None = _j(conv=_time)


@dataclass
class Owner:
    """A host user: the one a workspace's mount path is for."""

    uid: int = 0
    gid: int = 0


def _owner(d: Any) -> Owner:
    return d if isinstance(d, Owner) else from_json(Owner, d)


@dataclass
class WorkspaceInfo:
    """A workspace as the daemon describes it."""

    id: str = ""
    project: str = ""
    branch: str = ""
    base: str = ""
    head: str = ""
    mount_path: str = ""
    platform: str = ""
    network: str = ""  # none, egress or host
    egress: list[NetworkRule] = _j(conv=_rules, factory=list)  # with network egress: its rules
    state: str = ""
    native: bool = False
    created: datetime | None = _j(conv=_time)
    node: str = ""  # on a shared Store: the host that serves it
    node_address: str = ""  # in a listing of all hosts': that host's address
    data_path: str = ""
    durability: str = ""  # "commit" or "fsync"; "" for a native workspace
    owner: Owner | None = _j(conv=lambda d: _owner(d))  # the mount path's host user, where it is a view
    host_view: str = ""  # how the view serves file data: "passthrough" or "daemon: why"
    image: str = ""  # NAME@DIGEST of the image its root lies over; "" for the platform's runtime
    receipt: Receipt | None = _j(conv=_receipt)  # on a create or a remount: what mounting cost


@dataclass
class ConflictSide:
    """One side of a conflict: its path (a rename moves it) and what it
    holds there (``type`` "" where it has nothing)."""

    path: str = ""
    type: str = ""
    mode: int = 0
    object: str = ""
    target: str = ""


def _side(v: Any) -> ConflictSide:
    return from_json(ConflictSide, v)


@dataclass
class Conflict:
    """A path a merge could not decide. ``kind`` is content, binary,
    add/add, modify/delete, file/directory, type, symlink, special,
    metadata, rename/rename or rename/delete; ``markers`` says the
    workspace's file holds conflict markers (an update with
    ``conflict_markers``); ``moved`` is where a file/directory conflict put
    the file."""

    path: str = ""
    kind: str = ""
    base: ConflictSide = _j(conv=_side, factory=ConflictSide)
    ours: ConflictSide = _j(conv=_side, factory=ConflictSide)
    theirs: ConflictSide = _j(conv=_side, factory=ConflictSide)
    markers: bool = False
    moved: str = ""


def _conflicts(v: Any) -> list[Conflict]:
    return [from_json(Conflict, c) for c in v or []]


@dataclass
class WorkspaceStatus(WorkspaceInfo):
    """A workspace with its uncommitted changes and disk use, and the
    conflicts an update left, not resolved yet (a commit is refused until
    they are)."""

    changes: list[Change] = _j(conv=lambda v: [from_json(Change, c) for c in v or []], factory=list)
    conflicts: list[Conflict] = _j(conv=_conflicts, factory=list)
    upper_bytes: int = 0
    upper: UpperStats = _j(conv=lambda v: from_json(UpperStats, v), factory=UpperStats)
    fuse: FUSEStats = _j(conv=lambda v: from_json(FUSEStats, v), factory=FUSEStats)


@dataclass
class MergeResult:
    """The answer to a merge: ``result`` is ``fast-forward``, ``merged`` or
    ``up-to-date`` (conflicts raise ``Conflict``); ``commit`` is the merge
    commit, the source (fast-forward) or the head that holds it."""

    result: str = ""
    commit: str = ""
    head: str = ""
    tree: str = ""
    bases: list[str] = _j(factory=list)
    tries: int = 0
    dry_run: bool = False
    paths: int = 0
    receipt: Receipt | None = _j(conv=_receipt)


@dataclass
class UpdateResult:
    """The answer to an update: ``result`` is ``updated`` or
    ``up-to-date``; ``head`` the workspace's head after; ``conflicts``
    those left in it with markers."""

    result: str = ""
    head: str = ""
    bases: list[str] = _j(factory=list)
    changed: int = 0
    conflicts: list[Conflict] = _j(conv=_conflicts, factory=list)
    receipt: Receipt | None = _j(conv=_receipt)


@dataclass
class FileInfo:
    """One path of a workspace (``type``: file, dir, symlink, fifo, socket,
    char or block; a symlink is described, never followed)."""

    path: str = ""
    type: str = ""
    size: int = 0
    mode: int = 0
    mtime: datetime | None = _j(conv=_time)
    target: str = ""

    @property
    def is_dir(self) -> bool:
        return self.type == "dir"

    @property
    def is_file(self) -> bool:
        return self.type == "file"


def _b64(v: Any) -> bytes:
    return base64.b64decode(v) if v else b""


@dataclass
class ExecResult:
    """What a command returned. ``stdout`` and ``stderr`` are text (invalid
    UTF-8 replaced); the raw bytes are in ``stdout_bytes``/``stderr_bytes``.
    A non-zero ``exit_code`` is a result, not an exception."""

    exit_code: int = 0
    signal: str = ""
    timed_out: bool = False
    output_truncated: bool = False
    stdout_bytes: bytes = _j("stdout", conv=_b64, default=b"")
    stderr_bytes: bytes = _j("stderr", conv=_b64, default=b"")
    receipt: Receipt = _j(conv=lambda v: from_json(Receipt, v), factory=Receipt)

    @property
    def stdout(self) -> str:
        return self.stdout_bytes.decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        return self.stderr_bytes.decode("utf-8", "replace")

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


@dataclass
class FileEvent:
    """One change in a workspace, from ``ws.watch()``: ``kind`` is
    ``created``, ``modified``, ``removed`` or ``renamed`` (``old_path`` is
    where it was); ``dropped`` (``count`` changes were not sent because the
    reader was behind) and ``overflow`` (the kernel lost changes) say that
    a mirror of the tree should be rebuilt; ``ended`` comes last when the
    workspace ends."""

    kind: str = ""
    path: str = ""
    old_path: str = ""
    type: str = ""
    size: int = 0
    count: int = 0
    time: datetime | None = _j(conv=_time)
    net: NetEvent | None = _j(conv=lambda v: from_json(NetEvent, v) if v else None)  # kind "net": an egress decision
    service: Service | None = _j(conv=lambda v: from_json(Service, v) if v else None)


@dataclass
class ImageLayer:
    """One layer of an image, the lowest first: a commit of the image's
    tree after it."""

    diff_id: str = ""
    digest: str = ""
    size: int = 0
    commit: str = ""


@dataclass
class ImageConfig:
    """What of an image's config a workspace's execs use."""

    env: list[str] = field(default_factory=list)
    working_dir: str = ""
    user: str = ""
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)


@dataclass
class Image:
    """A container image kept in the Store; ``digest`` is its OCI config's
    (Docker's image ID)."""

    name: str = ""
    digest: str = ""
    commit: str = ""
    created: datetime | None = _j(conv=_time)
    source: str = ""
    manifest_digest: str = ""
    layers: list[ImageLayer] = _j(conv=lambda v: [from_json(ImageLayer, x) for x in v or []], factory=list)
    config: ImageConfig = _j(conv=lambda v: from_json(ImageConfig, v), factory=ImageConfig)
    files: int = 0
    bytes: int = 0

    @property
    def ref(self) -> str:
        """NAME@DIGEST: this image, pinned."""
        return f"{self.name}@{self.digest}"


@dataclass
class ImageStats:
    """What an image operation cost: layers (read: not stored before),
    uncompressed bytes read, new chunks and bytes, the Store's growth."""

    layers: int = 0
    layers_read: int = 0
    bytes: int = 0
    new_chunks: int = 0
    new_bytes: int = 0
    store_growth: int = 0
    wall_ns: int = 0


@dataclass
class BuildStep:
    """One instruction of a build: cached or run, and a RUN's exit code and
    output's tail."""

    instruction: str = ""
    cached: bool = False
    wall_ns: int = 0
    exit_code: int = 0
    output: str = ""


@dataclass
class ImageResult:
    """What an import, a pull, a push, a build or an image commit made, and
    what it cost."""

    image: Image = _j(conv=lambda v: from_json(Image, v), factory=Image)
    stats: ImageStats = _j(conv=lambda v: from_json(ImageStats, v), factory=ImageStats)
    steps: list[BuildStep] = _j(conv=lambda v: [from_json(BuildStep, x) for x in v or []], factory=list)
    pushed: str = ""


@dataclass
class Service:
    """A service of a workspace: a command kept running in its sandbox
    beside its execs. ``state`` is ``running``, ``restarting`` or
    ``ended``; once it has ended, ``exit_code``, ``signal`` and ``reason``
    (``exited``, ``signaled``, ``oom``, ``stopped``, ``sandbox_ended``,
    ``daemon_restart``, ``start_failed``) say how."""

    name: str = ""
    argv: list[str] = _j(factory=list)
    restart: str = ""
    state: str = ""
    pid: int = 0
    started: datetime | None = _j(conv=_time)
    restarts: int = 0
    ended: datetime | None = _j(conv=_time)
    exit_code: int | None = None
    signal: str = ""
    reason: str = ""


@dataclass
class ServiceList:
    """The services of a workspace."""

    services: list[Service] = _j(conv=lambda v: [from_json(Service, x) for x in v or []], factory=list)
