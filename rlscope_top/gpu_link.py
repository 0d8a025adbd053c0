"""The monitor's side of the GPU activity agent's socket (no bcc, no textual).

An agent inside the target (rlscope_top/_inject/rlscope_gpu_agent.py) streams
CUPTI records as framed messages. Here we find it (attach mode: a well-known
per-PID socket), or let it find us (launch mode: a socket whose path the child gets
in ``RLSCOPE_GPU_MONITOR``), and read its messages without blocking the collector.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from typing import Callable

from ._agent import load

_A = load()
ENV_MONITOR = _A.ENV_MONITOR
ENV_ACTIVITY = _A.ENV_ACTIVITY
ENV_SOCKET_DIR = _A.ENV_SOCKET_DIR


class AgentLink:
    """One connection to an agent. Reads never block; messages come out in order."""

    def __init__(self, conn: socket.socket):
        conn.setblocking(False)
        self.conn = conn
        self.buf = bytearray()
        self.closed = False
        self.hello: dict | None = None
        self.bye: dict | None = None

    @classmethod
    def connect(cls, path: str, timeout_s: float = 2.0) -> AgentLink | None:
        """Connect to a listening agent; None when nothing listens there."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout_s)
        try:
            s.connect(path)
        except OSError:
            s.close()
            return None
        return cls(s)

    def poll(self) -> list[dict]:
        """Messages that arrived since the last call (``closed`` turns true at EOF)."""
        while not self.closed:
            try:
                chunk = self.conn.recv(1 << 20)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                chunk = b""
            if not chunk:
                self.closed = True
                break
            self.buf += chunk
        out = _A.decode_frames(self.buf)
        for m in out:
            if m.get("t") == "hello":
                self.hello = m
            elif m.get("t") == "bye":
                self.bye = m
        return out

    def wait(self, pred: Callable[[dict], bool], timeout_s: float) -> tuple[dict | None, list[dict]]:
        """Read until a message satisfies ``pred`` (or EOF, or the timeout).

        Returns:
            The matching message (or None) and every message read, in order.
        """
        end = time.monotonic() + timeout_s
        seen: list[dict] = []
        while time.monotonic() < end:
            for m in self.poll():
                seen.append(m)
                if pred(m):
                    return m, seen
            if self.closed:
                break
            time.sleep(0.005)
        return None, seen

    def send(self, msg: dict) -> bool:
        """Send one control message (start, stop)."""
        try:
            self.conn.setblocking(True)
            self.conn.sendall(_A.encode(msg))
            return True
        except OSError:
            return False
        finally:
            try:
                self.conn.setblocking(False)
            except OSError:
                pass

    def close(self) -> None:
        """Hang up (a listening agent turns CUPTI off and waits for the next monitor)."""
        try:
            self.conn.close()
        except OSError:
            pass
        self.closed = True


class LaunchListener:
    """Launch mode: a private socket the child's agent connects to at start-up."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="rlscope-top-run-")
        self.path = os.path.join(self.dir, "monitor.sock")
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(self.path)
        self.srv.listen(8)
        self.srv.setblocking(False)

    def env(self) -> dict[str, str]:
        """What the child's environment needs for its agent to find us."""
        return {ENV_MONITOR: self.path}

    def accept(self, timeout_s: float, keep_waiting: Callable[[], bool]) -> AgentLink | None:
        """The first agent that connects and says hello, or None."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end and keep_waiting():
            link = self.accept_nowait()
            if link is not None:
                hello, _ = link.wait(lambda m: m.get("t") == "hello", 5.0)
                if hello is not None:
                    return link
                link.close()
            time.sleep(0.01)
        return None

    def accept_nowait(self) -> AgentLink | None:
        """An agent waiting to connect, if any."""
        try:
            conn, _ = self.srv.accept()
        except (BlockingIOError, InterruptedError, OSError):
            return None
        return AgentLink(conn)

    def close(self) -> None:
        """Stop listening and remove the socket."""
        try:
            self.srv.close()
            os.unlink(self.path)
            os.rmdir(self.dir)
        except OSError:
            pass


def target_uid(pid: int) -> int | None:
    """Real uid of a process (its agent's socket directory is per uid)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def target_env(pid: int, name: str) -> str | None:
    """One variable of a process's initial environment (root can read it)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            for item in f.read().split(b"\0"):
                k, _, v = item.partition(b"=")
                if k.decode(errors="replace") == name:
                    return v.decode(errors="replace")
    except OSError:
        pass
    return None


def discover(pid: int) -> str | None:
    """The socket of a listening agent in ``pid``, if it has one."""
    uid = target_uid(pid)
    if uid is None:
        return None
    path = _A.socket_path(pid, uid, target_env(pid, ENV_SOCKET_DIR))
    return path if os.path.exists(path) else None
