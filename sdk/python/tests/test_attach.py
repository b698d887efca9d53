"""Attached execs and terminals against a real layerfsd."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import layerfs


class Screen:
    """Output collected from the reader thread, waited on by text."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._cond = threading.Condition()

    def __call__(self, data: bytes) -> None:
        with self._cond:
            self._buf.extend(data)
            self._cond.notify_all()

    def text(self) -> str:
        with self._cond:
            return self._buf.decode("utf-8", "replace")

    def wait_for(self, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while text not in self._buf.decode("utf-8", "replace"):
                left = deadline - time.monotonic()
                if left <= 0:
                    pytest.fail(f"never saw {text!r}; got {self._buf.decode('utf-8', 'replace')!r}")
                self._cond.wait(left)


def test_attach_streams_stdin(client, project):
    with client.workspaces.create(project) as ws:
        out = Screen()
        a = ws.attach("read a; echo got-$a; read b; echo got-$b >&2; exit 2", on_stdout=out)
        a.write("one\n")
        out.wait_for("got-one")
        a.write(b"two\n")
        a.close_stdin()
        res = a.wait(60)
        assert res.exit_code == 2
        assert out.text() == "got-one\n"
        assert res.stderr == "got-two\n"  # no callback: in the result


def test_pty(client, project):
    with client.workspaces.create(project) as ws:
        screen = Screen()
        with ws.pty(["bash", "--norc", "--noprofile", "-i"], rows=30, cols=90, on_output=screen) as term:
            term.write("tty; stty size\n")
            screen.wait_for("30 90")
            term.resize(50, 150)
            time.sleep(0.1)
            term.write("stty size\n")
            screen.wait_for("50 150")
            term.write("sleep 60; echo slept-$((6*7))\n")
            time.sleep(0.5)
            term.write("\x03echo back-$((6*7))\n")
            screen.wait_for("back-42")
            term.write("exit 7\n")
            res = term.wait(60)
        assert res.exit_code == 7
        assert "/dev/pts/0" in screen.text() and "slept-42" not in screen.text()


def test_pty_client_vanishes(client, project):
    with client.workspaces.create(project) as ws:
        screen = Screen()
        term = ws.pty("trap 'echo hup > /workspace/hung-up; exit 0' HUP; echo ready; while :; do sleep 0.1; done",
                      on_output=screen)
        screen.wait_for("ready")
        term.close()
        deadline = time.monotonic() + 10
        while not ws.files.exists("hung-up") and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ws.files.read_text("hung-up") == "hup\n"


def test_attach_refused(client, project):
    with client.workspaces.create(project) as ws:
        with pytest.raises(layerfs.InvalidArgument, match="dir"):
            ws.attach("true", cwd="../..")
        with pytest.raises(layerfs.InvalidArgument, match="tty.rows"):
            ws.attach("true", tty=(5000, 80))


def test_async_pty(daemon, project):
    async def main() -> int:
        async with await layerfs.AsyncClient.connect(daemon["address"], autostart=False) as ac:
            ws = await ac.workspaces.create(project)
            try:
                seen: list[bytes] = []
                term = await ws.pty("read line; echo got-$line; exit 4", on_output=seen.append)
                await term.write("x\n")
                res = await term.wait(60)
                assert b"got-x" in b"".join(seen)
                return res.exit_code
            finally:
                await ws.end(discard=True)

    assert asyncio.run(main()) == 4
