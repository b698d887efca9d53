"""Attached execs: input streamed as it is written, and terminals.

An attached exec runs over one upgraded connection (``Upgrade:
layerfs-attach/1``) carrying frames both ways: a type byte, a 4-byte
big-endian length and the payload (see docs/api.md, "Attached execs").
"""

from __future__ import annotations

import json
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any, BinaryIO

from .errors import DaemonLost, LayerFSError, error_for
from .types import ExecResult, from_json

PROTOCOL = "layerfs-attach/1"
MAX_PAYLOAD = 1 << 20

# Frame types (wire.Frame*).
STDIN, STDIN_END, RESIZE = b"i", b"c", b"r"
STDOUT, STDERR, END = b"o", b"e", b"x"

BytesCallback = Callable[[bytes], Any]


def write_frame(sock: socket.socket, typ: bytes, payload: bytes = b"") -> None:
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"a frame carries at most {MAX_PAYLOAD} bytes")
    sock.sendall(typ + struct.pack(">I", len(payload)) + payload)


def read_frame(r: BinaryIO) -> tuple[bytes, bytes] | None:
    """One frame, or None at the end of the stream between frames."""
    head = r.read(5)
    if not head:
        return None
    if len(head) < 5:
        raise DaemonLost("the attached exec's stream was cut in a frame's header")
    (n,) = struct.unpack(">I", head[1:])
    if n > MAX_PAYLOAD:
        raise DaemonLost(f"a frame of {n} bytes, more than {MAX_PAYLOAD}")
    payload = r.read(n) if n else b""
    if len(payload) < n:
        raise DaemonLost("the attached exec's stream was cut in a frame")
    return head[:1], payload


class Attached:
    """An exec attached over one connection to its daemon (from
    ``Workspace.attach`` or ``Workspace.pty``). ``write`` sends its input as
    it comes, ``resize`` a terminal's new size, ``wait`` returns its
    :class:`ExecResult` once it has ended. Its output goes to the callbacks
    as bytes as it comes (on a thread of its own), or into the result for a
    stream without one. ``close`` (or leaving a ``with`` block) drops the
    connection: the input ends, a terminal is hung up (its session gets
    SIGHUP), and a command still running 5 s later is killed."""

    def __init__(self, sock: socket.socket, r: BinaryIO, on_stdout: BytesCallback | None,
                 on_stderr: BytesCallback | None):
        self._sock, self._r = sock, r
        self._wlock = threading.Lock()
        self._done = threading.Event()
        self._result: ExecResult | None = None
        self._error: LayerFSError | None = None
        self._thread = threading.Thread(target=self._read, args=(on_stdout, on_stderr), daemon=True)
        self._thread.start()

    def _read(self, on_stdout: BytesCallback | None, on_stderr: BytesCallback | None) -> None:
        out, err = bytearray(), bytearray()
        try:
            while True:
                f = read_frame(self._r)
                if f is None:
                    raise DaemonLost("the attached exec's connection ended before its result")
                typ, p = f
                if typ == STDOUT:
                    on_stdout(p) if on_stdout else out.extend(p)
                elif typ == STDERR:
                    on_stderr(p) if on_stderr else err.extend(p)
                elif typ == END:
                    ev = json.loads(p)
                    if ev.get("error"):
                        e = ev["error"]
                        raise error_for(e.get("code"), e.get("message", ""), None, e.get("node"), e.get("conflicts"))
                    self._result = from_json(ExecResult, ev.get("result"))
                    self._result.stdout_bytes, self._result.stderr_bytes = bytes(out), bytes(err)
                    return
        except LayerFSError as e:
            self._error = e
        except (OSError, ValueError) as e:
            self._error = DaemonLost(f"the attached exec's connection broke: {e}")
        finally:
            self._done.set()
            self._r.close()
            self._sock.close()

    def _frame(self, typ: bytes, payload: bytes = b"") -> None:
        """Send one frame. Once the exec has ended, the end of its input and
        a resize are moot, and input raises."""
        with self._wlock:
            if self._done.is_set():
                if typ == STDIN:
                    raise DaemonLost("the attached exec has ended: it takes no more input")
                return
            try:
                write_frame(self._sock, typ, payload)
            except OSError as e:
                if self._done.is_set() and typ != STDIN:
                    return
                raise DaemonLost(f"the attached exec's connection broke: {e}") from e

    def write(self, data: bytes | str) -> None:
        """Send ``data`` (text is sent as UTF-8) as the command's input."""
        b = data.encode() if isinstance(data, str) else bytes(data)
        for i in range(0, len(b), MAX_PAYLOAD):
            self._frame(STDIN, b[i:i + MAX_PAYLOAD])

    def close_stdin(self) -> None:
        """End the command's input; on a terminal this hangs it up."""
        self._frame(STDIN_END)

    def resize(self, rows: int, cols: int) -> None:
        """Give a terminal a new size."""
        self._frame(RESIZE, json.dumps({"rows": rows, "cols": cols}).encode())

    def wait(self, timeout: float | None = None) -> ExecResult:
        """Wait for the exec to end and return its result (TimeoutError
        past ``timeout`` seconds)."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"the attached exec did not end within {timeout} s")
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def close(self) -> None:
        """Drop the connection (see the class)."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._done.wait()

    def __enter__(self) -> "Attached":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
