"""A real layerfsd for the SDK's tests: started once per session on a fresh
Store in a temp directory and stopped at the end.

The binaries come from $LAYERFS_TEST_BIN (a directory holding layerfs and
layerfsd; the Go test that runs this suite passes the ones it built), else
they are built with go build into the session's temp directory. The daemon
needs root and /dev/fuse; without them the tests skip.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

SDK = Path(__file__).resolve().parents[1]
REPO = SDK.parents[1]
sys.path.insert(0, str(SDK))

import layerfs  # noqa: E402


def _binaries(tmp: Path) -> Path:
    given = os.environ.get("LAYERFS_TEST_BIN")
    if given:
        return Path(given)
    go = shutil.which("go") or "/usr/local/go/bin/go"
    out = tmp / "bin"
    for cmd in ("layerfs", "layerfsd"):
        subprocess.run([go, "build", "-o", str(out / cmd), f"./cmd/{cmd}"], cwd=REPO, check=True)
    return out


def start_daemon(bindir: Path, tmp: Path, *extra: str):
    """Start layerfsd on a fresh Store under tmp; a generator that yields
    the daemon's description and stops it when resumed."""
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        pytest.skip("needs root and /dev/fuse to run layerfsd")
    store = tmp / "store"
    log = open(tmp / "layerfsd.log", "wb")
    proc = subprocess.Popen([str(bindir / "layerfsd"), "serve", "--store", str(store), *extra],
                            stdout=log, stderr=subprocess.STDOUT)
    sock = store / "layerfsd.sock"
    deadline = time.monotonic() + 60
    # The socket appears once the daemon is ready to answer (the engine up).
    while not sock.exists():
        if proc.poll() is not None:
            pytest.fail(f"layerfsd exited at start: {(tmp / 'layerfsd.log').read_text()}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("layerfsd did not answer within 60s")
        time.sleep(0.02)
    yield {"address": f"unix://{sock}", "store": str(store), "bin": str(bindir)}
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_tcp_daemon(bindir: Path, tmp: Path, token: str, *extra: str, advertise: bool = False):
    """start_daemon with a TCP listener on a loopback port behind ``token``
    too (advertised as the daemon's address in a fleet when ``advertise``);
    a generator that yields the listener's http:// address and the daemon's
    description, and stops it when resumed."""
    tok = tmp / "token"
    tok.write_text(token + "\n")
    tok.chmod(0o600)
    port = free_port()
    args = ["--tcp", f"127.0.0.1:{port}", "--token-file", str(tok), *extra]
    if advertise:
        args += ["--advertise", f"tcp://127.0.0.1:{port}"]
    gen = start_daemon(bindir, tmp, *args)
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
    yield f"http://127.0.0.1:{port}", d
    next(gen, None)


@pytest.fixture(scope="session")
def bindir(tmp_path_factory):
    return _binaries(tmp_path_factory.mktemp("bin"))


@pytest.fixture(scope="session")
def daemon(bindir, tmp_path_factory):
    """The running daemon: its address, Store and binaries."""
    yield from start_daemon(bindir, tmp_path_factory.mktemp("layerfs"))


@pytest.fixture
def client(daemon):
    with layerfs.Client(daemon["address"], autostart=False) as c:
        yield c


@pytest.fixture
def project(client, request):
    """A fresh project named after the test."""
    name = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:60]
    client.projects.create(name)
    return name
