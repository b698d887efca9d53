"""Two daemons of one shared Store (a fleet) on loopback: a workspace handle
follows a misdirected answer once, to the host that serves the workspace.

The Store's URL comes from $LAYERFS_TEST_STORE_URL, which the Go test
TestPythonSDKFleet sets (a fresh database and bucket of its own servers);
TestPythonSDK leaves this file out.
"""

from __future__ import annotations

import os

import pytest

import layerfs
from conftest import start_tcp_daemon

TOKEN = "fleet-t0ken"


@pytest.fixture
def fleet(bindir, tmp_path):
    """Hosts a and b: their http:// addresses and a function that stops one."""
    url = os.environ.get("LAYERFS_TEST_STORE_URL")
    if not url:
        pytest.skip("needs a shared Store: $LAYERFS_TEST_STORE_URL (the Go test TestPythonSDKFleet sets it)")
    url_file = tmp_path / "store.url"
    url_file.write_text(url + "\n")
    url_file.chmod(0o600)
    gens, addresses = [], []
    for name in ("a", "b"):
        d = tmp_path / name
        d.mkdir()
        gen = start_tcp_daemon(bindir, d, TOKEN, "--store-url-file", str(url_file), advertise=True)
        addresses.append(next(gen)[0])
        gens.append(gen)
    yield addresses, lambda i: next(gens[i], None)
    for g in gens:
        next(g, None)


def test_follows_misdirected(fleet, tmp_path):
    (a_addr, b_addr), stop = fleet
    advertised_a = a_addr.replace("http://", "tcp://")
    with layerfs.Client(a_addr, token=TOKEN, autostart=False) as a, \
            layerfs.Client(b_addr, token=TOKEN, autostart=False) as b:
        a.projects.create("fleet")
        ws = a.workspaces.create("fleet")
        ws.files.write("from-a.txt", "written on a\n")

        # b is asked for a's workspace: it answers misdirected, naming a,
        # and the handle sends the request there, then all later ones.
        via_b = b.workspaces.get(ws.id)
        assert via_b.address == advertised_a
        assert via_b.info.project == "fleet"
        assert via_b.files.read_text("from-a.txt") == "written on a\n"
        assert via_b.exec("cat from-a.txt").stdout == "written on a\n"

        # A streamed body on a handle whose host is not known yet: a stat
        # finds the host first, so the stream is sent once, to a.
        src = tmp_path / "up.txt"
        src.write_text("streamed through b\n")
        fresh = layerfs.Workspace(b, layerfs.WorkspaceInfo(id=ws.id), located=False)
        fresh.files.upload(str(src), "up.txt")
        assert fresh.address == advertised_a
        assert ws.files.read_text("up.txt") == "streamed through b\n"

        # A commit through b's handle is a's workspace's, seen by b at once.
        res = via_b.commit("through b")
        assert res.result == "created"
        assert b.branches.get("fleet", "main").head == res.commit

        # A host that stopped is named, not dialled.
        stop(0)
        with pytest.raises(layerfs.Misdirected) as e:
            b.workspaces.get(ws.id)
        assert e.value.status == 421
        assert e.value.node is not None
        assert e.value.node.address == advertised_a
        assert not e.value.node.live
