"""Command line: `rlscope-top PID`, `attach`, `demo`, `doctor`."""

from __future__ import annotations

import argparse
import math
import os
import signal
import stat
import sys

from . import __version__
from .collect import hangup, op_rules
from .errors import EXIT_INTERNAL, EXIT_PIPE_CLOSED, RlscopeError, UsageError
from .probes import catalog

# numpy (the GPU side's) starts a BLAS thread pool on import: `run`, which expects GPU activity,
# imports it with SIGINT/SIGTERM/SIGHUP blocked, so that only its forwarder ever takes them
# (launch.py). An attach imports it only when GPU activity arrives.
FORWARDED = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}

EPILOG = """examples:
  rlscope-top 12345                      watch PID 12345 on the live screen (q quits)
  rlscope-top attach 12345 --duration 30 --summary run.json
  rlscope-top attach 12345 --sim-lib libmysim.so:sim_step,sim_reset
  rlscope-top 12345 --op rollout='*/train.py:collect' --op env:simulation=step_env
  rlscope-top demo --headless --duration 10
  rlscope-top run -- python train.py     launch with GPU kernel timing (CUPTI) and the same probes
  rlscope-top symbols libmysim.so --pid 12345 '*step*'   functions --sim-lib can probe
  rlscope-top doctor [PID]
  rlscope-top compare torch.json jax.json --steps-a 20000 --steps-b 20000
"""


def _sim_lib(text: str) -> tuple[str, list[str]]:
    lib, _, syms = text.rpartition(":") if ":" in text and "/" not in text.rpartition(":")[2] else (text, "", "")
    names = [s for s in syms.split(",") if s]
    if not lib or not names:
        raise argparse.ArgumentTypeError(
            f"{text!r}: name the entry points, e.g. libmysim.so:sim_step,sim_reset "
            "(list them with `rlscope-top symbols LIB`)")
    return lib, names


def _number(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not math.isfinite(v):          # float() also reads "nan" and "inf"
        raise argparse.ArgumentTypeError(f"{text!r} is not a number")
    return v


def _positive(text: str) -> float:
    v = _number(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return v


def _sample_rate(text: str) -> float:
    v = _number(text)
    if v < 0 or v > 2000:
        raise argparse.ArgumentTypeError(f"{text!r} must be between 0 and 2000")
    return v


def _digits(text: str) -> bool:
    """ASCII digits only: str.isdigit() also takes '١٢٣' and '²'."""
    return text.isascii() and text.isdigit()


def _pid(text: str) -> int:
    if not _digits(text) or int(text) == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a PID (a positive whole number)")
    return int(text)


def _role(text: str) -> tuple[int, str]:
    pid, _, name = text.partition("=")
    name = name.strip()
    if not _digits(pid) or int(pid) == 0 or not name or len(name) > 32 or not name.isprintable():
        raise argparse.ArgumentTypeError(f"{text!r}: give PID=NAME, e.g. --role 4242=learner (NAME: up to 32 characters)")
    return int(pid), name


def _session_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--duration", type=_positive, metavar="S", help="stop after S seconds")
    p.add_argument("--summary", metavar="FILE", help="summary JSON path (default rlscope-top-<pid>-<time>.json)")
    p.add_argument("--headless", action="store_true",
                   help="no live screen: print the summary at the end (also when stdout is not a terminal)")
    p.add_argument("--interval", type=_positive, default=1.0, metavar="S", help="display refresh (default 1)")
    p.add_argument("--sim-lib", type=_sim_lib, action="append", default=[], metavar="LIB:SYM[,SYM]",
                   help="also probe a simulator library's entry points (repeatable); SYM is the exact "
                        "(mangled) name: `rlscope-top symbols LIB [PATTERN]` lists them")
    p.add_argument("--ring", metavar="PATH", help="ring file path (default under /dev/shm/rlscope-top)")
    p.add_argument("--keep-ring", action="store_true", help="keep the ring file after the session")
    p.add_argument("--max-overhead", type=_positive, default=5.0, metavar="PCT",
                   help="probe overhead budget, %% of the target's time (default 5); hot probe sets "
                        "fall back to counting, then to estimates")
    p.add_argument("--timeline", action="store_true",
                   help="also stream every probe event to the ring (costly: for short captures and checks)")
    p.add_argument("--op", action="append", default=[], metavar="NAME=PATTERN",
                   help="operation rule for the stack sampler (repeatable): PATTERN globs a frame "
                        "'/path/file.py:function', or a function name; NAME:simulation counts it as simulation")
    p.add_argument("--sample-hz", type=_sample_rate, default=None, metavar="HZ",
                   help="stack samples per second for zero-change operations (default: every CPU-clock tick, "
                        "250, with the in-kernel sampler; 100 with austin; 0 turns it off)")
    p.add_argument("--sampler", choices=("auto", "kernel", "austin"), default="auto",
                   help="who reads the Python stacks: kernel (in the BPF program, the thread stopped: no torn "
                        "samples; CPython 3.11), austin (from outside), auto (kernel where it can; default)")
    p.add_argument("--max-probes", type=int, default=catalog.MAX_PROBES, help=argparse.SUPPRESS)
    p.add_argument("--ebpf", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--prometheus", metavar="[HOST:]PORT",
                   help="serve the live figures on http://HOST:PORT/metrics (default host 127.0.0.1)")
    p.add_argument("--no-children", action="store_true",
                   help="count PID alone (default: PID and every process it forked or spawned, now and later)")
    p.add_argument("--pid", dest="more_pids", type=_pid, action="append", default=[], metavar="PID",
                   help="also count another, unrelated process and its children (repeatable)")
    p.add_argument("--role", type=_role, action="append", default=[], metavar="PID=NAME",
                   help="name a process's role in the job (repeatable; default: guessed, e.g. main, env worker)")
    p.add_argument("--record", metavar="FILE",
                   help="also write the whole session to FILE (a new file): `replay` and `export` read it")
    p.add_argument("--record-max-mb", type=_count, default=1024, metavar="MB",
                   help="past MB the recording keeps counters and operations but no more events (default 1024)")
    p.add_argument("-q", "--quiet", action="store_true", help="only warnings on stderr")


def parser() -> argparse.ArgumentParser:
    """The argument parser (also used for --help in the README)."""
    ap = argparse.ArgumentParser(prog="rlscope-top", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 description="Live cross-stack profiler for deep RL training: attach by PID.")
    ap.add_argument("--version", action="version", version=f"rlscope-top {__version__}")
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND")
    a = sub.add_parser("attach", help="attach to a running process")
    a.add_argument("pid", type=_pid, metavar="PID")
    _session_args(a)
    a.add_argument("--gpu-activity", action="store_true",
                   help="time GPU kernels: inject rlscope-top's GPU agent into PID with ptrace when it has none "
                        "(any CUDA process; it stays loaded and idle after detach)")
    r = sub.add_parser("run", help="launch a command with GPU activity (CUPTI) on and attach to it: run [opts] -- CMD ...")
    _session_args(r)
    r.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ARGS", help="the command to launch")
    d = sub.add_parser("demo", help="run the built-in PPO/MuJoCo workload and attach to it")
    _session_args(d)
    v = sub.add_parser("view", help="open the live screen on a RING file another rlscope-top writes (its --ring PATH)")
    v.add_argument("ring", metavar="RING", help="the ring file: what `attach --ring PATH` (or --keep-ring) wrote")
    v.add_argument("--summary", metavar="FILE", help="summary JSON written on quit")
    v.add_argument("--interval", type=_positive, default=1.0, metavar="S", help="display refresh (default 1)")
    doc = sub.add_parser("doctor", help="check that attach can work here (and what a PID maps)")
    doc.add_argument("pid", type=_pid, nargs="?", metavar="PID")
    sub.add_parser("calibrate", help="measure each probe kind's cost on this machine (needs root, gcc)")
    _compare_args(sub)
    _symbols_args(sub)
    _recording_args(sub)
    return ap


def _recording_args(sub) -> None:
    rp = sub.add_parser("replay", help="a recording (--record FILE): its summary, or the live screen played back")
    rp.add_argument("recording", metavar="FILE")
    rp.add_argument("--headless", action="store_true", help="print the summary instead of opening the screen")
    rp.add_argument("--from", dest="from_s", type=_positive, metavar="S",
                    help="start S seconds into the session: the figures of the window from there")
    rp.add_argument("--to", type=_positive, metavar="S", help="stop S seconds into the session")
    rp.add_argument("--summary", metavar="FILE", help="also write the summary JSON to FILE")
    rp.add_argument("--speed", type=_speed, default=1.0, metavar="X",
                    help="playback speed on the screen (default 1; 0: all at once)")
    rp.add_argument("--interval", type=_positive, default=1.0, metavar="S", help="display refresh (default 1)")
    ex = sub.add_parser("export", help="a recording for other tools: Perfetto, chrome://tracing JSON, speedscope, CSV")
    ex.add_argument("recording", metavar="FILE")
    ex.add_argument("--format", required=True, choices=("perfetto", "chrome", "speedscope", "csv"),
                    help="perfetto: protobuf trace, chrome: Trace Event JSON (both need a --timeline recording); "
                         "speedscope: sampled Python stacks by time; csv: per tick, process and category")
    ex.add_argument("-o", "--output", required=True, metavar="OUT", help="the file to write")


def _speed(text: str) -> float:
    v = _number(text)
    if v < 0 or v > 1000:
        raise argparse.ArgumentTypeError(f"{text!r} must be between 0 and 1000")
    return v


def _compare_args(sub) -> None:
    c = sub.add_parser("compare", help="two summaries side by side: per-category ratio, transitions and calls per step")
    c.add_argument("summary_a", metavar="SUMMARY_A")
    c.add_argument("summary_b", metavar="SUMMARY_B")
    c.add_argument("--steps-a", type=_count, metavar="N", help="environment steps run A made in its window")
    c.add_argument("--steps-b", type=_count, metavar="N", help="environment steps run B made in its window")
    c.add_argument("--steps", type=_count, metavar="N", help="the same step count for both runs")
    c.add_argument("--names", type=_names, metavar="A,B", help="column titles (default: the file names)")


def _symbols_args(sub) -> None:
    s = sub.add_parser("symbols", help="list a library's functions that --sim-lib LIB:SYM can probe")
    s.add_argument("lib", metavar="LIB", help="the library's path, or with --pid the name of a library PID maps")
    s.add_argument("pattern", nargs="?", metavar="PATTERN",
                   help="glob or substring of the mangled or demangled name (case-insensitive)")
    s.add_argument("--pid", type=_pid, metavar="PID", help="look LIB up among the libraries PID maps")
    s.add_argument("--json", action="store_true", help="one JSON document instead of the table")


def _names(text: str) -> tuple[str, str]:
    a, sep, b = text.partition(",")
    if not sep or not a.strip() or not b.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: give two titles separated by a comma, e.g. torch,jax")
    return a.strip(), b.strip()


def _count(text: str) -> int:
    if not _digits(text) or int(text) == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a step count (a whole number > 0)")
    return int(text)


def _prometheus(text: str | None) -> tuple[str, int] | None:
    if not text:
        return None
    from .report.prometheus import parse_address  # noqa: PLC0415 - prometheus_client only when asked

    return parse_address(text)


def _options(ns: argparse.Namespace, pid: int):
    if pid:
        from .collect.cost_meter import note_early  # noqa: PLC0415

        note_early(pid)           # before the heavy imports: the target's pre-attach stretch starts here
    from .report import summary as S  # noqa: PLC0415 - heavy (numpy): after `run` blocked its signals
    from .collect.session import Options  # noqa: PLC0415

    gpu = None
    if getattr(ns, "gpu_activity", False):
        from .collect.gpu_source import GpuOptions  # noqa: PLC0415

        gpu = GpuOptions(inject=True)
    if ns.summary and (why := S.path_problem(ns.summary)):
        raise UsageError(f"cannot write the summary to {ns.summary}: {why}",
                         hint="give a file path in a writable directory, e.g. --summary run.json")
    if ns.record and os.path.lexists(ns.record):
        raise UsageError(f"--record {ns.record}: the file exists",
                         hint="give a new file name (a recording is never written over), or remove the old one")
    return Options(pid=pid, duration_s=ns.duration, interval_s=ns.interval, summary_path=ns.summary,
                   ring_path=ns.ring, keep_ring=ns.keep_ring or bool(ns.ring), sim_libs=ns.sim_lib,
                   max_probes=ns.max_probes, max_overhead_pct=ns.max_overhead, timeline=ns.timeline, quiet=ns.quiet,
                   op_rules=[op_rules.parse(r) for r in ns.op], sample_hz=ns.sample_hz, sampler=ns.sampler, gpu=gpu,
                   prometheus=_prometheus(ns.prometheus), children=not ns.no_children,
                   more_pids=tuple(ns.more_pids), roles=dict(ns.role), record_path=ns.record,
                   record_max_mb=ns.record_max_mb, polite_start=ns.cmd == "attach")


def _command(ns: argparse.Namespace) -> list[str]:
    cmd = list(ns.command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UsageError("run: no command given", hint="put it after --, e.g. rlscope-top run -- python train.py")
    return cmd


def _dispatch(ns: argparse.Namespace) -> int:
    if ns.cmd in ("doctor", "view", "compare", "symbols", "replay", "export", "calibrate"):
        return _tool(ns)
    return _attaching(ns)


def _tool(ns: argparse.Namespace) -> int:
    """The commands that attach to nothing: their exit code."""
    if ns.cmd == "doctor":
        from .commands.doctor import run as doctor  # noqa: PLC0415 - keep startup light
        return doctor(ns.pid)
    if ns.cmd == "view":
        from .collect.session import view  # noqa: PLC0415
        view(ns.ring, ns.summary or f"rlscope-top-view-{os.getpid()}.json", ns.interval)
        return 0
    if ns.cmd == "compare":
        from .report.compare import run as compare  # noqa: PLC0415
        compare(ns.summary_a, ns.summary_b, ns.steps_a or ns.steps, ns.steps_b or ns.steps, ns.names)
        return 0
    if ns.cmd == "symbols":
        from .commands.symbols_cmd import run as symbols  # noqa: PLC0415
        return symbols(ns.lib, ns.pattern, ns.pid, ns.json)
    if ns.cmd == "replay":
        from .commands.replay import run as replay  # noqa: PLC0415
        if ns.from_s and ns.to and ns.from_s >= ns.to:
            raise UsageError(f"replay: --from {ns.from_s:g} is not before --to {ns.to:g}",
                             hint="the window is --from S1 --to S2 with S1 < S2 (seconds into the session)")
        return replay(ns.recording, headless=ns.headless, window=(ns.from_s, ns.to), summary_path=ns.summary,
                      speed=ns.speed, interval_s=ns.interval)
    if ns.cmd == "export":
        from .report.export import run as export  # noqa: PLC0415
        return export(ns.recording, ns.format, ns.output)
    from .commands.calibrate import run as calibrate  # noqa: PLC0415
    calibrate()
    return 0


def _attaching(ns: argparse.Namespace) -> int:
    """attach, run and demo (and --ebpf, which prints the program they would load)."""
    if ns.ebpf:
        from .probes.program import program_text  # noqa: PLC0415
        from .collect.session import specs_for  # noqa: PLC0415
        print(program_text(specs_for(_options(ns, 0))), end="")
        return 0
    live = not ns.headless and sys.stdout.isatty() and sys.stdin.isatty()
    if ns.cmd == "run":
        from .commands.launch import run as launch  # noqa: PLC0415
        return launch(_options(ns, 0), _command(ns), live=live)
    if getattr(ns, "gpu_activity", False):
        from .probes.gpu_inject import built_agent, preflight  # noqa: PLC0415
        from .probes.gpu_region import find  # noqa: PLC0415
        from .collect.target import check_target, require_root  # noqa: PLC0415
        require_root()
        check_target(ns.pid)
        if find(ns.pid) is None:          # refused before anything is attached, with the reason
            built_agent()
            preflight(ns.pid)
    if ns.cmd == "demo":
        from .commands.demo import demo  # noqa: PLC0415
        demo(_options(ns, 0), live=live)
        return 0
    if not live:          # the live screen's thread keeps its priority: the collecting thread begins it
        from .collect import start_priority  # noqa: PLC0415

        start_priority.begin(ns.pid)
    from .collect.session import run, run_live  # noqa: PLC0415
    (run_live if live else run)(_options(ns, ns.pid))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `rlscope-top` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0].isdigit():        # non-ASCII digits too: _pid then says why not
        argv.insert(0, "attach")           # `rlscope-top PID` shorthand
    ns = _parse(argv)
    if ns.cmd is None:
        parser().print_help(sys.stderr)
        return 2
    if ns.cmd == "run":
        _import_with_signals_blocked()
    piped = _stdout_is_pipe()
    try:
        rc = _dispatch(ns)
        sys.stdout.flush()          # here, not at exit: a reader gone (`| head`) is then ours to say
        return rc
    except RlscopeError as e:
        _error(e.message, e.hint)
        return e.code
    except KeyboardInterrupt:
        _error("interrupted", "")
        return 130
    except BrokenPipeError as e:
        if not _stdout_reader_gone():
            return _internal(e)
        hangup.to_null(1)           # `symbols LIB | head`: what reads our output has all it wanted (and
                                    # the interpreter flushes stdout at exit)
        return EXIT_PIPE_CLOSED
    except SystemExit as e:         # rich's console ends a broken pipe so (exit 1, stdout to /dev/null)
        if e.code == 1 and piped and _stdout_is_null():
            return EXIT_PIPE_CLOSED
        raise
    except Exception as e:  # never a traceback for the user; RLSCOPE_DEBUG=1 shows it
        return _internal(e)


def _internal(e: Exception) -> int:
    if os.environ.get("RLSCOPE_DEBUG"):
        raise e
    _error(f"internal error: {type(e).__name__}: {e}", "rerun with RLSCOPE_DEBUG=1 and report the traceback")
    return EXIT_INTERNAL


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reading end is closed (poll reports POLLERR on it)."""
    import select  # noqa: PLC0415

    try:
        p = select.poll()
        p.register(1, select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in p.poll(0))
    except (OSError, ValueError):
        return False


def _stdout_is_pipe() -> bool:
    try:
        return stat.S_ISFIFO(os.fstat(1).st_mode)
    except OSError:
        return False


def _stdout_is_null() -> bool:
    try:
        return os.path.samestat(os.fstat(1), os.stat(os.devnull))
    except OSError:
        return False


def _parse(argv: list[str]) -> argparse.Namespace:
    ns, extra = parser().parse_known_args(argv)
    if extra and ns.cmd == "symbols" and ns.pattern is None and len(extra) == 1 and not extra[0].startswith("-"):
        ns.pattern = extra[0]      # `symbols LIB --pid N PATTERN`: argparse leaves a positional after an option over
    elif extra:
        parser().parse_args(argv)  # argparse's own error for the leftovers
    return ns


def _import_with_signals_blocked() -> None:
    """Threads started while importing (numpy's BLAS pool) never take SIGINT/SIGTERM/SIGHUP."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    try:
        import numpy  # noqa: F401, PLC0415
        from .collect import session  # noqa: F401, PLC0415
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _error(msg: str, hint: str) -> None:
    print(f"rlscope-top: error: {msg}", file=sys.stderr)
    if hint:
        print(f"  hint: {hint}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
