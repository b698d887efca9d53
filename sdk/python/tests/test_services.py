"""Services against a real layerfsd."""

from __future__ import annotations

import asyncio
import threading
import time

import layerfs


def test_services(client, project):
    with client.workspaces.create(project) as ws:
        sv = ws.run("echo up; exec sleep 1000", name="sleeper")
        assert (sv.name, sv.state) == ("sleeper", "running") and sv.pid > 1
        assert ws.exec(["pgrep", "-cf", "sleep 1000"]).stdout == "1\n"
        assert [s.name for s in ws.services()] == ["sleeper"]
        for _ in range(200):
            if ws.service_logs("sleeper") == "up\n":
                break
            time.sleep(0.02)
        assert ws.service_logs("sleeper") == "up\n"

        for call, err in ((lambda: ws.run("sleep 1", name="sleeper"), layerfs.AlreadyExists),
                          (lambda: ws.run(["no-such-command"]), layerfs.InvalidArgument),
                          (lambda: ws.run("true", restart="always"), layerfs.InvalidArgument),
                          (lambda: ws.stop("nope"), layerfs.NotFound)):
            try:
                call()
            except err:
                continue
            raise AssertionError(f"not refused with {err.__name__}")

        got = []
        follower = threading.Thread(target=lambda: got.append(ws.service_logs("sleeper", follow=True)))
        follower.start()
        stopped = ws.stop("sleeper", grace=1)
        assert (stopped.state, stopped.reason) == ("ended", "stopped")
        follower.join(30)
        assert got == ["up\n"]

        ws.run("exit 3", name="fails")
        done = ws.wait("fails")
        assert (done.exit_code, done.reason) == (3, "exited")


def test_async_services(daemon, project):
    async def main():
        async with await layerfs.AsyncClient.connect(daemon["address"], autostart=False) as c:
            async with await c.workspaces.create(project) as ws:
                await ws.run(["sleep", "1000"], name="s")
                assert [s.state for s in await ws.services()] == ["running"]
                assert (await ws.stop("s")).reason == "stopped"

    asyncio.run(main())
