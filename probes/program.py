"""The BPF program's C source for a probe catalog, and how it is compiled (at low priority,
its compiler's output caught): what ``--ebpf`` prints and what the loader hands to bcc."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
import time
from importlib import resources

from . import catalog
from . import frameworks as fw
from .catalog import COUNT, ENTER, EXIT, PAIR, RANGE_BEGIN, RANGE_END, ProbeSpec

GENERIC_NPROBES = 128      # the generic program's map sizes, in steps of this (a stable text)
# uprobe_multi mode: a few generic programs; each link carries a cookie with the probe id
# (bits 0-15) and category (16-17), so the program is the same whatever the probe set.
GENERIC = """
#define CK_ID(c) ((int)((c) & 0xffff))
#define CK_CAT(c) ((int)(((c) >> 16) & 3))
int g_enter(struct pt_regs *ctx) { u64 c = bpf_get_attach_cookie(ctx); return on_enter(ctx, CK_ID(c), CK_CAT(c)); }
int g_exit_ret(struct pt_regs *ctx) { u64 c = bpf_get_attach_cookie(ctx); return on_exit(ctx, CK_ID(c), CK_CAT(c), 0); }
int g_exit_entry(struct pt_regs *ctx) { u64 c = bpf_get_attach_cookie(ctx); return on_exit(ctx, CK_ID(c), CK_CAT(c), 1); }
int g_sync_enter(struct pt_regs *ctx) {
    u64 c = bpf_get_attach_cookie(ctx); sync_begin(CK_ID(c), CK_CAT(c)); return on_enter(ctx, CK_ID(c), CK_CAT(c)); }
int g_sync_exit(struct pt_regs *ctx) {
    u64 c = bpf_get_attach_cookie(ctx); sync_end(); return on_exit(ctx, CK_ID(c), CK_CAT(c), 0); }
int g_guarded_exit(struct pt_regs *ctx) { u64 c = bpf_get_attach_cookie(ctx); return fw_wait_exit(ctx, CK_ID(c), CK_CAT(c)); }
int g_range_begin(struct pt_regs *ctx) { u64 c = bpf_get_attach_cookie(ctx); return emit(ctx, CK_ID(c), EV_RANGE_BEGIN, 1); }
int g_range_end(struct pt_regs *ctx) { u64 c = bpf_get_attach_cookie(ctx); return emit(ctx, CK_ID(c), EV_RANGE_END, 0); }
int g_count(struct pt_regs *ctx) { u64 c = bpf_get_attach_cookie(ctx); return on_count(ctx, CK_ID(c)); }
"""


def generic_fn(spec: ProbeSpec, part: str) -> str:
    """The generic program (uprobe_multi mode) that serves one part of a catalog probe."""
    sync = spec.kind == PAIR and spec.symbol in catalog.SYNC_SYMBOLS
    if spec.kind == PAIR:
        return ("g_sync_exit" if sync else "g_exit_ret") if part == "exit" else ("g_sync_enter" if sync else "g_enter")
    if spec.kind == EXIT:
        return "g_guarded_exit" if fw.is_guarded_exit(spec) else "g_exit_entry"
    return {ENTER: "g_enter", RANGE_BEGIN: "g_range_begin", RANGE_END: "g_range_end", COUNT: "g_count"}[spec.kind]


def program_text(specs: list[ProbeSpec], generic: bool = False) -> str:
    """The BPF C source for a probe catalog (also what ``--ebpf`` prints). ``generic``: the
    uprobe_multi form, a few programs keyed by the link's cookie instead of one per probe
    (several times less to compile)."""
    here = resources.files("rlscope_top.probes")
    base = here.joinpath("bpf_program.c").read_text()
    # the generic text must not vary with the probe set, or the compile cache misses
    nprobes = -(-max(1, len(specs)) // GENERIC_NPROBES) * GENERIC_NPROBES if generic else max(1, len(specs))
    out = [f"#define NPROBES {nprobes}", here.joinpath("fw_prelude.c").read_text(),
           here.joinpath("pystack.c").read_text(), base,
           here.joinpath("fw_guard.c").read_text(),
           here.joinpath("sync_timing.c").read_text()]
    if generic:
        return "\n".join([*out, GENERIC])
    for i, s in enumerate(specs):
        if s.kind == PAIR and s.symbol in catalog.SYNC_SYMBOLS:   # also timed as GPU waiting
            out.append(f"int p{i}_enter(struct pt_regs *ctx) {{ sync_begin({i}, {s.category}); "
                       f"return on_enter(ctx, {i}, {s.category}); }}")
            out.append(f"int p{i}_exit(struct pt_regs *ctx) {{ sync_end(); return on_exit(ctx, {i}, {s.category}, 0); }}")
        elif s.kind == PAIR:
            out.append(f"int p{i}_enter(struct pt_regs *ctx) {{ return on_enter(ctx, {i}, {s.category}); }}")
            out.append(f"int p{i}_exit(struct pt_regs *ctx) {{ return on_exit(ctx, {i}, {s.category}, 0); }}")
        elif s.kind == ENTER:
            out.append(f"int p{i}_enter(struct pt_regs *ctx) {{ return on_enter(ctx, {i}, {s.category}); }}")
        elif fw.is_guarded_exit(s):
            out.append(f"int p{i}_exit(struct pt_regs *ctx) {{ return fw_wait_exit(ctx, {i}, {s.category}); }}")
        elif s.kind == EXIT:
            out.append(f"int p{i}_exit(struct pt_regs *ctx) {{ return on_exit(ctx, {i}, {s.category}, 1); }}")
        elif s.kind == RANGE_BEGIN:
            out.append(f"int p{i}_range_begin(struct pt_regs *ctx) {{ return emit(ctx, {i}, EV_RANGE_BEGIN, 1); }}")
        elif s.kind == RANGE_END:
            out.append(f"int p{i}_range_end(struct pt_regs *ctx) {{ return emit(ctx, {i}, EV_RANGE_END, 0); }}")
        elif s.kind == COUNT:
            out.append(f"int p{i}_count(struct pt_regs *ctx) {{ return on_count(ctx, {i}); }}")
    return "\n".join(out) + "\n"


# The compile starts at nice 19 and is raised step by step if it is still running: on a
# machine whose every core is busy, nice 19 gets ~1.5% of a core (a 3 s compile took 200 s).
COMPILE_NICE_STEPS = ((0.0, 19), (2.0, 10), (4.0, 0))   # (seconds into the compile, nice)


@contextlib.contextmanager
def low_priority():
    """Compile at low priority (this thread only): the BPF compile takes seconds of CPU, and
    on a machine the job keeps busy it must not slow the job down; but it must finish, so a
    compile that is starved gets its priority back in steps (COMPILE_NICE_STEPS)."""
    tid = threading.get_native_id()
    try:
        was = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, COMPILE_NICE_STEPS[0][1])
    except OSError:
        yield
        return
    done = threading.Event()

    def raise_steps():
        t0 = time.monotonic()
        for at, nice in COMPILE_NICE_STEPS[1:]:
            if done.wait(max(0.0, t0 + at - time.monotonic())):
                return
            try:
                os.setpriority(os.PRIO_PROCESS, tid, max(was, nice))
            except OSError:
                return

    threading.Thread(target=raise_steps, name="rlscope-compile-nice", daemon=True).start()
    try:
        yield
    finally:
        done.set()
        try:
            os.setpriority(os.PRIO_PROCESS, tid, was)
        except OSError:
            pass


@contextlib.contextmanager
def capture_output():
    """Collect what libbcc/clang print on fds 1 and 2 so the user sees one line, not a log."""
    tmp = tempfile.TemporaryFile()
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    os.dup2(tmp.fileno(), 1)
    os.dup2(tmp.fileno(), 2)
    try:
        yield lambda: (tmp.seek(0), tmp.read().decode(errors="replace"))[1]
    finally:
        for fd, old in zip((1, 2), saved):
            os.dup2(old, fd)
            os.close(old)
        tmp.close()


def compiler_reason(log: str, e: Exception) -> str:
    for line in log.splitlines():
        if "kernel headers" in line or "error:" in line:
            return line.strip()[:200]
    return first_line(e)


def first_line(e: Exception) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0]
