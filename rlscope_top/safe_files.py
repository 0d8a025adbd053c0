"""Files written by root next to other users' processes: never through a symlink.

Every path rlscope-top creates (summaries, rings, calibration) goes through here. A new
file is made with O_EXCL|O_NOFOLLOW under a random name in the target's directory, then
renamed into place; rename replaces a planted symlink instead of writing through it.
Private directories are checked with lstat: a real directory, ours, mode 0700.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile

from .errors import UnsafePath

FILE_MODE = 0o600
MAX_LINKS = 8          # root-made links followed in a row (the kernel's own limit is 40)
DIR_MODE = 0o700


def private_dir(path: str) -> str:
    """Create ``path`` (0700) or check that it is a real directory we own that only we use.

    Raises:
        UnsafePath: a symlink, a non-directory, another owner, or a group/world bit set.
    """
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        pass
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return private_dir(path)
    st = os.lstat(path)
    why = _dir_problem(st)
    if why:
        raise UnsafePath(f"{path} {why}; refusing to use it",
                         hint=f"remove it (`sudo rm -rf {path}`); rlscope-top recreates it, private")
    return path


def _dir_problem(st: os.stat_result) -> str | None:
    if stat.S_ISLNK(st.st_mode):
        return "is a symlink"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid != os.geteuid():
        return f"belongs to uid {st.st_uid}, not to us (uid {os.geteuid()})"
    if st.st_mode & 0o077:
        return f"has mode {stat.S_IMODE(st.st_mode):o}, not 700"
    return None


def open_regular(path: str, *, follow: bool = True) -> int:
    """Open an existing file for reading as root: only a regular file, and never blocking
    (a FIFO planted where a library or a calibration was would hang the monitor; a device
    would be read without end). Returns the file descriptor.

    Args:
        path: the file.
        follow: False refuses a symlink as the last component (files rlscope-top keeps).

    Raises:
        UnsafePath: a symlink (with ``follow`` False), or not a regular file (a FIFO, a device).
        OSError: missing, unreadable, or a directory.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP and not follow:
            raise UnsafePath(f"{path} is a symlink", hint="give the file itself, not a link to it") from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):          # as open() says it
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        raise UnsafePath(f"{path} is not a regular file", hint="give a plain file")
    os.set_blocking(fd, True)
    return fd


def read_trusted(path: str, max_size: int, owners: tuple[int, ...] = (), hint: str = "") -> bytes:
    """The bytes of a file whose contents root acts on (kept programs, calibration): not through
    a symlink, a regular file owned by us (or by one of ``owners``) that no one else can write.
    ``hint``: how the user gets a good file back.

    Raises:
        UnsafePath: a symlink, not a regular file, another owner, or group/world writable.
        ValueError: larger than ``max_size``.
        OSError: missing or unreadable.
    """
    with open(open_regular(path, follow=False), "rb") as f:
        st = os.fstat(f.fileno())
        if st.st_uid not in (os.geteuid(), *owners) or st.st_mode & 0o022:
            raise UnsafePath(f"{path}: owned by uid {st.st_uid} with mode {stat.S_IMODE(st.st_mode):o}, "
                             "not root's and writable by root alone", hint=hint)
        if st.st_size > max_size:
            raise ValueError(f"{st.st_size:,} bytes, more than such a file holds")
        return f.read()


def create_exclusive(path: str, mode: int = FILE_MODE) -> int:
    """Open a new file at ``path`` for read/write; an existing name (file or symlink) fails.

    Raises:
        FileExistsError: the name is taken (a symlink included).
    """
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


def write_output(path: str, data: bytes | str, mode: int = FILE_MODE) -> None:
    """Write a file the user named (``--summary``, ``export -o``).

    A device, a FIFO or a socket (``/dev/null``, a named pipe) is written to as it is: renamed
    over, /dev/null became a root-owned 0600 file and broke every other program on the machine.
    A symlink in a directory only root can write (``/dev/stdout``) is followed, since only root
    could have made it; anywhere else a symlink is replaced, never followed. A new or regular
    file is written atomically (``write_atomic``).

    Raises:
        UnsafePath: a block device, or a FIFO no one reads.
        OSError: as ``write_atomic``.
    """
    raw = data.encode() if isinstance(data, str) else data
    fd = _open_stream(path)
    if fd is None:
        write_atomic(_through_root_link(path), raw, mode)
        return
    with os.fdopen(fd, "wb") as f:
        os.set_blocking(fd, True)
        f.write(raw)


def _open_stream(path: str) -> int | None:
    """``path`` opened for writing when it is (or a root-made link leads to) a stream: a
    character device, our own FIFO or socket, or the shell's redirect behind ``/dev/stdout``.
    None for a name ``write_atomic`` should replace (another user's FIFO in /tmp is replaced,
    as before: written to, it would hand that user the summary)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    link = stat.S_ISLNK(st.st_mode)
    if not _stream_candidate(path, st, link):
        return None
    if stat.S_ISBLK(st.st_mode):
        raise UnsafePath(f"{path} is a block device; refusing to write a file onto it", hint="give a file path")
    flags = os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | (0 if link else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:         # a dangling link: replaced
        return None
    except OSError as e:
        if e.errno == errno.ENXIO:
            raise UnsafePath(f"{path} is a FIFO that no one reads", hint="start its reader first") from None
        raise
    return _as_stream(fd, path, link)


def _stream_candidate(path: str, st: os.stat_result, link: bool) -> bool:
    """A root-made link, a device, or a FIFO or socket of root's (or ours)."""
    if link:
        return root_only_dir(os.path.dirname(os.path.abspath(path)))
    if stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode):
        return st.st_uid in (0, os.geteuid())
    return stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)


def _as_stream(fd: int, path: str, link: bool) -> int | None:
    """The descriptor to write, from what ``path`` opened as (None: a file, to replace)."""
    m = os.fstat(fd).st_mode
    if _stream_mode(m):
        return fd
    os.close(fd)
    if stat.S_ISBLK(m):
        raise UnsafePath(f"{path} leads to a block device; refusing to write a file onto it", hint="give a file path")
    if _into_proc(path, link):        # /dev/stdout into a shell's `> file`: add to it
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    return None


def _stream_mode(mode: int) -> bool:
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _into_proc(path: str, link: bool) -> bool:
    """A link to one of a process's descriptors (/dev/stdout: /proc/self/fd/1)."""
    return link and os.readlink(path).startswith("/proc/")


def is_stream(path: str) -> bool:
    """Whether ``write_output`` writes ``path`` as a stream (it can be written once: a second
    summary would follow the first one, and a FIFO's reader is gone after the first)."""
    try:
        st = os.lstat(path)
        link = stat.S_ISLNK(st.st_mode)
        if not _stream_candidate(path, st, link):
            return False
        st = os.stat(path) if link else st
    except OSError:
        return False
    return _stream_mode(st.st_mode) or (stat.S_ISREG(st.st_mode) and _into_proc(path, link))


def _through_root_link(path: str) -> str:
    """Where a file goes: past root-made symlinks, one link at a time (the links stay); the
    first link in a directory others can write is where it stops, to be replaced."""
    for _ in range(MAX_LINKS):
        d = os.path.dirname(os.path.abspath(path))
        if not (os.path.islink(path) and root_only_dir(d)):
            break
        path = os.path.join(d, os.readlink(path))
    return path


def root_only_dir(d: str) -> bool:
    """Whether only root can change directory ``d`` (so a symlink in it is root's own)."""
    try:
        st = os.stat(d)
    except OSError:
        return False
    return st.st_uid == 0 and not st.st_mode & 0o022


def write_atomic(path: str, data: bytes | str, mode: int = FILE_MODE) -> None:
    """Write ``data`` to ``path`` through a random temp name in the same directory.

    A crash leaves the old file or the new one, never half of one; a symlink at ``path`` is
    replaced, never followed, as is anything else there (a FIFO planted in the calibration's
    place): for a path the user names, ``write_output`` keeps devices and pipes.
    """
    raw = data.encode() if isinstance(data, str) else data
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
