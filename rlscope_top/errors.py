"""Typed errors: each carries the pid (when there is one), a hint and an exit code.

Exit codes are distinct per cause so scripts can tell them apart (see README).
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_NO_SUCH_PROCESS = 3
EXIT_SELF = 4
EXIT_ZOMBIE = 5
EXIT_KERNEL_THREAD = 6
EXIT_NOT_ROOT = 7
EXIT_NO_BCC = 8
EXIT_BPF_COMPILE = 9
EXIT_ATTACH = 10
EXIT_RING = 11
EXIT_CALIBRATION = 12
EXIT_DEMO = 13
EXIT_RECORDING = 14
EXIT_COMMAND_NOT_FOUND = 127   # `run`: as a shell says it
EXIT_PIPE_CLOSED = 141         # what reads our output went away (`| head`): 128 + SIGPIPE, as the tools the shell runs


class RlscopeError(Exception):
    """Base of every error shown to the user as one line plus a hint."""

    code = EXIT_INTERNAL

    def __init__(self, message: str, hint: str = "", pid: int | None = None):
        super().__init__(message)
        self.message, self.hint, self.pid = message, hint, pid


class UsageError(RlscopeError):
    """Bad command-line input that argparse could not catch."""

    code = EXIT_USAGE


class SymbolError(RlscopeError):
    """A library or function named on the command line (`symbols`, --sim-lib) that cannot be
    used: unreadable, not ELF, without symbols, or without the function asked for."""

    code = EXIT_USAGE


class NoSuchProcess(RlscopeError):
    """The PID does not exist."""

    code = EXIT_NO_SUCH_PROCESS


class ThreadId(RlscopeError):
    """The PID is one thread of another process (a TID from `top -H` or `ps -L`)."""

    code = EXIT_USAGE


class SelfAttach(RlscopeError):
    """The PID is rlscope-top itself (or its parent shell chain)."""

    code = EXIT_SELF


class ZombieProcess(RlscopeError):
    """The PID has exited and waits to be reaped."""

    code = EXIT_ZOMBIE


class KernelThread(RlscopeError):
    """The PID is a kernel thread: there is no user code to probe."""

    code = EXIT_KERNEL_THREAD


class NotRoot(RlscopeError):
    """Loading BPF programs needs root (CAP_BPF and CAP_PERFMON)."""

    code = EXIT_NOT_ROOT


class BccMissing(RlscopeError):
    """The bcc Python module cannot be imported."""

    code = EXIT_NO_BCC


class BpfCompileError(RlscopeError):
    """bcc could not compile the program (usually missing kernel headers)."""

    code = EXIT_BPF_COMPILE


class AttachError(RlscopeError):
    """The kernel refused a probe or tracepoint."""

    code = EXIT_ATTACH


class RingFileError(RlscopeError):
    """A ring file that cannot be read."""

    code = EXIT_RING


class RecordingError(RlscopeError):
    """A recording that cannot be written (``--record``) or read (``replay``, ``export``)."""

    code = EXIT_RECORDING


class IncompleteSummary(RlscopeError):
    """A session whose summary came out without its pid or its window (the ring lost the
    session's start): it is written all the same, and the exit says it cannot be trusted."""

    code = EXIT_RING


class UnsafePath(RlscopeError):
    """A directory rlscope-top keeps private (0700, ours, not a symlink) that is not."""

    code = EXIT_USAGE


class GpuActivityUnavailable(RlscopeError):
    """--gpu-activity cannot (or must not) put the GPU agent into this target: ptrace not
    allowed, the process stopped, traced, exiting or without CUDA, a foreign region."""

    code = EXIT_USAGE


class CommandNotFound(RlscopeError):
    """`rlscope-top run`: the command to launch cannot be executed."""

    code = EXIT_COMMAND_NOT_FOUND


class CalibrationError(RlscopeError):
    """`rlscope-top calibrate` could not run (no C compiler, the probes miscounted)."""

    code = EXIT_CALIBRATION


class DemoError(RlscopeError):
    """The built-in demo workload did not start (a missing package, a crash at import)."""

    code = EXIT_DEMO


# Raised deep down and translated into one of the errors above where they reach the user
# (each with its pid and hint); on their own they are never shown.

class RingError(Exception):
    """A ring file that is missing, foreign, corrupt, or of an unknown major version."""


class RecordTooLarge(ValueError):
    """A record larger than half the ring; the writer degrades it (never a crash)."""


class RegionError(Exception):
    """The GPU agent's region is missing, foreign, of another version, or inconsistent."""


class LayoutError(Exception):
    """The target's CUPTI writes records this monitor cannot describe."""


class BccUnavailable(RuntimeError):
    """bcc cannot be imported in this interpreter."""


class SymbolMissing(Exception):
    """The library defines no (or more than one distinct) function matching a pattern."""


class NotElf(Exception):
    """The file is readable but is not an ELF object."""


class NotReadablePython(Exception):
    """A process the in-kernel stack sampler cannot read: not a CPython it has a layout for, or
    memory it cannot open (the message says which; the session falls back to austin).
    ``other_version``: it is a CPython, of a version without a layout (austin reads it)."""

    def __init__(self, message: str, other_version: bool = False):
        super().__init__(message)
        self.other_version = other_version
