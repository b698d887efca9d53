"""The asyncio API against a real layerfsd."""

from __future__ import annotations

import asyncio

import layerfs
from layerfs import AsyncClient


def test_async_session(daemon, project):
    async def main():
        async with await AsyncClient.connect(daemon["address"], autostart=False) as c:
            assert c.version().api == "v1"
            a = await c.workspaces.create(project)
            await c.branches.fork(project, "b", "main")
            b = await c.workspaces.create(project, branch="b")
            await asyncio.gather(a.files.write("who", "a\n"), b.files.write("who", "b\n"))
            got = []

            async def collect(text):
                await asyncio.sleep(0)
                got.append(text)

            ra, rb = await asyncio.gather(a.exec("cat who"), b.exec("cat who; echo done", on_stdout=collect))
            assert ra.stdout == "a\n" and rb.stdout == "b\ndone\n"
            assert "".join(got) == "b\ndone\n"
            assert (await a.files.stat("who")).size == 2
            assert [e.path for e in await b.files.list()] == ["who"]
            assert (await a.commit("from a")).created
            assert (await c.log(project))[0].message == "from a"
            assert [ch.path for ch in await c.diff(project, "main", "b")] == ["who"]
            try:
                await b.end()
            except layerfs.UncommittedChanges:
                await b.end(discard=True)
            async with a:
                pass
            assert not [w for w in await c.workspaces.list() if w.id in (a.id, b.id)]

    asyncio.run(main())
