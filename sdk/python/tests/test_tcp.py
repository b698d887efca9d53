"""A daemon's TCP listener, with its bearer token."""

from __future__ import annotations

import pytest

import layerfs
from conftest import start_tcp_daemon


@pytest.fixture
def tcp_daemon(bindir, tmp_path):
    gen = start_tcp_daemon(bindir, tmp_path, "t0ken-for-tests")
    address, _ = next(gen)
    yield address, "t0ken-for-tests"
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
