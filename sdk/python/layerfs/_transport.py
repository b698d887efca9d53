"""HTTP/1.1 to layerfsd over its unix socket or TCP, standard library only.

The core every API call goes through: it finds the daemon as the CLI does,
keeps a small pool of keep-alive connections (so the client is safe to use
from several threads, which the asyncio API relies on), sends JSON or raw
bodies, and turns error answers into the typed errors of ``errors``.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import subprocess
import threading
import urllib.parse
from collections.abc import Iterator
from typing import Any, BinaryIO

from .errors import DaemonLost, DaemonUnreachable, LayerFSError, error_for

API_VERSION = "v1"
SOCKET_NAME = "layerfsd.sock"


def default_store() -> str:
    """The Store the CLI uses: ``$LAYERFS_HOME``, else ``~/.local/share/layerfs``."""
    home = os.environ.get("LAYERFS_HOME")
    if home:
        return home
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(data, "layerfs")


def default_address() -> tuple[str, bool]:
    """The daemon's address and whether it is the default Store's own
    socket (which may be auto-started): ``$LAYERFS_DAEMON`` when set, else
    the Store's ``layerfsd.sock``."""
    env = os.environ.get("LAYERFS_DAEMON")
    if env:
        return env, False
    return "unix://" + os.path.join(default_store(), SOCKET_NAME), True


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float | None):
        super().__init__("layerfsd", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self._path)
        except OSError:
            s.close()
            raise
        self.sock = s


class Transport:
    """Connections to one daemon. Thread-safe."""

    def __init__(self, address: str, token: str | None = None, timeout: float | None = 300.0):
        self.address = address
        self.token = token
        self.timeout = timeout
        if address.startswith("unix://") or address.startswith("/"):
            self._socket = address[len("unix://"):] if address.startswith("unix://") else address
            if not self._socket:
                raise ValueError(f"address {address!r}: no socket path")
            self._host = None
        elif address.startswith("http://") or address.startswith("tcp://"):
            # tcp://HOST:PORT is how a fleet's daemons advertise themselves.
            u = urllib.parse.urlsplit(address)
            if u.path not in ("", "/") or not u.hostname:
                raise ValueError(f"address {address!r}: want http://host:port without a path")
            self._socket = None
            self._host = (u.hostname, u.port or 80)
        else:
            raise ValueError(f"address {address!r}: want unix:///path/to/socket, http://host:port or tcp://host:port")
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def _connect(self, timeout: float | None) -> http.client.HTTPConnection:
        if self._socket is not None:
            return _UnixConnection(self._socket, timeout)
        return http.client.HTTPConnection(self._host[0], self._host[1], timeout=timeout)

    def _take(self, timeout: float | None) -> http.client.HTTPConnection:
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            return self._connect(timeout)
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn

    def _give(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < 16:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Close the idle connections."""
        with self._lock:
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()

    def request(self, method: str, path: str, *, query: dict[str, Any] | None = None,
                body: bytes | BinaryIO | Iterator[bytes] | None = None, json_body: Any = None,
                content_type: str | None = None, accept: str | None = None,
                timeout: float | None | bool = True) -> "Response":
        """Send one request; return the response when its status is 2xx,
        else raise the typed error its body carries. ``timeout`` True means
        the transport's default; None waits forever."""
        if timeout is True:
            timeout = self.timeout
        url = path
        q = {k: _qv(v) for k, v in (query or {}).items() if v is not None}
        if q:
            url += "?" + urllib.parse.urlencode(q)
        headers = {"User-Agent": "layerfs-python/" + API_VERSION}
        if json_body is not None:
            body = json.dumps(json_body).encode()
            content_type = "application/json"
        if content_type:
            headers["Content-Type"] = content_type
        if accept:
            headers["Accept"] = accept
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        if body is not None and not isinstance(body, (bytes, bytearray)) and not hasattr(body, "read"):
            headers["Transfer-Encoding"] = "chunked"
        # A kept-alive connection the daemon closed meanwhile fails on first
        # use: retry once on a fresh one when nothing can have been sent twice.
        for attempt in (0, 1):
            conn = self._take(timeout)
            reused = conn.sock is not None
            try:
                conn.request(method, url, body=body, headers=headers,
                             encode_chunked=headers.get("Transfer-Encoding") == "chunked")
                resp = conn.getresponse()
            except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected) as e:
                conn.close()
                if reused and attempt == 0 and (body is None or isinstance(body, (bytes, bytearray))):
                    continue
                raise DaemonLost(f"{method} {path}: the connection to {self.address} broke before the answer: {e}") from e
            except (FileNotFoundError, ConnectionRefusedError) as e:
                conn.close()
                raise DaemonUnreachable(f"no daemon answers on {self.address}: {e}") from e
            except OSError as e:
                conn.close()
                raise DaemonUnreachable(f"{method} {path} on {self.address}: {e}") from e
            break
        r = Response(self, conn, resp)
        if 200 <= resp.status < 300:
            return r
        raise r.error()


    def upgrade(self, path: str, json_body: Any, protocol: str) -> tuple[socket.socket, BinaryIO]:
        """POST json_body (None: no body) asking to switch the connection to ``protocol``; on
        101 return the socket (to write to) and a buffered reader of what
        follows, else raise the typed error the answer carries. The
        connection is the caller's, never pooled."""
        body = b"" if json_body is None else json.dumps(json_body).encode()
        host = "layerfsd" if self._host is None else f"{self._host[0]}:{self._host[1]}"
        head = [f"POST {path} HTTP/1.1", f"Host: {host}", "User-Agent: layerfs-python/" + API_VERSION,
                f"Content-Length: {len(body)}", "Connection: Upgrade", f"Upgrade: {protocol}"]
        if json_body is not None:
            head.append("Content-Type: application/json")
        if self.token:
            head.append("Authorization: Bearer " + self.token)
        try:
            if self._socket is not None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.connect(self._socket)
            else:
                sock = socket.create_connection(self._host)
        except (FileNotFoundError, ConnectionRefusedError) as e:
            raise DaemonUnreachable(f"no daemon answers on {self.address}: {e}") from e
        try:
            sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
            r = sock.makefile("rb")
            status = int(r.readline().split()[1])
            headers: dict[str, str] = {}
            while (line := r.readline().decode("latin-1").strip()):
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
        except (OSError, ValueError, IndexError) as e:
            sock.close()
            raise DaemonLost(f"POST {path}: the connection to {self.address} broke before the answer: {e}") from e
        if status == 101:
            return sock, r
        data = r.read(int(headers.get("content-length", "0") or 0))
        sock.close()
        try:
            e = json.loads(data)["error"]
            err = error_for(e.get("code"), e.get("message", ""), status, e.get("node"), e.get("conflicts"))
        except (ValueError, KeyError, TypeError):
            err = error_for(None, f"HTTP {status}: {data.decode('utf-8', 'replace').strip()}", status)
        raise err


def _qv(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


class Response:
    """A 2xx answer; read it whole (``json``, ``read``) or stream it
    (``lines``, ``copy_to``). The connection returns to the pool once the
    body is consumed."""

    def __init__(self, t: Transport, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse):
        self._t, self._conn, self.raw = t, conn, resp
        self.status = resp.status
        self.content_type = resp.getheader("Content-Type", "")

    def _done(self, ok: bool) -> None:
        if self._conn is None:
            return
        conn, self._conn = self._conn, None
        if ok and not self.raw.will_close:
            self._t._give(conn)
        else:
            conn.close()

    def read(self) -> bytes:
        try:
            data = self.raw.read()
        except Exception:
            self._done(False)
            raise
        self._done(True)
        return data

    def json(self) -> Any:
        data = self.read()
        return json.loads(data) if data else None

    def lines(self) -> Iterator[bytes]:
        """The body's lines as they arrive (NDJSON streams)."""
        ok = False
        try:
            while True:
                line = self.raw.readline()
                if not line:
                    break
                yield line
            ok = True
        except (http.client.IncompleteRead, OSError) as e:
            raise DaemonLost(f"the stream from {self._t.address} broke: {e}") from e
        finally:
            self._done(ok)

    def copy_to(self, w: BinaryIO, bufsize: int = 1 << 20) -> int:
        """Copy the body to a binary file; returns the byte count."""
        n, ok = 0, False
        try:
            while True:
                chunk = self.raw.read(bufsize)
                if not chunk:
                    break
                w.write(chunk)
                n += len(chunk)
            ok = True
        except (http.client.IncompleteRead, OSError) as e:
            raise DaemonLost(f"the download from {self._t.address} broke: {e}") from e
        finally:
            self._done(ok)
        return n

    def close(self) -> None:
        """Abandon the body (the connection is not reused)."""
        self._done(False)

    def error(self) -> LayerFSError:
        try:
            data = self.raw.read(64 << 10)
        finally:
            self._done(False)
        try:
            e = json.loads(data)["error"]
            return error_for(e.get("code"), e.get("message", ""), self.status, e.get("node"), e.get("conflicts"))
        except (ValueError, KeyError, TypeError):
            msg = data.decode("utf-8", "replace").strip() or self.raw.reason
            return error_for(None, f"HTTP {self.status}: {msg}", self.status)


def start_daemon(store: str) -> None:
    """Start the Store's daemon as the CLI does (``layerfs daemon start``,
    which exits it after a while unused); needs ``layerfs`` on PATH or in
    ``$LAYERFS_BIN``."""
    exe = None
    bindir = os.environ.get("LAYERFS_BIN")
    if bindir and os.access(os.path.join(bindir, "layerfs"), os.X_OK):
        exe = os.path.join(bindir, "layerfs")
    exe = exe or shutil.which("layerfs")
    if exe is None:
        raise DaemonUnreachable(f"no daemon answers for the Store {store} and layerfs is not on PATH to start one")
    p = subprocess.run([exe, "--store", store, "daemon", "start"], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise DaemonUnreachable(f"layerfs daemon start failed: {p.stderr.strip() or p.stdout.strip()}")
