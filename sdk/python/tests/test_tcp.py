"""A daemon's TCP listener, with its bearer token."""

from __future__ import annotations

import socket
import time

import pytest

import layerfs
from conftest import start_daemon


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def tcp_daemon(bindir, tmp_path):
    token = tmp_path / "token"
    token.write_text("t0ken-for-tests\n")
    token.chmod(0o600)
    port = _free_port()
    gen = start_daemon(bindir, tmp_path, "--tcp", f"127.0.0.1:{port}", "--token-file", str(token))
    d = next(gen)
    # The TCP listener opens just after the socket: wait until it accepts.
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)
    yield f"http://127.0.0.1:{port}", "t0ken-for-tests"
    next(gen, None)


def test_tcp_with_token(tcp_daemon):
    address, token = tcp_daemon
    with pytest.raises(layerfs.Unauthorized):
        layerfs.Client(address, token="wrong")
    with pytest.raises(layerfs.Unauthorized):
        layerfs.Client(address)
    with layerfs.Client(address, token=token) as c:
        c.projects.create("over-tcp")
        with c.workspaces.create("over-tcp") as ws:
            seen = []
            res = ws.exec("echo streamed", on_stdout=seen.append)
            assert res.stdout == "streamed\n" and "".join(seen) == "streamed\n"
