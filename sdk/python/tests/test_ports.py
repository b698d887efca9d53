"""Port forwards and shares against a real layerfsd."""

from __future__ import annotations

import pathlib
import threading
import time
import urllib.request

import pytest

import layerfs

SERVER = (pathlib.Path(__file__).parent / "portserver.py").read_text()


def serve(ws, port: int) -> threading.Thread:
    ws.files.write("portserver.py", SERVER)
    t = threading.Thread(target=lambda: ws.exec(f"exec timeout 120 python3 portserver.py {port}", timeout=150), daemon=True)
    t.start()
    deadline = time.monotonic() + 60
    while True:
        try:
            ws.dial_port(port).close()
            return t
        except layerfs.PortUnreachable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def test_dial_and_forward_port(client, project):
    with client.workspaces.create(project) as ws:
        with pytest.raises(layerfs.PortUnreachable, match="port 8001"):
            ws.dial_port(8001)
        with pytest.raises(layerfs.InvalidArgument):
            ws.dial_port(0)
        serve(ws, 8000)
        with ws.dial_port(8000) as c:
            c.sendall(b"GET /hi HTTP/1.0\r\n\r\n")
            c.shutdown_write()
            got = b""
            while (b := c.recv()):
                got += b
        assert b"200 OK" in got and b"path=/hi " in got
        with ws.forward_port(8000) as fwd:
            host, port = fwd.address
            body = urllib.request.urlopen(f"http://{host}:{port}/bytes/1000000", timeout=60).read()
            assert len(body) == 1000000
        shares = ws.port_shares()
        assert shares == []
        sh = ws.share_port(8000)
        assert sh.path == f"/share/{sh.token}/" and sh.port == 8000
        assert [s.token for s in ws.port_shares()] == [sh.token]
        ws.unshare_port(8000)
        with pytest.raises(layerfs.NotFound):
            ws.unshare_port(8000)
        try:
            ws.dial_port(8000).sendall(b"GET /quit HTTP/1.0\r\n\r\n")
        except layerfs.LayerFSError:
            pass
