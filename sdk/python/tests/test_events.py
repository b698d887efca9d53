"""Workspace events against a real layerfsd."""

from __future__ import annotations

import asyncio
import os
import subprocess

import layerfs


def _until(stream, want):
    """Read events into a {path: type} mirror until it equals want."""
    mirror = {}
    for ev in stream:
        if ev.kind in ("created", "modified"):
            mirror[ev.path] = ev.type
        elif ev.kind == "removed":
            mirror = {p: t for p, t in mirror.items() if p != ev.path and not p.startswith(ev.path + "/")}
        elif ev.kind == "renamed":
            mirror = {(ev.path + p[len(ev.old_path):] if p == ev.old_path or p.startswith(ev.old_path + "/") else p): t
                      for p, t in mirror.items()}
            mirror[ev.path] = ev.type
        if mirror == want:
            return mirror
    raise AssertionError(f"stream ended at {mirror}, want {want}")


def _host_write(mount, name, text):
    """Creates a file in a workspace's mount as a host process can: as the
    uid that owns the mount. (On a local workspace of the overlay data path
    the mount shows the sandboxes' user namespace ids, and only those can
    create files there.) The directory is opened here, as root, and reached
    through /proc/self/fd, so that its parents need not be searchable."""
    st = os.stat(mount)
    fd = os.open(mount, os.O_RDONLY | os.O_DIRECTORY)
    try:
        subprocess.run(["sh", "-c", 'printf %s "$1" > "/proc/self/fd/$2/$3"', "sh", text, str(fd), name],
                       user=st.st_uid, group=st.st_gid, extra_groups=[], pass_fds=[fd], check=True)
    finally:
        os.close(fd)


def test_watch(client, project):
    ws = client.workspaces.create(project)
    with ws.watch(timeout=120) as events:
        ws.exec("mkdir -p src && echo hi > src/a.txt && mv src/a.txt src/b.txt")
        _until(events, {"src": "dir", "src/b.txt": "file"})
        ws.files.write("api.txt", "from the API")
        _host_write(ws.info.mount_path, "host.txt", "from the host")
        _until(events, {"api.txt": "file", "host.txt": "file"})
        with ws.watch("src", timeout=120) as sub:
            ws.exec("echo 1 > top.txt && echo 2 > src/c.txt")
            ev = next(sub)
            assert (ev.kind, ev.path, ev.type) == ("created", "src/c.txt", "file")
        ws.end(discard=True)
        kinds = [ev.kind for ev in events]
        assert kinds[-1] == "ended"


def test_watch_errors(client, project):
    with client.workspaces.create(project) as ws:
        ws.files.write("file", "x")
        for prefix, err in (("missing", layerfs.NotFound), ("../x", layerfs.InvalidArgument),
                            ("file", layerfs.InvalidArgument)):
            try:
                ws.watch(prefix).close()
            except err:
                continue
            raise AssertionError(f"watch {prefix!r} was not refused with {err.__name__}")


def test_async_watch(daemon, project):
    async def main():
        async with await layerfs.AsyncClient.connect(daemon["address"], autostart=False) as c:
            async with await c.workspaces.create(project) as ws:
                async with await ws.watch(timeout=120) as events:
                    await ws.files.write("n.txt", "x")
                    async for ev in events:
                        if ev.path == "n.txt":
                            # The API writes a temporary file and renames it over
                            # the target: a reader that saw the temporary one
                            # sees the rename, else the creation (coalesced).
                            assert ev.kind in ("created", "renamed") and ev.size == 1, ev
                            break

    asyncio.run(main())
