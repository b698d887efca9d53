"""The synchronous client: ``Client`` and the handles it returns.

A workspace's lifecycle::

    client.workspaces.create(...) -> exec, files ... -> commit (any number of times) -> end

A workspace never commits implicitly; ``end`` refuses to drop uncommitted
changes unless ``discard=True``. Leaving a ``with`` block ends the
workspace and drops what was not committed (commit inside the block to
keep it).
"""

from __future__ import annotations

import base64
import codecs
import json
import math
import os
import socket
import threading
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from . import _archive
from ._attach import PROTOCOL as ATTACH_PROTOCOL
from ._attach import Attached, BytesCallback
from ._ports import PROTOCOL as PORT_PROTOCOL
from ._ports import PortConnection, PortForward
from ._transport import API_VERSION, Transport, default_address, default_store, start_daemon
from .errors import DaemonLost, DaemonUnreachable, InvalidArgument, LayerFSError, Misdirected, error_for
from .types import (Branch, Change, Commit, CommitResult, Conflict, ExecResult, FileEvent, FileInfo, Image, ImageResult,
                    MergeResult, NetworkRule, PortShare, Project, Service, ServiceList, UpdateResult, Version,
                    WorkspaceInfo, WorkspaceStatus, from_json)

__all__ = ["Client", "Workspace", "Files", "Projects", "Workspaces", "Branches", "Images", "EventStream", "OutputCallback",
           "Attached"]

#: Receives a command's output as it comes, as text (each stream decoded
#: incrementally, so a character split between chunks arrives whole).
OutputCallback = Callable[[str], Any]

NDJSON = "application/x-ndjson"


def _seg(s: str) -> str:
    return urllib.parse.quote(s, safe="")


def _file_path(p: str) -> str:
    # A leading "/" names the workspace root (the daemon's rule for every
    # workspace path); ".." above the root is left for the daemon to refuse.
    return "/".join(urllib.parse.quote(s, safe="") for s in p.lstrip("/").split("/"))


class Client:
    """A connection to one layerfsd.

    ``Client()`` finds the daemon as the ``layerfs`` CLI does:
    ``$LAYERFS_DAEMON`` (with ``$LAYERFS_TOKEN`` for TCP) when set, else the
    socket of the default Store (``$LAYERFS_HOME`` or
    ``~/.local/share/layerfs``), starting that daemon with ``layerfs daemon
    start`` when none answers (``autostart``). ``address`` is
    ``unix:///path/to/layerfsd.sock`` or ``http://host:port``.

    The client is safe to share between threads; close it (or use it as a
    context manager) to drop its idle connections.

    On a fleet (daemons on many hosts sharing one Store), a workspace lives
    on one host, and a daemon asked for another host's workspace answers
    misdirected, naming that host and its address: a ``Workspace`` handle
    then sends the request there once, with the same token, and goes there
    directly from then on (as the Go SDK does).
    """

    def __init__(self, address: str | None = None, *, token: str | None = None,
                 timeout: float | None = 300.0, autostart: bool = True):
        own = False
        if address is None:
            address, own = default_address()
        if token is None:
            token = os.environ.get("LAYERFS_TOKEN") or None
        self._t = Transport(address, token=token, timeout=timeout)
        self._peers: dict[str, Transport] = {}  # other hosts' daemons, by advertised address
        self._peers_lock = threading.Lock()
        try:
            self._version = self._hello()
        except DaemonUnreachable:
            if not (own and autostart):
                raise
            start_daemon(default_store())
            self._version = self._hello()
        self.projects = Projects(self)
        self.workspaces = Workspaces(self)
        self.branches = Branches(self)
        self.images = Images(self)

    def _hello(self) -> Version:
        v = from_json(Version, self._t.request("GET", "/v1/version").json())
        if v.api != API_VERSION:
            raise LayerFSError(f"the daemon speaks API {v.api!r}, this SDK {API_VERSION!r}", code="unavailable")
        return v

    @property
    def address(self) -> str:
        return self._t.address

    def version(self) -> Version:
        """What the daemon reported when the client connected."""
        return self._version

    def close(self) -> None:
        """Drop the idle connections."""
        self._t.close()
        with self._peers_lock:
            peers, self._peers = list(self._peers.values()), {}
        for t in peers:
            t.close()

    def _peer(self, address: str) -> Transport:
        """The connections to another host's daemon, at the address it
        advertises, with this client's token and timeout."""
        with self._peers_lock:
            t = self._peers.get(address)
            if t is None:
                t = self._peers[address] = Transport(address, token=self._t.token, timeout=self._t.timeout)
            return t

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _json(self, method: str, path: str, *, query: Mapping[str, Any] | None = None, body: Any = None) -> Any:
        return self._t.request(method, path, query=dict(query or {}), json_body=body).json()

    def log(self, project: str, ref: str = "main", limit: int | None = None, *,
            after: str | None = None) -> list[Commit]:
        """Commits reachable from ``ref`` through every parent, newest first
        (a commit before its ancestors); ``limit`` caps them (None is the
        daemon's default) and ``after`` (the id of the last commit of the
        page before) pages on."""
        got = self._json("GET", f"/v1/projects/{_seg(project)}/log", query={"ref": ref, "after": after, "limit": limit})
        return [from_json(Commit, c) for c in got or []]

    def merge(self, project: str, source: str, *, into: str = "main", message: str | None = None,
              author: str | None = None, dry_run: bool = False, prefer: str | None = None,
              rename_threshold: int = 0, no_renames: bool = False) -> MergeResult:
        """Merge the ref ``source`` into the branch ``into``: fast-forward,
        merged (a commit whose parents are the head and the source) or
        up-to-date, published by compare-and-swap. Conflicts publish
        nothing and raise :class:`layerfs.Conflict`; ``prefer`` ("ours":
        ``into``'s, or "theirs") settles every conflict by that side.
        Renames are found by similarity, git's 50% by default:
        ``rename_threshold`` (percent; 100: exact only) sets another,
        ``no_renames`` finds none."""
        body: dict[str, Any] = {"source": source, "into": into}
        for k, v in (("message", message), ("author", author), ("prefer", prefer),
                     ("rename_threshold", rename_threshold)):
            if v:
                body[k] = v
        if dry_run:
            body["dry_run"] = True
        if no_renames:
            body["no_renames"] = True
        return from_json(MergeResult, self._json("POST", f"/v1/projects/{_seg(project)}/merges", body=body))

    def diff(self, project: str, from_ref: str, to_ref: str) -> list[Change]:
        """Every path that differs from ``from_ref`` to ``to_ref``."""
        out: list[Change] = []
        cursor = None
        while True:
            page = self._json("GET", f"/v1/projects/{_seg(project)}/diff",
                              query={"from": from_ref, "to": to_ref, "cursor": cursor})
            out += [from_json(Change, c) for c in page.get("changes") or []]
            cursor = page.get("next")
            if not cursor:
                return out

    def commit(self, project: str, ref: str) -> Commit:
        """The commit a ref names."""
        return from_json(Commit, self._json("GET", f"/v1/projects/{_seg(project)}/commits/{_seg(ref)}"))


class Projects:
    """``client.projects``: named histories."""

    def __init__(self, c: Client):
        self._c = c

    def create(self, name: str, *, from_path: str | None = None, message: str | None = None) -> Project:
        """Create a project with branch ``main``, empty or from a directory
        on the daemon's host."""
        body = {"name": name}
        if from_path:
            body["from_path"] = from_path
        if message:
            body["message"] = message
        return from_json(Project, self._c._json("POST", "/v1/projects", body=body))

    def list(self) -> list[Project]:
        return [from_json(Project, p) for p in self._c._json("GET", "/v1/projects") or []]

    def get(self, name: str) -> Project:
        return from_json(Project, self._c._json("GET", f"/v1/projects/{_seg(name)}"))

    def set_image(self, name: str, image: str | None) -> Project:
        """Name the image (NAME or NAME@DIGEST) the project's workspaces
        get when they name none; None or "" for none."""
        return from_json(Project, self._c._json("PUT", f"/v1/projects/{_seg(name)}/image", body={"image": image or ""}))


def _image_path(ref: str) -> str:
    return "/v1/images/" + "/".join(urllib.parse.quote(s, safe=":@") for s in ref.split("/"))


class Images:
    """``client.images``: container images kept in the Store, each layer a
    commit, any of which can be a workspace's root
    (``workspaces.create(..., image=...)``)."""

    def __init__(self, c: Client):
        self._c = c

    def list(self) -> list[Image]:
        return [from_json(Image, i) for i in self._c._json("GET", "/v1/images") or []]

    def get(self, ref: str) -> Image:
        """Inspect NAME or NAME@DIGEST."""
        return from_json(Image, self._c._json("GET", _image_path(ref)))

    def import_(self, name: str, kind: str, source: str, *, insecure: bool = False) -> ImageResult:
        """Store the image at ``source`` as ``name``. ``kind``: "oci-layout"
        or "archive" (a path on the daemon's host), "docker" (an image of
        its Docker engine), "registry" (a reference), "dir" (a directory on
        its host, as one layer). Only layers the Store lacks are read; a bad
        layer is refused whole (:class:`layerfs.InvalidArgument`)."""
        body: dict[str, Any] = {"name": name, "kind": kind, "source": source}
        if insecure:
            body["insecure"] = True
        return from_json(ImageResult, self._c._json("POST", "/v1/images", body=body))

    def pull(self, ref: str, name: str | None = None, *, insecure: bool = False) -> ImageResult:
        """Import a registry's image ``ref`` as ``name`` (default ``ref``)."""
        return self.import_(name or ref, "registry", ref, insecure=insecure)

    def push(self, name: str, ref: str, *, insecure: bool = False) -> ImageResult:
        """Write the image ``name`` to a registry as ``ref``."""
        body: dict[str, Any] = {"name": name, "ref": ref}
        if insecure:
            body["insecure"] = True
        return from_json(ImageResult, self._c._json("POST", "/v1/images/push", body=body))

    def remove(self, name: str) -> None:
        """Remove a name; GC collects what nothing else reaches, and
        workspaces on the image keep their root."""
        self._c._t.request("DELETE", _image_path(name)).read()

    def build(self, name: str, file: str, *, context: str | None = None, args: Mapping[str, str] | None = None,
              platform: str | None = None, network: str | None = None, no_cache: bool = False) -> ImageResult:
        """Build ``file`` (a Dockerfile's text) with the directory ``context``
        of the daemon's host into the image ``name``: each RUN in a sandbox
        on the image so far, each step cached by its inputs (``steps`` of
        the result say which ran). An instruction it does not build, or a
        failing RUN, raises :class:`layerfs.InvalidArgument`."""
        body: dict[str, Any] = {"name": name, "file": file}
        if context:
            body["context"] = context
        if args:
            body["args"] = [f"{k}={v}" for k, v in args.items()]
        for k, v in (("platform", platform), ("network", network)):
            if v:
                body[k] = v
        if no_cache:
            body["no_cache"] = True
        return from_json(ImageResult, self._c._json("POST", "/v1/images/build", body=body))


class Branches:
    """``client.branches``: writable lines of a project."""

    def __init__(self, c: Client):
        self._c = c

    def fork(self, project: str, name: str, from_ref: str = "main") -> Branch:
        """Create branch ``name`` at ``from_ref`` (``layer:N``, a branch, or
        a commit id or prefix); it copies nothing."""
        return from_json(Branch, self._c._json("POST", f"/v1/projects/{_seg(project)}/branches",
                                               body={"name": name, "from": from_ref}))

    def list(self, project: str) -> list[Branch]:
        return [from_json(Branch, b) for b in self._c._json("GET", f"/v1/projects/{_seg(project)}/branches") or []]

    def get(self, project: str, name: str) -> Branch:
        return from_json(Branch, self._c._json("GET", f"/v1/projects/{_seg(project)}/branches/{_seg(name)}"))

    def delete(self, project: str, name: str) -> None:
        self._c._t.request("DELETE", f"/v1/projects/{_seg(project)}/branches/{_seg(name)}").read()


class Workspaces:
    """``client.workspaces``: mounted copy-on-write directories."""

    def __init__(self, c: Client):
        self._c = c

    def create(self, project: str, branch: str = "main", *, at: str | None = None,
               platform: str | None = None, network: str | None = None,
               data_path: str | None = None, durability: str | None = None,
               mount_path: str | None = None, owner: tuple[int, int] | None = None,
               image: str | None = None, egress: Sequence[NetworkRule | Mapping[str, Any]] | None = None) -> "Workspace":
        """Open a workspace on ``branch``'s head (or on the commit ``at``
        names; commits still go to ``branch``). ``data_path`` is "overlay"
        or "fuse"; ``durability`` "commit" (writes reach the disk with
        commits) or "fsync" (as a local disk); both default to the
        daemon's. ``owner`` (uid, gid) is the host user its mount path
        (``mount_path``, default under the Store) is for: where sandboxes
        run in a user namespace, the sandbox's root is that user there;
        default, the caller. ``image`` (NAME or NAME@DIGEST; default the
        project's default image) is every exec's root, the workspace's own
        copy-on-write, its Env, WorkingDir and User the execs' defaults.
        ``network`` is "none" (the default), "egress" (only what the
        ``egress`` rules allow: :class:`NetworkRule` or dicts with
        ``domain`` or ``cidr`` and ``ports``) or "host"."""
        spec: dict[str, Any] = {"project": project, "branch": branch}
        if egress:
            spec["egress"] = _rule_dicts(egress)
        for k, v in (("at", at), ("platform", platform), ("network", network),
                     ("data_path", data_path), ("durability", durability), ("mount_path", mount_path),
                     ("image", image)):
            if v:
                spec[k] = v
        if owner is not None:
            spec["owner"] = {"uid": owner[0], "gid": owner[1]}
        return Workspace(self._c, from_json(WorkspaceInfo, self._c._json("POST", "/v1/workspaces", body=spec)))

    def list(self) -> list[WorkspaceInfo]:
        return [from_json(WorkspaceInfo, w) for w in self._c._json("GET", "/v1/workspaces") or []]

    def get(self, id: str) -> "Workspace":
        """A handle on an existing workspace (checked with the daemon; on a
        fleet, with the host that serves it)."""
        ws = Workspace(self._c, WorkspaceInfo(id=id), located=False)
        ws.status()
        return ws


def _rule_dicts(rules: Sequence[NetworkRule | Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for r in rules:
        d = {"domain": r.domain, "cidr": r.cidr, "ports": list(r.ports)} if isinstance(r, NetworkRule) else dict(r)
        out.append({k: v for k, v in d.items() if v})
    return out


class Workspace:
    """A handle on one workspace. ``files`` reads and writes its files;
    ``exec`` runs commands in a fresh sandbox over it.

    On a fleet, the handle sends its requests to the daemon that serves the
    workspace: the one that created it, or the one a misdirected answer
    named (followed once per request)."""

    def __init__(self, c: Client, info: WorkspaceInfo, *, located: bool = True):
        self._c = c
        self.info = info
        self.files = Files(self)
        self._t = c._t  # the daemon that serves it: the client's until an answer names another
        self._located = located  # a request reached that daemon

    @property
    def address(self) -> str:
        """The address of the daemon the handle sends its requests to."""
        return self._t.address

    def _request(self, method: str, path: str, **kw: Any) -> Any:
        """Send a request to the daemon that serves the workspace. A
        misdirected answer naming a live host with an address is followed
        once: the request goes there, and so do the handle's later ones. A
        body read from a stream cannot be sent twice, so before the first
        such request of a handle whose host is not known yet, a stat finds
        the host."""
        body = kw.get("body")
        streamed = body is not None and not isinstance(body, (bytes, bytearray))
        if streamed and not self._located:
            self.files.stat(".")
        try:
            resp = self._t.request(method, path, **kw)
        except Misdirected as e:
            n = e.node
            if n is None or not n.address or not n.live or streamed:
                raise  # it says why it is not followed
            self._t = self._c._peer(n.address)
            resp = self._t.request(method, path, **kw)
        self._located = True
        return resp

    def _json(self, method: str, path: str, *, query: Mapping[str, Any] | None = None, body: Any = None) -> Any:
        return self._request(method, path, query=dict(query or {}), json_body=body).json()

    def __repr__(self) -> str:
        return f"<Workspace {self.id} {self.info.project}:{self.info.branch}>"

    @property
    def id(self) -> str:
        return self.info.id

    def _path(self, suffix: str = "") -> str:
        return f"/v1/workspaces/{_seg(self.id)}{suffix}"

    def status(self) -> WorkspaceStatus:
        """The workspace's state and its uncommitted changes."""
        st = from_json(WorkspaceStatus, self._json("GET", self._path()))
        self.info = from_json(WorkspaceInfo, st.__dict__)
        return st

    def changes(self) -> list[Change]:
        """What ``commit`` would record now."""
        return self.status().changes

    def exec(self, command: str | Sequence[str], *, timeout: float | None = None,
             stdin: bytes | str | None = None, env: Mapping[str, str] | None = None,
             cwd: str | None = None, on_stdout: OutputCallback | None = None,
             on_stderr: OutputCallback | None = None, output_limit: int | None = None,
             memory_bytes: int | None = None, pids: int | None = None, cpus: float | None = None,
             open_files: int | None = None) -> ExecResult:
        """Run ``command`` in a fresh sandbox whose /workspace is this
        workspace: a string runs with ``bash -o pipefail -c``, a sequence
        runs as argv without a shell. ``timeout`` is in seconds (the daemon's
        default when None). With ``on_stdout``/``on_stderr`` the output is
        streamed to them as it comes; the result holds it all either way. A
        non-zero exit is in the result, not raised. ``memory_bytes``,
        ``pids``, ``cpus`` (fractions allowed) and ``open_files`` limit the
        sandbox."""
        req = _exec_request(command, timeout=timeout, env=env, cwd=cwd, output_limit=output_limit,
                            memory_bytes=memory_bytes, pids=pids, cpus=cpus, open_files=open_files)
        if stdin is not None:
            raw = stdin.encode() if isinstance(stdin, str) else bytes(stdin)
            req["stdin"] = base64.b64encode(raw).decode()
        stream = on_stdout is not None or on_stderr is not None
        resp = self._request("POST", self._path("/execs"), json_body=req,
                                  accept=NDJSON if stream else None, timeout=None)
        if not resp.content_type.startswith(NDJSON):
            res = from_json(ExecResult, resp.json())
            for cb, data in ((on_stdout, res.stdout_bytes), (on_stderr, res.stderr_bytes)):
                if cb and data:
                    cb(data.decode("utf-8", "replace"))
            return res
        return _read_events(resp, on_stdout, on_stderr)

    def attach(self, command: str | Sequence[str], *, tty: tuple[int, int] | bool | None = None,
               on_stdout: BytesCallback | None = None, on_stderr: BytesCallback | None = None,
               timeout: float | None = None, env: Mapping[str, str] | None = None, cwd: str | None = None,
               output_limit: int | None = None, memory_bytes: int | None = None, pids: int | None = None,
               cpus: float | None = None, open_files: int | None = None) -> Attached:
        """Start ``command`` (as in :meth:`exec`) attached: its input is what
        you ``write`` to the returned :class:`Attached`, as you write it, and
        its output goes to the callbacks as bytes as it comes. With ``tty``
        (``(rows, cols)``, or True for 24x80) it runs on a terminal: its
        output all comes to ``on_stdout``, ``resize`` changes its size, and
        ending its input (``close_stdin``, ``close``) hangs it up. A request
        the daemon refuses raises here."""
        req = _exec_request(command, timeout=timeout, env=env, cwd=cwd, output_limit=output_limit,
                            memory_bytes=memory_bytes, pids=pids, cpus=cpus, open_files=open_files)
        if tty:
            rows, cols = tty if isinstance(tty, tuple) else (0, 0)
            req["tty"] = {"rows": rows, "cols": cols}
        try:
            sock, r = self._t.upgrade(self._path("/attach"), req, ATTACH_PROTOCOL)
        except Misdirected as e:
            n = e.node
            if n is None or not n.address or not n.live:
                raise
            self._t = self._c._peer(n.address)
            sock, r = self._t.upgrade(self._path("/attach"), req, ATTACH_PROTOCOL)
        self._located = True
        return Attached(sock, r, on_stdout, on_stderr)

    def pty(self, command: str | Sequence[str] | None = None, *, rows: int = 24, cols: int = 80,
            on_output: BytesCallback | None = None, **kw: Any) -> Attached:
        """Open a terminal in a fresh sandbox on the workspace, running
        ``command`` (an interactive bash when None): write what the user
        types, read what it shows through ``on_output`` (bytes, escape
        sequences and all), ``resize`` it, ``close`` it when the user
        leaves. The other arguments are :meth:`attach`'s."""
        return self.attach(["bash"] if command is None else command, tty=(rows, cols), on_stdout=on_output, **kw)

    def dial_port(self, port: int) -> PortConnection:
        """Connect to ``port`` inside the workspace's sandbox, through the
        daemon (which enters the sandbox's network namespace: the sandbox's
        network stays its own). Nothing listening raises
        :class:`PortUnreachable` naming the port."""
        path = self._path(f"/ports/{int(port)}/connect")
        try:
            sock, r = self._t.upgrade(path, None, PORT_PROTOCOL)
        except Misdirected as e:
            n = e.node
            if n is None or not n.address or not n.live:
                raise
            self._t = self._c._peer(n.address)
            sock, r = self._t.upgrade(path, None, PORT_PROTOCOL)
        self._located = True
        return PortConnection(sock, r)

    def forward_port(self, port: int, listen: tuple[str, int] = ("127.0.0.1", 0)) -> PortForward:
        """Listen on ``listen`` (a free port of 127.0.0.1 by default) and
        forward every connection to ``port`` inside the workspace's
        sandbox; the returned forward's ``address`` is where it listens."""
        ln = socket.create_server(listen)
        return PortForward(lambda: self.dial_port(port), ln)

    def share_port(self, port: int, *, public: bool = False) -> PortShare:
        """A share of ``port``: its ``url`` on the daemon's TCP listener
        reaches it with a token of its own (the same share when asked
        again). ``public``: a token anyone can guess."""
        return from_json(PortShare, self._json("POST", self._path("/shares"), body={"port": port, "public": public}))

    def port_shares(self) -> list[PortShare]:
        """The shares of the workspace's ports."""
        return [from_json(PortShare, d) for d in self._json("GET", self._path("/shares"))]

    def unshare_port(self, port: int) -> None:
        """Revoke the share of ``port``: its URL reaches nothing from then on."""
        self._request("DELETE", self._path(f"/shares/{int(port)}"))

    def watch(self, prefix: str | None = None, *, timeout: float | None = None) -> "EventStream":
        """Open the stream of changes below the directory ``prefix`` (all of
        the workspace when None), made by any process on the host or in any
        sandbox. It returns once the daemon watches, so every change made
        after it returns is reported. Iterate over it (``for ev in
        stream``); it ends after an ``ended`` event when the workspace ends.
        ``timeout`` bounds each wait for an event (TimeoutError past it);
        close it (or use ``with``) when done."""
        resp = self._request("GET", self._path("/events"), query={"prefix": prefix}, accept=NDJSON,
                                  timeout=timeout)
        stream = EventStream(resp)
        first = next(stream, None)
        if first is None or first.kind != "ready":
            stream.close()
            raise DaemonLost(f"watch {self.id}: the stream did not begin with ready")
        return stream

    def run(self, command: str | Sequence[str], *, name: str | None = None, restart: str | None = None,
            env: Mapping[str, str] | None = None, cwd: str | None = None, memory_bytes: int | None = None,
            pids: int | None = None, cpus: float | None = None) -> Service:
        """Start ``command`` (a string runs with bash, a sequence as argv) as
        a service: it keeps running in the workspace's sandbox after this
        returns, beside its execs, which see it (ps), reach it (localhost)
        and may signal it. ``name`` defaults to the command's base name;
        ``restart="on-failure"`` starts it again after a failure, with a
        backoff. A command that cannot start raises InvalidArgument with the
        reason; a name a running service has raises AlreadyExists."""
        req: dict[str, Any] = {"body": command} if isinstance(command, str) else {"argv": list(command)}
        if name:
            req["name"] = name
        if restart:
            req["restart"] = restart
        if env:
            req["env"] = [f"{k}={v}" for k, v in env.items()]
        if cwd:
            req["dir"] = cwd
        for key, v in (("memory_bytes", memory_bytes), ("pids", pids)):
            if v is not None:
                req[key] = v
        if cpus is not None:
            req["milli_cpus"] = round(cpus * 1000)
        return from_json(Service, self._json("POST", self._path("/services"), body=req))

    def services(self) -> list[Service]:
        """The workspace's services, running or ended."""
        return from_json(ServiceList, self._json("GET", self._path("/services"))).services

    def service_logs(self, name: str, *, follow: bool = False, on_output: OutputCallback | None = None) -> str:
        """A service's output (its last MiB). With ``follow``, also what
        comes, until the service ends for good, passed to ``on_output`` as
        it comes; returns all of it."""
        resp = self._request("GET", self._path(f"/services/{_seg(name)}/logs"), query={"follow": follow or None},
                             timeout=None)
        out = []
        dec = codecs.getincrementaldecoder("utf-8")("replace")
        for chunk in resp.lines():
            text = dec.decode(chunk)
            out.append(text)
            if on_output:
                on_output(text)
        return "".join(out)

    def stop(self, name: str, *, grace: float | None = None) -> Service:
        """Stop a service: SIGTERM, then SIGKILL after ``grace`` seconds
        (10 when None); returns once it has ended."""
        body = {"grace_ms": math.ceil(grace * 1000)} if grace else {}
        return from_json(Service, self._request("POST", self._path(f"/services/{_seg(name)}/stop"), json_body=body,
                                                timeout=None).json())

    def wait(self, name: str) -> Service:
        """Wait until a service has ended for good (no restart to come)."""
        return from_json(Service, self._request("POST", self._path(f"/services/{_seg(name)}/wait"), timeout=None).json())

    def commit_image(self, name: str) -> ImageResult:
        """Make the changes this workspace's execs made to its root (it must
        stand on an image) a new layer on that image, named ``name``."""
        return from_json(ImageResult, self._json("POST", self._path("/image"), body={"name": name}))

    def commit(self, message: str = "", *, author: str | None = None, merge: bool = False) -> CommitResult:
        """Record the workspace's changes on its branch (compare-and-swap on
        the head). ``result`` is ``created``, ``up-to-date`` or
        ``head-moved``; on head-moved the workspace keeps its changes. With
        ``merge``, a moved head is merged instead (result ``merged``) and
        the workspace then holds the merge; a conflict publishes nothing
        and raises :class:`layerfs.Conflict`."""
        body: dict[str, Any] = {"message": message}
        if author:
            body["author"] = author
        if merge:
            body["merge"] = True
        res = from_json(CommitResult, self._json("POST", self._path("/commit"), body=body))
        if res.head:
            self.info.head = res.head
        return res

    def update(self, ref: str | None = None, *, conflict_markers: bool = False,
               prefer: str | None = None) -> UpdateResult:
        """Bring a branch's new head (``ref``; default the workspace's
        branch) into the workspace, its uncommitted changes kept. A
        conflict changes nothing and raises :class:`layerfs.Conflict`;
        with ``conflict_markers`` the conflicted files get git-style
        markers and the conflicts stay in ``status().conflicts`` until
        resolved (edit the markers away, or ``resolve``)."""
        body: dict[str, Any] = {}
        if ref:
            body["ref"] = ref
        if conflict_markers:
            body["conflict_markers"] = True
        if prefer:
            body["prefer"] = prefer
        res = from_json(UpdateResult, self._json("POST", self._path("/update"), body=body))
        if res.head:
            self.info.head = res.head
        return res

    def resolve(self, *paths: str) -> list[Conflict]:
        """Mark conflicts an update left resolved, the files as they are (no
        paths: all); returns those left."""
        got = self._json("POST", self._path("/resolve"), body={"paths": list(paths)} if paths else {})
        return [from_json(Conflict, c) for c in got.get("conflicts") or []]

    def set_network(self, mode: str, egress: Sequence[NetworkRule | Mapping[str, Any]] | None = None) -> WorkspaceInfo:
        """Change the workspace's network at once: its next execs get
        ``mode`` ("none", "egress" or "host"), and its running egress
        sandboxes the new ``egress`` rules, their connections the rules
        deny cut. A bad change raises ``InvalidArgument`` and leaves the
        network as it was. Returns the workspace as the daemon describes
        it."""
        body: dict[str, Any] = {"mode": mode}
        if egress:
            body["egress"] = _rule_dicts(egress)
        info = from_json(WorkspaceInfo, self._json("PUT", self._path("/network"), body=body))
        self.info.network, self.info.egress = info.network, info.egress
        return info

    def fork(self, count: int = 1) -> list["Workspace"]:
        """Open ``count`` new workspaces holding everything this one holds
        now, committed or not."""
        got = self._json("POST", self._path("/fork"), body={"count": count})
        out = []
        for info in got.get("workspaces") or []:
            ws = Workspace(self._c, from_json(WorkspaceInfo, info))
            ws._t = self._t
            out.append(ws)
        return out

    def end(self, *, discard: bool = False) -> None:
        """Unmount the workspace and drop its private copy. Raises
        ``UncommittedChanges`` when there are changes, unless ``discard``."""
        self._request("DELETE", self._path(), query={"discard": discard}).read()

    def __enter__(self) -> "Workspace":
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.end(discard=True)
        except LayerFSError as e:
            if e.code != "not_found":  # already ended inside the block
                raise


class EventStream:
    """An open stream of a workspace's changes: an iterator of
    :class:`FileEvent` and a context manager that closes it."""

    def __init__(self, resp: Any):
        self._resp = resp
        self._lines = resp.lines()

    def __iter__(self) -> "EventStream":
        return self

    def __next__(self) -> FileEvent:
        while True:
            line = next(self._lines).strip()  # StopIteration at the end of the stream
            if line:
                return from_json(FileEvent, json.loads(line))

    def close(self) -> None:
        self._resp.close()

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _read_events(resp: Any, on_stdout: OutputCallback | None, on_stderr: OutputCallback | None) -> ExecResult:
    out = {"stdout": bytearray(), "stderr": bytearray()}
    cbs = {"stdout": on_stdout, "stderr": on_stderr}
    dec = {k: codecs.getincrementaldecoder("utf-8")("replace") for k in out}
    for line in resp.lines():
        line = line.strip()
        if not line:
            continue
        ev = json.loads(line)
        if ev.get("error"):
            e = ev["error"]
            raise error_for(e.get("code"), e.get("message", ""))
        if ev.get("result") is not None:
            res = from_json(ExecResult, ev["result"])
            for k, cb in cbs.items():
                tail = dec[k].decode(b"", final=True)
                if cb and tail:
                    cb(tail)
            res.stdout_bytes = bytes(out["stdout"]) + res.stdout_bytes
            res.stderr_bytes = bytes(out["stderr"]) + res.stderr_bytes
            return res
        stream = ev.get("stream", "stdout")
        data = base64.b64decode(ev.get("data") or "")
        out.setdefault(stream, bytearray()).extend(data)
        cb = cbs.get(stream)
        if cb:
            text = dec[stream].decode(data)
            if text:
                cb(text)
    raise DaemonLost("the exec stream ended without a result")


class Files:
    """``ws.files``: single files by path, and trees as tar streams. Paths
    are relative to the workspace root, which a leading ``/`` also names;
    the daemon refuses any that would leave it (``..`` above the root,
    through a symlink)."""

    def __init__(self, ws: Workspace):
        self._ws = ws

    def read(self, path: str) -> bytes:
        """The whole content of a file."""
        return self._ws._request("GET", self._ws._path("/files/" + _file_path(path))).read()

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return self.read(path).decode(encoding)

    def write(self, path: str, data: bytes | str, *, mode: int = 0o644) -> None:
        """Create or replace a file (atomically), creating parent directories."""
        _check_mode(mode)
        if isinstance(data, str):
            data = data.encode()
        self._ws._request("PUT", self._ws._path("/files/" + _file_path(path)), query={"mode": f"{mode:04o}"},
                        body=bytes(data), content_type="application/octet-stream").read()

    def stat(self, path: str) -> FileInfo:
        """Describe a path (``.`` for the root); symlinks are not followed."""
        return from_json(FileInfo, self._ws._json("GET", self._ws._path("/stat"), query={"path": path}))

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
            return True
        except LayerFSError as e:
            if e.code == "not_found":
                return False
            raise

    def list(self, path: str = ".", *, recursive: bool = False) -> list[FileInfo]:
        """Entries below a directory in name order (the whole tree, depth
        first, when recursive), following the daemon's pages."""
        out: list[FileInfo] = []
        cursor = None
        while True:
            page = self._ws._json("GET", self._ws._path("/list"),
                                     query={"path": path, "recursive": recursive or None, "cursor": cursor})
            out += [from_json(FileInfo, e) for e in page.get("entries") or []]
            cursor = page.get("next")
            if not cursor:
                return out

    def upload(self, local_path: str, ws_path: str) -> None:
        """Copy a local file, symlink or directory tree to ``ws_path``: a
        file becomes ``ws_path``, a directory's contents go into the
        directory ``ws_path`` (created when missing), like ``cp -r SRC/. DST``."""
        if os.path.isfile(local_path) and not os.path.islink(local_path):
            with open(local_path, "rb") as f:
                mode = os.fstat(f.fileno()).st_mode & 0o777
                self._ws._request("PUT", self._ws._path("/files/" + _file_path(ws_path)),
                                query={"mode": f"{mode:04o}"}, body=f,
                                content_type="application/octet-stream").read()
            return
        if not os.path.lexists(local_path):
            raise FileNotFoundError(local_path)
        is_dir = os.path.isdir(local_path) and not os.path.islink(local_path)
        target = ws_path if is_dir else (os.path.dirname(ws_path) or ".")
        with _archive.pack(local_path, os.path.basename(ws_path)) as tar:
            self._ws._request("PUT", self._ws._path("/tar"), query={"path": target}, body=tar,
                            content_type="application/x-tar").read()

    def download(self, ws_path: str, local_path: str) -> None:
        """Copy a file, symlink or tree of the workspace to ``local_path``,
        like ``cp -r``: into an existing directory under ``ws_path``'s base
        name (the root "." merges into it), else as ``local_path`` itself.
        Nothing is written outside ``local_path``."""
        resp = self._ws._request("GET", self._ws._path("/tar"), query={"path": ws_path})
        ok = False
        try:
            _archive.unpack(resp.raw, local_path)
            ok = True
        finally:
            if ok:
                resp.read()  # the end of the archive, so the connection is reused
            else:
                resp.close()


def _check_mode(mode: int) -> None:
    if not 0 <= mode <= 0o777:
        raise InvalidArgument(f"mode {mode:o}: want permissions from 0 to 0777")


def _exec_request(command: str | Sequence[str], *, timeout: float | None, env: Mapping[str, str] | None,
                  cwd: str | None, output_limit: int | None, memory_bytes: int | None, pids: int | None,
                  cpus: float | None, open_files: int | None) -> dict[str, Any]:
    """An ExecRequest's JSON from exec's arguments."""
    req: dict[str, Any] = {}
    if isinstance(command, str):
        req["body"] = command
    else:
        req["argv"] = list(command)
    if env:
        req["env"] = [f"{k}={v}" for k, v in env.items()]
    if cwd:
        req["dir"] = cwd
    if timeout is not None:
        req["timeout_ms"] = math.ceil(timeout * 1000) if timeout > 0 else -1
    for key, v in (("output_limit", output_limit), ("memory_bytes", memory_bytes), ("pids", pids),
                   ("open_files", open_files)):
        if v is not None:
            req[key] = v
    if cpus is not None:
        req["milli_cpus"] = round(cpus * 1000)
    return req
