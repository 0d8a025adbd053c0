"""Bad input: one-line error, a hint, a distinct exit code, no traceback, no probe left."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from support import CLI, REPO, load_summary
from rlscope_top import errors as E


def run_cli(*args: str, env: dict | None = None, prefix: list[str] | None = None, timeout: float = 120):
    return subprocess.run([*(prefix or []), *CLI, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, cwd=str(REPO))


def assert_clean_error(p: subprocess.CompletedProcess, code: int, words: str) -> None:
    assert p.returncode == code, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr + p.stdout
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert lines[-2].startswith("rlscope-top: error:") and words in lines[-2], p.stderr
    assert lines[-1].startswith("  hint: "), p.stderr


def _free_pid() -> int:
    pid = 4_000_000
    while os.path.exists(f"/proc/{pid}"):
        pid -= 1
    return pid


def _kernel_thread() -> int:
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[6]) & 0x00200000:
                        return int(d)
            except (OSError, ValueError, IndexError):
                continue
    pytest.skip("no kernel thread visible in this PID namespace")


def test_no_such_pid(ebpf):
    assert_clean_error(run_cli("attach", str(_free_pid())), E.EXIT_NO_SUCH_PROCESS, "no process with PID")


def test_no_such_extra_pid(ebpf, target):
    t = target("idle.py")
    assert_clean_error(run_cli("attach", str(t.pid), "--pid", str(_free_pid())), E.EXIT_NO_SUCH_PROCESS,
                       "no process with PID")
    assert t.p.poll() is None


def test_attach_to_self(ebpf):
    p = subprocess.run(["sh", "-c", f'exec {" ".join(CLI)} attach $$'], capture_output=True, text=True,
                       cwd=str(REPO), timeout=60)
    assert_clean_error(p, E.EXIT_SELF, "rlscope-top itself")


def test_zombie(ebpf):
    z = subprocess.Popen(["true"])
    try:
        for _ in range(100):
            with open(f"/proc/{z.pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            __import__("time").sleep(0.02)
        assert_clean_error(run_cli("attach", str(z.pid)), E.EXIT_ZOMBIE, "zombie")
    finally:
        z.wait()


def test_a_thread_id_names_its_process(ebpf):
    """A TID (from `top -H`) answers in /proc like a PID; attached, every probe saw nothing
    and the self-report read 43% of a session with no hit."""
    code = "import threading, time\nthreading.Thread(target=time.sleep, args=(60,)).start()\nprint('ready', flush=True)\n"
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        tid = max(int(t) for t in os.listdir(f"/proc/{p.pid}/task"))
        assert tid != p.pid
        for args in (("attach", str(tid)), (str(tid),), ("attach", str(p.pid), "--pid", str(tid))):
            r = run_cli(*args, "--duration", "1")
            assert_clean_error(r, E.EXIT_USAGE, f"PID {tid} is a thread of process {p.pid}")
            assert f"rlscope-top {p.pid}" in r.stderr
        assert p.poll() is None
    finally:
        p.kill()
        p.wait()


def test_kernel_thread(ebpf):
    assert_clean_error(run_cli("attach", str(_kernel_thread())), E.EXIT_KERNEL_THREAD, "kernel thread")


def test_not_root(ebpf, target):
    t = target("idle.py")
    p = run_cli("attach", str(t.pid), prefix=["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
    assert_clean_error(p, E.EXIT_NOT_ROOT, "needs root")


def test_bcc_missing(ebpf, target, tmp_path):
    fake = tmp_path / "bcc"
    fake.mkdir()
    (fake / "__init__.py").write_text('raise ImportError("libbcc.so.0: cannot open shared object file")\n')
    t = target("idle.py")
    p = run_cli("attach", str(t.pid), env={"PYTHONPATH": str(tmp_path)})
    assert_clean_error(p, E.EXIT_NO_BCC, "bcc Python module is not importable")


def test_kernel_headers_missing(ebpf, target):
    t = target("idle.py")
    p = run_cli("attach", str(t.pid), env={"BCC_KERNEL_SOURCE": "/nonexistent"})
    assert_clean_error(p, E.EXIT_BPF_COMPILE, "kernel headers")
    assert t.p.poll() is None


def test_target_without_known_libraries_still_gets_python_time(ebpf, target, tmp_path):
    t = target("idle.py")
    out = tmp_path / "s.json"
    p = run_cli("attach", str(t.pid), "--duration", "2", "--summary", str(out))
    assert p.returncode == 0, p.stderr
    assert "maps none of the known libraries" in p.stderr and "counting Python and on/off-CPU time" in p.stderr
    s = load_summary(out)
    assert s["totals"]["python_s"] > 1.5
    assert s["totals"]["on_cpu_s"] > 0 and s["totals"]["off_cpu_s"] > 0
    assert s["totals"]["backend_s"] is None and s["sources"]["backend_s"] == "unavailable"
    assert t.p.poll() is None


def test_a_native_target_without_known_libraries_is_not_said_to_count_python(ebpf, spawn, tmp_path):
    sleeper = spawn(["sleep", "30"])
    out = tmp_path / "s.json"
    p = run_cli("attach", str(sleeper.pid), "--duration", "1", "--summary", str(out))
    assert p.returncode == 0, p.stderr
    line = next(ln for ln in p.stderr.splitlines() if "maps none of the known libraries" in ln)
    assert "counting on/off-CPU time only" in line and "Python" not in line, line
    assert "does not run Python" in p.stderr
    s = load_summary(out)
    assert not [t for t in s["threads"] if t["python_thread"]], s["threads"]


@pytest.mark.parametrize("args,words", [
    (["attach", "abc"], "is not a PID"),
    (["attach", "1", "--duration", "-3"], "must be > 0"),
    (["attach", "1", "--sim-lib", "libfoo.so"], "name the entry points"),
    (["attach", "1", "--op", "noequals"], "bad --op rule"),
    (["attach", "1", "--sample-hz", "-1"], "between 0 and 2000"),
    (["attach", "1", "--duration", "nan"], "is not a number"),
    (["attach", "1", "--summary", "/nonexistent/dir/s.json"], "cannot write the summary to /nonexistent/dir"),
    (["attach", "1", "--summary", "/tmp"], "it is a directory"),
    (["attach", "1", "--max-overhead", "inf"], "is not a number"),
    (["attach", "1", "--role", "learner"], "give PID=NAME"),
    (["attach", "1", "--role", "12="], "give PID=NAME"),
    (["attach", "1", "--role", "x=actor"], "give PID=NAME"),
    (["attach", "1", "--pid", "0"], "is not a PID"),
])
def test_usage_errors_exit_2(args, words):
    p = run_cli(*args)
    assert p.returncode == E.EXIT_USAGE
    assert words in p.stderr and "Traceback" not in p.stderr


def test_ebpf_flag_prints_program_without_root():
    p = run_cli("attach", "1", "--ebpf", "--sim-lib", "libtoysim.so:sim_step",
                prefix=["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
    assert p.returncode == 0, p.stderr
    assert "TRACEPOINT_PROBE(sched, sched_switch)" in p.stdout
    assert "on_enter(" in p.stdout and "#define NPROBES" in p.stdout


def test_exit_codes_are_distinct():
    codes = [v for k, v in vars(E).items() if k.startswith("EXIT_")]
    assert len(codes) == len(set(codes))


def test_no_args_prints_help():
    p = run_cli()
    assert p.returncode == 2 and "attach" in p.stderr


def test_every_error_lives_in_errors_py_with_its_own_documented_code():
    """All exception classes are defined in rlscope_top/errors.py; each user-facing one has
    a code of its own kind that is not 1 ("internal error") and that the README lists."""
    import ast  # noqa: PLC0415
    import pathlib  # noqa: PLC0415
    import re  # noqa: PLC0415

    from rlscope_top import errors as E  # noqa: PLC0415

    repo = pathlib.Path(__file__).resolve().parents[1]
    elsewhere = []
    for path in [*repo.glob("rlscope_top/**/*.py"), *repo.glob("probes/*.py"), *repo.glob("tui/*.py")]:
        if path.name == "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(getattr(b, "id", "").endswith(("Error", "Exception"))
                                                      for b in node.bases):
                elsewhere.append(f"{path.relative_to(repo)}:{node.name}")
    assert elsewhere == []
    typed = [c for c in vars(E).values() if isinstance(c, type) and issubclass(c, E.RlscopeError)
             and c is not E.RlscopeError]
    assert len(typed) >= 15 and all(c.code != E.EXIT_INTERNAL for c in typed), typed
    readme = (repo / "README.md").read_text()
    section = readme[readme.index("### Exit codes"):].split("\n## ", 1)[0]
    listed = {int(n) for n in re.findall(r"`(\d+)`", section)}
    assert {c.code for c in typed} <= listed, sorted({c.code for c in typed} - listed)
