"""The asyncio API: the synchronous core run in worker threads.

Every coroutine here runs the same call of ``layerfs.client`` in a thread
(``asyncio.to_thread``), so both APIs share one transport, one set of
types and one set of errors. Streamed exec output is handed back to the
event loop: ``on_stdout``/``on_stderr`` run on the loop's thread, in order,
and may be coroutine functions; all of them have run when ``exec`` returns.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Mapping, Sequence
from typing import Any, Callable

from . import client as _sync
from ._attach import Attached
from .types import (Branch, Change, Commit, CommitResult, Conflict, ExecResult, FileEvent, FileInfo, Image, ImageResult,
                    MergeResult, Project, Service, UpdateResult, Version, WorkspaceInfo, WorkspaceStatus)

__all__ = ["AsyncClient", "AsyncWorkspace", "AsyncEventStream"]


async def _run(fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    return await asyncio.to_thread(fn, *args, **kw)


class AsyncClient:
    """The asyncio twin of :class:`layerfs.Client`; create it with
    ``await AsyncClient.connect(...)`` (same arguments)."""

    def __init__(self, c: _sync.Client):
        self._c = c
        self.projects = _AsyncProjects(c.projects)
        self.workspaces = _AsyncWorkspaces(c.workspaces)
        self.branches = _AsyncBranches(c.branches)
        self.images = _AsyncImages(c.images)

    @classmethod
    async def connect(cls, address: str | None = None, **kw: Any) -> "AsyncClient":
        return cls(await _run(_sync.Client, address, **kw))

    def version(self) -> Version:
        return self._c.version()

    async def log(self, project: str, ref: str = "main", limit: int | None = None, *,
                  after: str | None = None) -> list[Commit]:
        return await _run(self._c.log, project, ref, limit, after=after)

    async def merge(self, project: str, source: str, **kw: Any) -> MergeResult:
        """As :meth:`layerfs.Client.merge`."""
        return await _run(self._c.merge, project, source, **kw)

    async def diff(self, project: str, from_ref: str, to_ref: str) -> list[Change]:
        return await _run(self._c.diff, project, from_ref, to_ref)

    async def commit(self, project: str, ref: str) -> Commit:
        return await _run(self._c.commit, project, ref)

    async def close(self) -> None:
        self._c.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


class _AsyncProjects:
    def __init__(self, p: _sync.Projects):
        self._p = p

    async def create(self, name: str, **kw: Any) -> Project:
        return await _run(self._p.create, name, **kw)

    async def list(self) -> list[Project]:
        return await _run(self._p.list)

    async def get(self, name: str) -> Project:
        return await _run(self._p.get, name)

    async def set_image(self, name: str, image: str | None) -> Project:
        return await _run(self._p.set_image, name, image)


class _AsyncImages:
    """As :class:`layerfs.client.Images`."""

    def __init__(self, i: _sync.Images):
        self._i = i

    async def list(self) -> list[Image]:
        return await _run(self._i.list)

    async def get(self, ref: str) -> Image:
        return await _run(self._i.get, ref)

    async def import_(self, name: str, kind: str, source: str, **kw: Any) -> ImageResult:
        return await _run(self._i.import_, name, kind, source, **kw)

    async def pull(self, ref: str, name: str | None = None, **kw: Any) -> ImageResult:
        return await _run(self._i.pull, ref, name, **kw)

    async def push(self, name: str, ref: str, **kw: Any) -> ImageResult:
        return await _run(self._i.push, name, ref, **kw)

    async def remove(self, name: str) -> None:
        await _run(self._i.remove, name)

    async def build(self, name: str, file: str, **kw: Any) -> ImageResult:
        return await _run(self._i.build, name, file, **kw)


class _AsyncBranches:
    def __init__(self, b: _sync.Branches):
        self._b = b

    async def fork(self, project: str, name: str, from_ref: str = "main") -> Branch:
        return await _run(self._b.fork, project, name, from_ref)

    async def list(self, project: str) -> list[Branch]:
        return await _run(self._b.list, project)

    async def get(self, project: str, name: str) -> Branch:
        return await _run(self._b.get, project, name)

    async def delete(self, project: str, name: str) -> None:
        await _run(self._b.delete, project, name)


class _AsyncWorkspaces:
    def __init__(self, w: _sync.Workspaces):
        self._w = w

    async def create(self, project: str, branch: str = "main", **kw: Any) -> "AsyncWorkspace":
        return AsyncWorkspace(await _run(self._w.create, project, branch, **kw))

    async def list(self) -> list[WorkspaceInfo]:
        return await _run(self._w.list)

    async def get(self, id: str) -> "AsyncWorkspace":
        return AsyncWorkspace(await _run(self._w.get, id))


class AsyncWorkspace:
    """The asyncio twin of :class:`layerfs.Workspace`; ``async with`` ends
    it (dropping what was not committed)."""

    def __init__(self, ws: _sync.Workspace):
        self._ws = ws
        self.files = _AsyncFiles(ws.files)

    @property
    def id(self) -> str:
        return self._ws.id

    @property
    def info(self) -> WorkspaceInfo:
        return self._ws.info

    async def exec(self, command: str | Sequence[str], *, on_stdout: Any = None, on_stderr: Any = None,
                   **kw: Any) -> ExecResult:
        """As :meth:`layerfs.Workspace.exec`; the callbacks run on the loop."""
        loop = asyncio.get_running_loop()
        pending: list[asyncio.Task[Any]] = []
        res = await _run(self._ws.exec, command, on_stdout=_on_loop(loop, on_stdout, pending),
                         on_stderr=_on_loop(loop, on_stderr, pending), **kw)
        # Callbacks scheduled before the thread finished have run by now
        # (the loop runs them in order); coroutine callbacks may still run.
        if pending:
            await asyncio.gather(*pending)
        return res

    async def attach(self, command: str | Sequence[str], *, on_stdout: Any = None, on_stderr: Any = None,
                     **kw: Any) -> "AsyncAttached":
        """As :meth:`layerfs.Workspace.attach`; the callbacks (bytes) run on
        the loop."""
        loop = asyncio.get_running_loop()
        pending: list[asyncio.Task[Any]] = []
        a = await _run(self._ws.attach, command, on_stdout=_on_loop(loop, on_stdout, pending),
                       on_stderr=_on_loop(loop, on_stderr, pending), **kw)
        return AsyncAttached(a, pending)

    async def pty(self, command: str | Sequence[str] | None = None, *, rows: int = 24, cols: int = 80,
                  on_output: Any = None, **kw: Any) -> "AsyncAttached":
        """As :meth:`layerfs.Workspace.pty`; ``on_output`` (bytes) runs on the
        loop."""
        return await self.attach(["bash"] if command is None else command, tty=(rows, cols),
                                 on_stdout=on_output, **kw)

    async def watch(self, prefix: str | None = None, **kw: Any) -> "AsyncEventStream":
        """As :meth:`layerfs.Workspace.watch`: ``async for ev in stream``."""
        return AsyncEventStream(await _run(self._ws.watch, prefix, **kw))

    async def run(self, command: str | Sequence[str], **kw: Any) -> Service:
        """As :meth:`layerfs.Workspace.run`: start a service."""
        return await _run(self._ws.run, command, **kw)

    async def services(self) -> list[Service]:
        return await _run(self._ws.services)

    async def service_logs(self, name: str, **kw: Any) -> str:
        """As :meth:`layerfs.Workspace.service_logs` (``on_output`` runs on
        the daemon's thread)."""
        return await _run(self._ws.service_logs, name, **kw)

    async def stop(self, name: str, **kw: Any) -> Service:
        return await _run(self._ws.stop, name, **kw)

    async def wait(self, name: str) -> Service:
        return await _run(self._ws.wait, name)

    async def commit_image(self, name: str) -> ImageResult:
        return await _run(self._ws.commit_image, name)

    async def commit(self, message: str = "", **kw: Any) -> CommitResult:
        return await _run(self._ws.commit, message, **kw)

    async def update(self, ref: str | None = None, **kw: Any) -> UpdateResult:
        """As :meth:`layerfs.Workspace.update`."""
        return await _run(self._ws.update, ref, **kw)

    async def resolve(self, *paths: str) -> list[Conflict]:
        return await _run(self._ws.resolve, *paths)

    async def set_network(self, mode: str, egress: Any = None) -> WorkspaceInfo:
        """As :meth:`layerfs.Workspace.set_network`."""
        return await _run(self._ws.set_network, mode, egress)

    async def fork(self, count: int = 1) -> list["AsyncWorkspace"]:
        """As :meth:`layerfs.Workspace.fork`."""
        return [AsyncWorkspace(w) for w in await _run(self._ws.fork, count)]

    async def status(self) -> WorkspaceStatus:
        return await _run(self._ws.status)

    async def changes(self) -> list[Change]:
        return await _run(self._ws.changes)

    async def end(self, *, discard: bool = False) -> None:
        await _run(self._ws.end, discard=discard)

    async def __aenter__(self) -> "AsyncWorkspace":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await _run(self._ws.__exit__, *exc)


class AsyncAttached:
    """The asyncio twin of :class:`layerfs.Attached`; ``async with`` closes
    it."""

    def __init__(self, a: Attached, pending: list[Any]):
        self._a, self._pending = a, pending

    async def write(self, data: bytes | str) -> None:
        await _run(self._a.write, data)

    async def close_stdin(self) -> None:
        await _run(self._a.close_stdin)

    async def resize(self, rows: int, cols: int) -> None:
        await _run(self._a.resize, rows, cols)

    async def wait(self, timeout: float | None = None) -> ExecResult:
        res = await _run(self._a.wait, timeout)
        if self._pending:
            await asyncio.gather(*self._pending)
        return res

    async def close(self) -> None:
        await _run(self._a.close)

    async def __aenter__(self) -> "AsyncAttached":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


class AsyncEventStream:
    """An async iterator of a workspace's changes; ``async with`` closes it."""

    def __init__(self, s: _sync.EventStream):
        self._s = s

    def __aiter__(self) -> "AsyncEventStream":
        return self

    async def __anext__(self) -> FileEvent:
        ev = await _run(next, self._s, None)
        if ev is None:
            raise StopAsyncIteration
        return ev

    async def close(self) -> None:
        self._s.close()

    async def __aenter__(self) -> "AsyncEventStream":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


def _on_loop(loop: asyncio.AbstractEventLoop, cb: Any, pending: list[Any]) -> Callable[[str], None] | None:
    """A callback for the worker thread that runs cb on the loop."""
    if cb is None:
        return None

    def call(text: str) -> None:
        if inspect.iscoroutinefunction(cb):
            loop.call_soon_threadsafe(lambda: pending.append(loop.create_task(cb(text))))
        else:
            loop.call_soon_threadsafe(cb, text)

    return call


class _AsyncFiles:
    def __init__(self, f: _sync.Files):
        self._f = f

    async def read(self, path: str) -> bytes:
        return await _run(self._f.read, path)

    async def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return await _run(self._f.read_text, path, encoding)

    async def write(self, path: str, data: bytes | str, *, mode: int = 0o644) -> None:
        await _run(self._f.write, path, data, mode=mode)

    async def stat(self, path: str) -> FileInfo:
        return await _run(self._f.stat, path)

    async def exists(self, path: str) -> bool:
        return await _run(self._f.exists, path)

    async def list(self, path: str = ".", *, recursive: bool = False) -> list[FileInfo]:
        return await _run(self._f.list, path, recursive=recursive)

    async def upload(self, local_path: str, ws_path: str) -> None:
        await _run(self._f.upload, local_path, ws_path)

    async def download(self, ws_path: str, local_path: str) -> None:
        await _run(self._f.download, ws_path, local_path)
