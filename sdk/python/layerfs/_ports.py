"""Port forwards: connections to ports inside a workspace's sandbox,
carried by the daemon over one upgraded connection each."""

from __future__ import annotations

import socket
import threading
from typing import Any, BinaryIO

PROTOCOL = "layerfs-port/1"


class PortConnection:
    """One TCP connection to a port inside a workspace's sandbox, through
    the daemon: ``sendall``, ``recv``, ``shutdown_write`` (a half-close:
    what the port answers can still be read) and ``close``."""

    def __init__(self, sock: socket.socket, r: BinaryIO):
        self._sock, self._r = sock, r

    def sendall(self, data: bytes) -> None:
        self._sock.sendall(data)

    def recv(self, n: int = 65536) -> bytes:
        """Up to ``n`` bytes as they come; b"" once the port's side ended."""
        return self._r.read1(n)  # type: ignore[attr-defined]

    def shutdown_write(self) -> None:
        self._sock.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        try:
            self._r.close()
        finally:
            self._sock.close()

    def __enter__(self) -> "PortConnection":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class PortForward:
    """A local listener whose every connection is forwarded to a port
    inside a workspace's sandbox; ``address`` is where it listens. Stop it
    with ``close`` (or a ``with`` block)."""

    def __init__(self, dial: Any, listener: socket.socket):
        self._dial, self._l = dial, listener
        self.address = listener.getsockname()
        self._closed = False
        self._t = threading.Thread(target=self._accept, daemon=True)
        self._t.start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self._l.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c: socket.socket) -> None:
        try:
            up = self._dial()
        except Exception:  # the port's error: drop this connection only
            c.close()
            return

        def back() -> None:
            try:
                while (b := up.recv()):
                    c.sendall(b)
                c.shutdown(socket.SHUT_WR)
            except OSError:
                pass

        t = threading.Thread(target=back, daemon=True)
        t.start()
        try:
            while (b := c.recv(65536)):
                up.sendall(b)
            up.shutdown_write()
        except OSError:
            pass
        t.join()
        up.close()
        c.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self._l.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._l.close()

    def __enter__(self) -> "PortForward":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
