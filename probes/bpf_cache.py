"""The compiled BPF program, kept between sessions: attach without compiling.

bcc compiles the program with clang/LLVM in every session: 1.6 s on an idle Intel VM, 5 s
on the AMD one, several times that beside a busy target (issue 16). What the compile yields
is a set of maps and, per function, eBPF instructions whose map references are the fds of
those maps. This module keeps that (the instructions with their map references made
relative, each map's kernel attributes and bcc's type descriptions) in a private file keyed
by everything the compile depends on: the source text, bcc's version, the kernel build and
the tracepoint formats the program reads. A later session creates the maps again, points the
instructions at them and loads them with bpf(2); the kernel's verifier still checks every
program. ``cached_bpf_class()`` is a ``bcc.BPF`` subclass without a compiled module, so the loader, bcc's
attach calls and bcc's table classes work on it unchanged.

The file is root's, in a 0700 directory we own (rlscope_top/safe_files.py), read without
following symlinks: a program the kernel runs must not come from a file another user can
write. ``RLSCOPE_BPF_CACHE=0`` turns the cache off; ``RLSCOPE_CACHE_DIR`` moves it.
"""

from __future__ import annotations

import atexit
import ctypes as ct
import functools
import hashlib
import json
import os
import re
import signal
import time

import msgpack

from ..safe_files import private_dir, read_trusted, write_atomic
from .uprobe_multi import _attr, _bpf, _put

FORMAT = 1                                  # of the cache file; part of the key
DEFAULT_DIR = "/var/cache/rlscope-top"
KEEP = 32                                   # cache files kept (newest first)
MAX_FILE = 16 << 20
BPF_MAP_CREATE, BPF_PROG_LOAD, BPF_OBJ_GET_INFO_BY_FD = 0, 5, 15
LOG_STATS = 4                               # BPF_LOG_STATS: only the verifier's totals in the log
LD_IMM64 = 0x18                             # BPF_LD | BPF_IMM | BPF_DW: two instructions
MAP_REFS = (1, 2)                           # src_reg BPF_PSEUDO_MAP_FD, BPF_PSEUDO_MAP_VALUE
AUTOLOAD = (b"tracepoint__", b"raw_tracepoint__")   # bcc attaches these itself; we replay it
NOT_KEPT = (b"kprobe__", b"kretprobe__", b"kfunc__", b"kretfunc__", b"lsm__")
TRACEPOINT_DIRS = ("/sys/kernel/tracing/events", "/sys/kernel/debug/tracing/events")

_bcc_lib = None


def enabled() -> bool:
    """Whether sessions use the cache (``RLSCOPE_BPF_CACHE=0`` turns it off)."""
    return os.environ.get("RLSCOPE_BPF_CACHE", "1") != "0"


def cache_dir() -> str:
    """The cache directory (``RLSCOPE_CACHE_DIR``, else /var/cache/rlscope-top)."""
    return os.environ.get("RLSCOPE_CACHE_DIR") or DEFAULT_DIR


def key(text: str) -> str:
    """What the compiled program depends on, hashed: source, bcc, kernel build, tracepoint
    formats, and bcc's environment variables (BCC_KERNEL_SOURCE picks other headers)."""
    import bcc  # noqa: PLC0415 - only where bcc is
    u = os.uname()
    h = hashlib.sha256()
    bcc_env = sorted(f"{k}={v}" for k, v in os.environ.items() if k.startswith("BCC_"))   # e.g. BCC_KERNEL_SOURCE
    for part in (str(FORMAT), getattr(bcc, "__version__", "?"), u.release, u.version, u.machine, text,
                 *_tracepoint_formats(text), *bcc_env):
        h.update(part.encode(errors="replace"))
        h.update(b"\0")
    return h.hexdigest()[:32]


def _tracepoint_formats(text: str) -> list[str]:
    out = []
    for cat, name in re.findall(r"TRACEPOINT_PROBE\(\s*(\w+)\s*,\s*(\w+)\s*\)", text):
        for d in TRACEPOINT_DIRS:
            try:
                with open(f"{d}/{cat}/{name}/format") as f:
                    out.append(f.read())
                break
            except OSError:
                continue
        else:
            out.append(f"{cat}:{name}: no format")
    return out


def path_for(text: str) -> str:
    return os.path.join(cache_dir(), f"bpf-{key(text)}.msgpack")


# -- saving ------------------------------------------------------------------
def save(bpf, text: str) -> str | None:
    """Keep what bcc compiled from ``text``. Returns why not (None: kept)."""
    if not enabled():
        return "off (RLSCOPE_BPF_CACHE=0)"
    try:
        private_dir(cache_dir())        # an unsafe directory is said before anything is read
        rec = capture(bpf)
    except Exception as e:              # UnsafePath: the session goes on, compiled
        return _why(e)
    if isinstance(rec, str):
        return rec
    why = write_private(path_for(text), rec)
    if why is None:
        _prune(cache_dir())
    return why


def capture(bpf) -> dict | str:
    """The maps and instructions of a compiled bcc module, or why they cannot be kept."""
    lib, m = _lib(), bpf.module
    maps, by_fd = [], {}
    for i in range(lib.bpf_num_tables(m)):
        fd = lib.bpf_table_fd_id(m, i)
        if fd < 0:
            return f"table {i} has no map"
        name = lib.bpf_table_name(m, i)
        maps.append({"name": name.decode(), **_map_info(fd),
                     "key_desc": (lib.bpf_table_key_desc_id(m, i) or b"").decode(),
                     "leaf_desc": (lib.bpf_table_leaf_desc_id(m, i) or b"").decode(),
                     "flags_id": lib.bpf_table_flags_id(m, i),
                     "fields": [lib.bpf_perf_event_field(m, name, j) for j in range(lib.bpf_perf_event_fields(m, name))]})
        by_fd[fd] = i
    funcs = {}
    for j in range(lib.bpf_num_functions(m)):
        name = lib.bpf_function_name(m, j)
        if name.startswith(NOT_KEPT):
            return f"{name.decode()} is attached by bcc itself"
        code = ct.string_at(lib.bpf_function_start(m, name), lib.bpf_function_size(m, name))
        refs = map_refs(code, by_fd)
        if refs is None:
            return f"{name.decode()} refers to a map bcc does not list"
        funcs[name.decode()] = {"code": code, "refs": refs}
    return {"format": FORMAT, "license": lib.bpf_module_license(m) or b"GPL",
            "kern_version": lib.bpf_module_kern_version(m), "maps": maps, "funcs": funcs}


def map_refs(code: bytes, by_fd: dict[int, int]) -> list[list[int]] | None:
    """[instruction, map index] for every map reference in ``code``; None for an unknown fd."""
    refs, i, n = [], 0, len(code) // 8
    while i < n:
        if code[8 * i] == LD_IMM64:
            if code[8 * i + 1] >> 4 in MAP_REFS:
                fd = int.from_bytes(code[8 * i + 4:8 * i + 8], "little", signed=True)
                if fd not in by_fd:
                    return None
                refs.append([i, by_fd[fd]])
            i += 2
        else:
            i += 1
    return refs


def _map_info(fd: int) -> dict:
    """The kernel's own record of a map (struct bpf_map_info): what to create it with again."""
    info = (ct.c_uint8 * 88)()
    attr = _attr()
    _put(attr, 0, fd, 4)
    _put(attr, 4, len(info), 4)
    _put(attr, 8, ct.addressof(info), 8)
    _bpf(BPF_OBJ_GET_INFO_BY_FD, attr)
    u32 = lambda off: int.from_bytes(bytes(info[off:off + 4]), "little")   # noqa: E731
    return {"type": u32(0), "key_size": u32(8), "value_size": u32(12), "max_entries": u32(16),
            "map_flags": u32(20)}


def _prune(d: str) -> None:
    files = sorted((e for e in os.scandir(d) if e.name.startswith("bpf-") and e.is_file(follow_symlinks=False)),
                   key=lambda e: e.stat(follow_symlinks=False).st_mtime, reverse=True)
    for e in files[KEEP:]:
        try:
            os.unlink(e.path)
        except OSError:
            pass


# -- loading -----------------------------------------------------------------
def read(text: str) -> dict | None:
    """The kept record for ``text``, or None: none, off, or a file we must not trust."""
    rec = read_private(path_for(text)) if enabled() else None
    return rec if isinstance(rec, dict) and rec.get("format") == FORMAT else None


def read_private(path: str):
    """What a msgpack file in the cache directory holds, or None: missing, unreadable, not
    plainly ours (a symlink, another owner, writable by others), or not msgpack."""
    try:
        private_dir(os.path.dirname(path))
        raw = read_trusted(path, MAX_FILE)
    except Exception:           # none yet, an unsafe directory (save says so), not ours, too large
        return None
    try:
        return msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except Exception:           # truncated: as if missing
        return None


def write_private(path: str, value) -> str | None:
    """Write ``value`` as msgpack to a file in the cache directory. Returns why not (None: done)."""
    try:
        private_dir(os.path.dirname(path))
        write_atomic(path, msgpack.packb(value, use_bin_type=True))
    except Exception as e:              # UnsafePath, a full disk
        return _why(e)
    return None


def _why(e: Exception) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def forget(text: str) -> None:
    """Drop the kept record for ``text`` (the kernel refused it)."""
    try:
        os.unlink(path_for(text))
    except OSError:
        pass


def load(text: str):
    """A ``CachedBPF`` for ``text`` from the cache, or None (then compile). A record the
    kernel refuses is dropped."""
    rec = read(text)
    if rec is None:
        return None
    try:
        return cached_bpf_class()(rec)
    except Exception:
        forget(text)
        return None


class KeptMemo:
    """A dict of (file identity, question) -> answer that outlives the session: lookups that
    read a library's symbol tables (bcc's symbol offsets, which libraries define MuJoCo) cost
    10-700 ms per attach on real programs and give the same answer until the file changes.
    Keys are tuples whose first five items are (path, dev, inode, mtime_ns, size)."""

    def __init__(self, name: str, limit: int = 4096):
        self.name, self.limit = name, limit
        self.memo: dict[tuple, object] = {}
        self._loaded = self._dirty = False

    def _file(self) -> str:
        return os.path.join(cache_dir(), f"{self.name}.msgpack")

    def get(self, key: tuple, compute):
        """The answer for ``key`` (a tuple of plain values), computed once per file version."""
        if not self._loaded:
            self._loaded = True
            kept = read_private(self._file()) if enabled() else None
            if isinstance(kept, list):
                for row in kept[:self.limit]:
                    if isinstance(row, list) and len(row) == 2 and isinstance(row[0], list):
                        self.memo[_tuple(row[0])] = row[1]
        if key not in self.memo:
            if len(self.memo) >= self.limit:
                self.memo.clear()
            self.memo[key] = compute()
            self._dirty = True
        return self.memo[key]

    def save(self) -> None:
        """Keep what this process looked up for the next session (when there is anything new)."""
        if self._dirty and enabled():
            write_private(self._file(), [[list(k), v] for k, v in self.memo.items()])
            self._dirty = False


def _tuple(v):
    return tuple(_tuple(x) for x in v) if isinstance(v, list) else v


def file_id(path: str) -> tuple:
    """(path, dev, inode, mtime_ns, size): a library file's version, for KeptMemo keys."""
    st = os.stat(path)
    return (path, st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def _lib():
    """libbcc with the module queries bcc's Python binding leaves undeclared."""
    global _bcc_lib
    if _bcc_lib is None:
        from bcc.libbcc import lib  # noqa: PLC0415
        sig = {"bpf_num_tables": (ct.c_size_t, [ct.c_void_p]),
               "bpf_table_name": (ct.c_char_p, [ct.c_void_p, ct.c_size_t]),
               "bpf_table_fd_id": (ct.c_int, [ct.c_void_p, ct.c_size_t]),
               "bpf_table_key_desc_id": (ct.c_char_p, [ct.c_void_p, ct.c_size_t]),
               "bpf_table_leaf_desc_id": (ct.c_char_p, [ct.c_void_p, ct.c_size_t])}
        for name, (res, args) in sig.items():
            f = getattr(lib, name)
            f.restype, f.argtypes = res, args
        _bcc_lib = lib
    return _bcc_lib


class _Module:
    """Stands where bcc keeps its compiled module: the map attributes bcc's tables ask for."""

    def __init__(self, maps: list[dict]):
        self.maps = maps
        self.index = {m["name"]: i for i, m in enumerate(maps)}


class _Answers:
    """bcc's table module asks the compiled module about a map (type, flags, size, event
    fields); for a ``_Module`` this answers from the record, otherwise it asks libbcc."""

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        return getattr(self._real, name)

    def bpf_table_type_id(self, mod, i):
        return mod.maps[i]["type"] if isinstance(mod, _Module) else self._real.bpf_table_type_id(mod, i)

    def bpf_table_flags_id(self, mod, i):
        return mod.maps[i]["flags_id"] if isinstance(mod, _Module) else self._real.bpf_table_flags_id(mod, i)

    def bpf_table_max_entries_id(self, mod, i):
        if isinstance(mod, _Module):
            return mod.maps[i]["max_entries"]
        return self._real.bpf_table_max_entries_id(mod, i)

    def bpf_perf_event_fields(self, mod, name):
        if isinstance(mod, _Module):
            return len(mod.maps[mod.index[_s(name)]]["fields"])
        return self._real.bpf_perf_event_fields(mod, name)

    def bpf_perf_event_field(self, mod, name, i):
        if isinstance(mod, _Module):
            return mod.maps[mod.index[_s(name)]]["fields"][i]
        return self._real.bpf_perf_event_field(mod, name, i)


def _s(name) -> str:
    return name.decode() if isinstance(name, bytes) else name


def _answer_tables() -> None:
    import bcc.table  # noqa: PLC0415
    if not isinstance(bcc.table.lib, _Answers):
        bcc.table.lib = _Answers(bcc.table.lib)


@functools.cache
def cached_bpf_class():
    """``CachedBPF``: a ``bcc.BPF`` subclass, made on first use (importing this needs no bcc)."""
    import bcc  # noqa: PLC0415

    class CachedBPF(bcc.BPF):
        """A ``bcc.BPF`` whose maps and programs come from a cache record, not a compile."""

        def __init__(self, rec: dict):   # noqa: D107 - bcc.BPF.__init__ compiles; this does not
            for name in ("kprobe_fds", "uprobe_fds", "tracepoint_fds", "raw_tracepoint_fds", "kfunc_entry_fds",
                         "kfunc_exit_fds", "lsm_fds", "perf_buffers", "open_perf_events", "funcs", "tables"):
                setattr(self, name, {})
            self._ringbuf_manager = None
            self.tracefile = None
            self.debug = 0
            self._rec = rec
            self._map_fds: list[int] = []
            self.verified: dict[str, tuple[int, float]] = {}   # program -> (instructions verified, seconds)
            self.module = _Module(rec["maps"])
            atexit.register(self.cleanup)
            try:
                for m in rec["maps"]:
                    self._map_fds.append(_create_map(m))
                self._autoload()
            except BaseException:
                self.cleanup()
                raise
            _answer_tables()

        def _autoload(self):
            for name in self._rec["funcs"]:
                raw = name.encode()
                if raw.startswith(b"tracepoint__"):
                    tp = raw[len(b"tracepoint__"):].replace(b"__", b":")
                    self.attach_tracepoint(tp=tp, fn_name=self.load_func(raw, bcc.BPF.TRACEPOINT).name)
                elif raw.startswith(b"raw_tracepoint__"):
                    self.attach_raw_tracepoint(tp=raw[len(b"raw_tracepoint__"):],
                                               fn_name=self.load_func(raw, bcc.BPF.RAW_TRACEPOINT).name)

        def load_func(self, func_name, prog_type, device=None, attach_type=-1):
            func_name = func_name.encode() if isinstance(func_name, str) else func_name
            if func_name in self.funcs:
                return self.funcs[func_name]
            f = self._rec["funcs"].get(func_name.decode())
            if f is None:
                raise Exception(f"Unknown program {func_name.decode()}")
            code = bytearray(f["code"])
            for i, mi in f["refs"]:
                code[8 * i + 4:8 * i + 8] = self._map_fds[mi].to_bytes(4, "little", signed=True)
            fd, self.verified[func_name.decode()] = _load_prog(
                prog_type, func_name, bytes(code), self._rec["license"], self._rec["kern_version"], attach_type)
            fn = bcc.BPF.Function(self, func_name, fd)
            self.funcs[func_name] = fn
            return fn

        def get_table(self, name, keytype=None, leaftype=None, reducer=None):
            name = name.encode() if isinstance(name, str) else name
            i = self.module.index.get(name.decode())
            if i is None:
                raise KeyError(name)
            m = self._rec["maps"][i]
            if keytype is None and m["key_desc"]:
                keytype = bcc.BPF._decode_table_type(json.loads(m["key_desc"]))
            if leaftype is None:
                leaftype = bcc.BPF._decode_table_type(json.loads(m["leaf_desc"]))
            return bcc.table.Table(self, i, self._map_fds[i], keytype, leaftype, name, reducer=reducer)

        def close(self):
            for name, fn in list(self.funcs.items()):
                os.close(fn.fd)
                del self.funcs[name]
            for fd in self._map_fds:
                os.close(fd)
            self._map_fds = []

    return CachedBPF


def _create_map(m: dict) -> int:
    attr = _attr()
    for off, k in ((0, "type"), (4, "key_size"), (8, "value_size"), (12, "max_entries"), (16, "map_flags")):
        _put(attr, off, m[k], 4)
    name = re.sub(r"[^A-Za-z0-9_.]", "_", m["name"])[:15].encode()
    ct.memmove(ct.addressof(attr) + 28, name, len(name))        # map_name[16]
    return _bpf(BPF_MAP_CREATE, attr)


def _load_prog(prog_type: int, name: bytes, code: bytes, license: bytes, kern_version: int,
               attach_type: int) -> tuple[int, tuple[int, float]]:
    """bpf(BPF_PROG_LOAD): the program's fd, and what the verifier did (instructions it
    processed, seconds; 0 where the kernel has no statistics log, before 5.2). A refusal
    raises with the verifier's last line."""
    insns = ct.create_string_buffer(code, len(code))
    lic = ct.create_string_buffer(license)
    log = ct.create_string_buffer(1 << 16)
    for level in (LOG_STATS, 0, 1):
        attr = _attr()
        _put(attr, 0, prog_type, 4)
        _put(attr, 4, len(code) // 8, 4)
        _put(attr, 8, ct.addressof(insns), 8)
        _put(attr, 16, ct.addressof(lic), 8)
        if level:                      # a log buffer without a level is refused (EINVAL)
            _put(attr, 24, level, 4)
            _put(attr, 28, len(log), 4)
            _put(attr, 32, ct.addressof(log), 8)
        _put(attr, 40, kern_version, 4)
        short = re.sub(rb"[^A-Za-z0-9_.]", b"_", name)[:15]
        ct.memmove(ct.addressof(attr) + 48, short, len(short))     # prog_name[16]
        if attach_type >= 0:
            _put(attr, 68, attach_type, 4)                          # expected_attach_type
        try:
            t0 = time.perf_counter()
            fd = _prog_load(attr)
            return fd, (_processed(log.value), time.perf_counter() - t0)
        except OSError as e:
            if level == 1:
                said = [ln for ln in log.value.decode(errors="replace").splitlines() if ln.strip()]
                raise Exception(f"Failed to load BPF program {name.decode()}: {e.strerror}"
                                f"{': ' + said[-1] if said else ''}") from None
    raise AssertionError("unreachable")


def _processed(log: bytes) -> int:
    """The instructions the verifier processed, from its statistics line (0: not said)."""
    m = re.search(rb"processed (\d+) insns", log)
    return int(m.group(1)) if m else 0


def _prog_load(attr) -> int:
    """bpf(BPF_PROG_LOAD) with this thread's signals held back. The verifier gives up with
    EAGAIN when a signal is pending (a terminal resize under the live screen, a profiler's
    stop): sched_switch's program takes ~0.1 s to check here, so 20 signals a second made
    every load fail, and the record, taken for refused, was dropped and the program compiled
    (3-5 s) in its place. A held signal waits for the call (SIGKILL is never held)."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        return _bpf(BPF_PROG_LOAD, attr)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def warm() -> str:
    """Load the program a default attach uses, compiling and keeping it if it is not kept yet
    (scripts/setup.sh runs this, so that even the first attach skips the compile). The loader
    does the work, so the text is the one an attach asks for. Returns one line."""
    from . import catalog  # noqa: PLC0415
    from .loader import ProbeSet  # noqa: PLC0415 - the loader imports this module

    if not enabled():
        return "the compile cache is off (RLSCOPE_BPF_CACHE=0): nothing to keep"
    said = []
    ps = ProbeSet(os.getpid(), catalog.builtin(), notify=lambda level, msg: said.append(msg))
    t0 = time.monotonic()
    try:
        ps.load()
    finally:
        ps.stop()
    if ps.compiled == "cache":
        return f"the compiled eBPF program is kept already ({cache_dir()})"
    return f"compiled the eBPF program in {time.monotonic() - t0:.1f} s, " + \
        (said[-1] if said else f"kept in {cache_dir()}")


if __name__ == "__main__":
    print(warm())
