"""rlscope-top's GPU activity agent: runs *inside* the profiled process.

It turns on CUPTI activity collection (cupti-python) and streams kernel, memcpy,
memset and CUDA API records in batches over a unix socket to the monitor. The
monitor merges them into its msgpack ring (docs/ring-format.md).

This file is self-contained on purpose (standard library, cupti-python, and msgpack
when present): in launch mode (``rlscope-top run``) it is loaded by the
``sitecustomize.py`` beside it into whatever Python the command runs, which need
not have rlscope-top installed.

Two ways to meet a monitor:

* launch mode: ``RLSCOPE_GPU_MONITOR`` names the monitor's socket. The agent
  connects at interpreter start, says hello with its PID and *waits* until the
  monitor has attached its eBPF probes and answers ``start``; so nothing the
  program does is missed.
* listen mode: ``enable_gpu_activity()`` (or ``RLSCOPE_GPU_ACTIVITY=1``) listens on
  a well-known per-PID socket (:func:`socket_path`). Whenever a monitor attaches
  and connects, CUPTI activity is turned on; when it goes away, off again.

Wire format: frames of ``[u32 length][u8 encoding][payload]`` where encoding is
``m`` (msgpack) or ``j`` (JSON); payloads are maps with a type key ``t``.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import socket
import struct
import sys
import threading
import time

PROTO = 1
ENV_MONITOR = "RLSCOPE_GPU_MONITOR"
ENV_ACTIVITY = "RLSCOPE_GPU_ACTIVITY"
ENV_SOCKET_DIR = "RLSCOPE_GPU_SOCKET_DIR"
HOLD_TIMEOUT_S = 60.0       # launch mode: run anyway if the monitor never says start
FLUSH_PERIOD_S = 0.5        # completed CUPTI buffers reach the monitor within this
BUFFER_BYTES = 4 << 20
QUEUE_BATCHES = 512         # batches waiting to be sent; beyond this they are dropped (counted)
HEADER = struct.Struct("<IB")

# Kinds asked of CUPTI. CONCURRENT_KERNEL does not serialize kernels (KERNEL would).
ACTIVITY_KINDS = ("CONCURRENT_KERNEL", "MEMCPY", "MEMSET", "RUNTIME", "DRIVER")
# API records are forwarded only for calls that put work on the GPU: the others
# (cudaGetDevice, ...) are frequent and join nothing.
_API_WORDS = ("Launch", "Memcpy", "Memset", "memcpy", "memset", "GraphLaunch")

try:  # optional: the target's environment may lack it
    import msgpack as _msgpack
except Exception:  # pragma: no cover - depends on the target's environment
    _msgpack = None


# -- wire ------------------------------------------------------------------
def encode(msg: dict) -> bytes:
    """One frame for ``msg`` (msgpack when available, JSON otherwise)."""
    if _msgpack is not None:
        body, enc = _msgpack.packb(msg, use_bin_type=True), b"m"
    else:
        body, enc = json.dumps(msg, separators=(",", ":")).encode(), b"j"
    return HEADER.pack(len(body), enc[0]) + body


def decode_frames(buf: bytearray) -> list[dict]:
    """Remove and decode every whole frame at the start of ``buf``."""
    out = []
    while len(buf) >= HEADER.size:
        n, enc = HEADER.unpack_from(buf)
        if len(buf) < HEADER.size + n:
            break
        body = bytes(buf[HEADER.size:HEADER.size + n])
        del buf[:HEADER.size + n]
        if enc == ord("m"):
            import msgpack  # the monitor always has it

            out.append(msgpack.unpackb(body, raw=False, strict_map_key=False))
        else:
            out.append(json.loads(body))
    return out


def socket_path(pid: int, uid: int | None = None, base: str | None = None) -> str:
    """The well-known socket a listening agent of ``pid`` accepts monitors on."""
    uid = os.getuid() if uid is None else uid
    base = base or os.environ.get(ENV_SOCKET_DIR) or "/tmp"
    return os.path.join(base, f"rlscope-top-{uid}", f"gpu-{pid}.sock")


# -- CUPTI records -> compact lists ------------------------------------------
class Converter:
    """Turns cupti-python activity records into compact lists (names interned).

    Item layouts (CUPTI timestamps, ns):
      kernel [start, end, device_id, stream_id, correlation_id, name_id]
      memcpy [start, end, device_id, stream_id, correlation_id, bytes, copy_kind]
      memset [start, end, device_id, stream_id, correlation_id, bytes]
      api    [start, end, thread_id, correlation_id, cbid, domain]  domain 0 runtime, 1 driver
    """

    def __init__(self, cupti):
        kinds = cupti.ActivityKind
        self.cupti = cupti
        self.k_kernel = {int(kinds.CONCURRENT_KERNEL), int(kinds.KERNEL)}
        self.k_memcpy, self.k_memset = int(kinds.MEMCPY), int(kinds.MEMSET)
        self.k_runtime, self.k_driver = int(kinds.RUNTIME), int(kinds.DRIVER)
        self.names: dict[str, int] = {}
        self._api_keep: dict[tuple[int, int], bool] = {}

    def batch(self, activities) -> dict:
        """A batch message for one completed CUPTI buffer."""
        k, m, s, a, new = [], [], [], [], {}
        for r in activities:
            kind = r.kind
            if kind in self.k_kernel:
                nid = self.names.get(r.name)
                if nid is None:
                    nid = self.names[r.name] = len(self.names)
                    new[nid] = r.name
                k.append([r.start, r.end, r.device_id, r.stream_id, r.correlation_id, nid])
            elif kind == self.k_memcpy:
                m.append([r.start, r.end, r.device_id, r.stream_id, r.correlation_id, r.bytes, r.copy_kind])
            elif kind == self.k_memset:
                s.append([r.start, r.end, r.device_id, r.stream_id, r.correlation_id, r.bytes])
            elif kind in (self.k_runtime, self.k_driver):
                dom = 0 if kind == self.k_runtime else 1
                if self._keep_api(dom, r.cbid):
                    a.append([r.start, r.end, r.thread_id, r.correlation_id, r.cbid, dom])
        return {"t": "act", "k": k, "m": m, "s": s, "a": a, "names": new}

    def _keep_api(self, dom: int, cbid: int) -> bool:
        key = (dom, cbid)
        keep = self._api_keep.get(key)
        if keep is None:
            keep = self._api_keep[key] = any(w in self.api_name(dom, cbid) for w in _API_WORDS)
        return keep

    def api_name(self, dom: int, cbid: int) -> str:
        """The CUDA function a (domain, cbid) pair names, e.g. cudaLaunchKernel_v7000."""
        c = self.cupti
        try:   # the enums need no driver call
            return (c.RuntimeApiTraceCbid if dom == 0 else c.DriverApiTraceCbid)(cbid).name
        except Exception:
            pass
        domain = c.CallbackDomain.RUNTIME_API if dom == 0 else c.CallbackDomain.DRIVER_API
        try:
            return str(c.get_callback_name(domain, cbid))
        except Exception:
            return f"cbid {cbid}"


def classify_error(exc: BaseException, cupti=None) -> tuple[str, str]:
    """(code, one line saying what is missing and how to fix it) for a CUPTI failure."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, ImportError):
        return "not_installed", ("cupti-python is not installed in the target's Python: "
                                 "`pip install cupti-python` there (it needs an NVIDIA driver and GPU)")
    status = getattr(exc, "status", None)
    if cupti is not None and status is not None:
        res = cupti.Result
        if status in (int(res.ERROR_INSUFFICIENT_PRIVILEGES),
                      int(res.ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES)):
            return "no_permission", ("CUPTI_ERROR_INSUFFICIENT_PRIVILEGES: the NVIDIA driver lets only admins "
                                     "profile; run the target as root, or load the driver with "
                                     "NVreg_RestrictProfilingToAdminUsers=0")
    if "libcuda" in text or "driver is not found" in text.lower():
        return "no_driver", ("no NVIDIA driver (libcuda.so.1 not found): kernel timing needs an NVIDIA GPU "
                             "and its driver; CPU-side CUDA API figures still work")
    if "NO_DEVICE" in text.upper() or "no CUDA-capable device" in text:
        return "no_gpu", "no CUDA device visible to the target (check CUDA_VISIBLE_DEVICES and nvidia-smi)"
    return "error", f"CUPTI failed: {text[:160]}"


# -- the agent ---------------------------------------------------------------
class Agent:
    """Collects CUPTI activity and sends it to one monitor connection at a time.

    Args:
        cupti: the ``cupti.cupti`` module, or an object with the same functions and
            record classes (tests inject a source of real record objects here).
    """

    def __init__(self, cupti=None):
        self._cupti = cupti
        self._conn: socket.socket | None = None
        self._send_lock = threading.RLock()
        self._queue: queue.Queue = queue.Queue(QUEUE_BATCHES)
        self._active = False
        self._registered = False
        self._stop = threading.Event()
        self.records = self.dropped = 0
        self.conv: Converter | None = None
        self._threads: list[threading.Thread] = []

    # -- CUPTI on/off ------------------------------------------------------
    def _module(self):
        if self._cupti is None:
            from cupti import cupti  # noqa: PLC0415 - optional, and slow-ish to import

            self._cupti = cupti
        return self._cupti

    def enable(self) -> dict:
        """Turn CUPTI activity on. Returns a status message (ok, or code + one line)."""
        try:
            c = self._module()
            if self.conv is None:
                self.conv = Converter(c)
            if not self._registered:
                c.activity_register_callbacks(self._buffer_requested, self._buffer_completed)
                self._registered = True
            for name in ACTIVITY_KINDS:
                c.activity_enable(getattr(c.ActivityKind, name))
        except BaseException as e:  # ImportError, NotSupportedError (no driver), cuptiError
            code, msg = classify_error(e, self._cupti if not isinstance(e, ImportError) else None)
            return {"t": "status", "ok": False, "code": code, "msg": msg}
        self._active = True
        self._start_threads()
        return {"t": "status", "ok": True, "code": "ok", "msg": "CUPTI activity on", "kinds": list(ACTIVITY_KINDS)}

    def disable(self, forced: bool = True) -> None:
        """Turn collection off and push out what CUPTI still holds."""
        if not self._active:
            return
        self._active = False
        c = self._cupti
        for name in ACTIVITY_KINDS:
            try:
                c.activity_disable(getattr(c.ActivityKind, name))
            except Exception:
                pass
        self.flush(forced)

    def flush(self, forced: bool = False) -> None:
        """Ask CUPTI for its completed buffers (all of them when forced)."""
        try:
            self._cupti.activity_flush_all(1 if forced else 0)
        except Exception:
            pass
        self._drain_queue()

    def _buffer_requested(self):
        return BUFFER_BYTES, 0

    def _buffer_completed(self, activities) -> None:
        # Runs on a CUPTI thread or in flush(): convert now, send from the sender thread.
        msg = self.conv.batch(activities)
        n = len(msg["k"]) + len(msg["m"]) + len(msg["s"])
        if not (n or msg["a"]):
            return
        msg["clock"] = self._clock()
        self.records += n
        try:
            self._queue.put_nowait(msg)
        except queue.Full:
            self.dropped += n

    def _clock(self) -> list[int]:
        """[cupti timestamp, CLOCK_MONOTONIC ns] taken together: the monitor's offset."""
        a = time.monotonic_ns()
        c = self._cupti.get_timestamp()
        b = time.monotonic_ns()
        return [int(c), (a + b) // 2]

    # -- threads -----------------------------------------------------------
    def _start_threads(self) -> None:
        if self._threads:
            return
        for fn, name in ((self._sender, "rlscope-gpu-send"), (self._flusher, "rlscope-gpu-flush")):
            t = threading.Thread(target=fn, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def _sender(self) -> None:
        while not self._stop.is_set():
            with self._send_lock:          # taken with the lock: bye can never overtake it
                try:
                    msg = self._queue.get_nowait()
                except queue.Empty:
                    msg = None
                if msg is not None:
                    self._send_locked(msg)
            if msg is None:
                time.sleep(0.02)

    def _drain_queue(self) -> None:
        while True:
            try:
                msg = self._queue.get_nowait()
            except queue.Empty:
                return
            self._send_or_drop(msg)

    def _send_or_drop(self, msg: dict) -> None:
        with self._send_lock:
            self._send_locked(msg)

    def _send_locked(self, msg: dict) -> None:
        if not self._sendall(msg) and msg.get("t") == "act":
            self.dropped += len(msg["k"]) + len(msg["m"]) + len(msg["s"])

    def _flusher(self) -> None:
        while not self._stop.wait(FLUSH_PERIOD_S):
            if self._active:
                try:
                    self._cupti.activity_flush_all(0)
                except Exception:
                    pass

    # -- the monitor connection ------------------------------------------
    def send(self, msg: dict) -> bool:
        """Send one message to the monitor; False when there is none (or it went away)."""
        with self._send_lock:
            return self._sendall(msg)

    def _sendall(self, msg: dict) -> bool:
        conn = self._conn
        if conn is None:
            return False
        try:
            conn.sendall(encode(msg))
            return True
        except OSError:
            self._conn = None
            return False

    def hello(self, mode: str) -> dict:
        """The first message: who we are."""
        return {"t": "hello", "proto": PROTO, "pid": os.getpid(), "mode": mode,
                "python": sys.version.split()[0], "exe": sys.executable}

    def serve(self, conn: socket.socket, mode: str) -> None:
        """Talk to one monitor until it goes away: start, stream, stop."""
        self._conn = conn
        if not self.send(self.hello(mode)):
            return
        for msg in _messages(conn):
            if msg.get("t") == "start":
                self.send(self.enable() if msg.get("collect", True) else
                          {"t": "status", "ok": False, "code": "not_collecting", "msg": "not collecting"})
            elif msg.get("t") == "stop":
                break
        self.disable()
        self.send(self.bye())
        with self._send_lock:
            self._conn = None
        _close(conn)

    def bye(self) -> dict:
        """The last message: how many records were sent and dropped."""
        return {"t": "bye", "records": self.records, "dropped": self.dropped}

    def at_exit(self) -> None:
        """Interpreter exit: flush CUPTI (forced), send it all, say bye."""
        self.disable(forced=True)
        self._drain_queue()
        self.send(self.bye())
        self._stop.set()


def _messages(conn: socket.socket):
    """Yield decoded messages from a connection until EOF."""
    buf = bytearray()
    while True:
        try:
            chunk = conn.recv(65536)
        except OSError:
            return
        if not chunk:
            return
        buf += chunk
        yield from decode_frames(buf)


def _close(conn: socket.socket) -> None:
    try:
        conn.close()
    except OSError:
        pass


# -- entry points ------------------------------------------------------------
_AGENT: Agent | None = None


def agent(cupti=None) -> Agent:
    """The process's one agent (created on first use)."""
    global _AGENT
    if _AGENT is None:
        _AGENT = Agent(cupti)
    elif cupti is not None:
        _AGENT._cupti = cupti
    return _AGENT


def launch_hook(path: str | None = None, timeout_s: float = HOLD_TIMEOUT_S) -> None:
    """Launch mode: connect to the monitor, wait for ``start``, keep streaming in a thread.

    Called from sitecustomize before the user's code. Returns when the monitor has
    attached (or at once when there is no monitor to talk to).
    """
    path = path or os.environ.get(ENV_MONITOR)
    if not path:
        return
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(timeout_s)
        conn.connect(path)
    except OSError:
        return                               # the monitor is gone: run unmonitored
    a = agent()
    a._conn = conn
    if not a.send(a.hello("launch")):
        return
    buf = bytearray()
    start = None
    try:
        while start is None:
            chunk = conn.recv(65536)
            if not chunk:
                return
            buf += chunk
            start = next((m for m in decode_frames(buf) if m.get("t") == "start"), None)
    except OSError:
        return
    conn.settimeout(None)
    if start.get("collect", True):
        a.send(a.enable())
        atexit.register(a.at_exit)
    threading.Thread(target=_after_start, args=(a, conn), name="rlscope-gpu-ctl", daemon=True).start()


def _after_start(a: Agent, conn: socket.socket) -> None:
    for msg in _messages(conn):
        if msg.get("t") == "stop":
            a.disable()
            a.send(a.bye())
            return


def listen(cupti=None, path: str | None = None) -> str:
    """Listen mode: serve monitors on the well-known per-PID socket. Returns its path."""
    a = agent(cupti)
    path = path or socket_path(os.getpid())
    d = os.path.dirname(path)
    os.makedirs(d, mode=0o700, exist_ok=True)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    os.chmod(path, 0o600)
    srv.listen(2)
    threading.Thread(target=_accept_loop, args=(a, srv), name="rlscope-gpu-listen", daemon=True).start()
    atexit.register(_cleanup, a, path)
    return path


def _accept_loop(a: Agent, srv: socket.socket) -> None:
    while True:
        try:
            conn, _ = srv.accept()
        except OSError:
            return
        if not _peer_allowed(conn):
            _close(conn)
            continue
        a.serve(conn, "listen")


def _peer_allowed(conn: socket.socket) -> bool:
    """Only root or our own user may read our GPU activity (SO_PEERCRED)."""
    try:
        _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    except OSError:
        return False
    return uid in (0, os.getuid())


def _cleanup(a: Agent, path: str) -> None:
    a.at_exit()
    try:
        os.unlink(path)
    except OSError:
        pass
