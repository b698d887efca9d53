"""Merges through the synchronous and the asyncio API, against a real layerfsd."""

from __future__ import annotations

import asyncio

import pytest

import layerfs
from layerfs.aio import AsyncClient


def test_commit_merge_update_fork(client, project):
    a = client.workspaces.create(project)
    b = client.workspaces.create(project)
    a.files.write("a.txt", "a\n")
    assert a.commit("a").created
    b.files.write("b.txt", "b\n")
    assert b.commit("b").result == "head-moved"
    res = b.commit("b", merge=True)
    assert res.result == "merged" and res.merge and len(res.merge.bases) == 1
    assert b.files.read_text("a.txt") == "a\n", "the workspace holds the merge"
    assert b.changes() == []
    log = client.log(project, "main")
    assert len(log[0].parents) == 2 and log[0].parents[0] == log[0].parent
    assert client.log(project, "main", after=log[0].id) == log[1:]

    a.files.write("a.txt", "by a\n")
    a.commit("a2", merge=True)
    b.files.write("a.txt", "by b\n")
    with pytest.raises(layerfs.Conflict) as ei:
        b.update()
    c = ei.value.conflicts[0]
    assert (c.path, c.kind) == ("a.txt", "content") and c.ours.object and c.theirs.object
    assert b.files.read_text("a.txt") == "by b\n", "a conflict changes nothing"
    up = b.update(conflict_markers=True)
    assert up.result == "updated" and [x.path for x in up.conflicts] == ["a.txt"]
    assert "<<<<<<< " in b.files.read_text("a.txt")
    assert [x.path for x in b.status().conflicts] == ["a.txt"]
    with pytest.raises(layerfs.Conflict):
        b.commit("refused")
    b.files.write("a.txt", "both\n")  # the markers gone: resolved
    assert b.status().conflicts == []
    assert b.commit("resolved").created

    b.files.write("wip.txt", "work in progress\n")
    forks = b.fork(2)
    assert len(forks) == 2
    for f in forks:
        assert f.files.read_text("wip.txt") == "work in progress\n"
        assert [ch.path for ch in f.changes()] == ["wip.txt"]
        f.end(discard=True)

    client.branches.fork(project, "topic", from_ref="main")
    a.files.write("t.txt", "t\n")
    a.commit("t", merge=True)
    m = client.merge(project, "main", into="topic", dry_run=True)
    assert m.result == "fast-forward" and m.dry_run
    m = client.merge(project, "main", into="topic", dry_run=True, no_renames=True)
    assert m.result == "fast-forward"
    assert client.merge(project, "main", into="topic", dry_run=True, rename_threshold=80).dry_run
    with pytest.raises(layerfs.InvalidArgument):
        client.merge(project, "main", into="topic", rename_threshold=101)
    assert client.merge(project, "main", into="topic").result == "fast-forward"
    with pytest.raises(layerfs.NotFound):
        client.merge(project, "nope", into="topic")
    a.end(discard=True)
    b.end(discard=True)


def test_async_merges(daemon, project):
    async def main():
        async with await AsyncClient.connect(daemon["address"], autostart=False) as c:
            a = await c.workspaces.create(project)
            b = await c.workspaces.create(project)
            await a.files.write("x.txt", "x\n")
            assert (await a.commit("x")).created
            await b.files.write("y.txt", "y\n")
            assert (await b.commit("y", merge=True)).result == "merged"
            await a.files.write("z.txt", "z\n")
            await a.commit("z", merge=True)
            await b.files.write("w.txt", "w\n")
            up = await b.update()
            assert up.result == "updated"
            assert await b.files.read_text("z.txt") == "z\n"
            assert await b.resolve() == []
            forks = await b.fork(1)
            assert await forks[0].files.read_text("w.txt") == "w\n"
            await forks[0].end(discard=True)
            await c.branches.fork(project, "side", "main")
            assert (await c.merge(project, "main", into="side")).result == "up-to-date"
            await a.end(discard=True)
            await b.end(discard=True)

    asyncio.run(main())
