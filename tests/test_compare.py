"""`rlscope-top compare`: figures per step, ratios, and bad input (no eBPF needed)."""

from __future__ import annotations

import json
import subprocess

import pytest
from rich.console import Console

from support import CLI, REPO
from rlscope_top.report import compare
from rlscope_top.errors import UsageError


def _summary(duration, python, backend, trans, calls=None, frameworks=None, **extra) -> dict:
    tot = python + backend
    return {"schema": "rlscope-top.summary/1", "pid": 4243, "command": "python train.py",
            "duration_s": duration,
            "totals": {"wall_s": duration, "python_s": python, "backend_s": backend, "simulator_s": None,
                       "cuda_api_s": None, "gpu_s": None},
            "shares": {"python": python / tot, "backend": backend / tot, "simulator": 0.0, "cuda_api": 0.0},
            "calls": {"backend": calls if calls is not None else trans, "simulator": None, "cuda_api": None},
            "transitions": {"python->backend": trans},
            "frameworks": frameworks or {}, **extra}


def _write(tmp_path, name, doc) -> str:
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return str(p)


def test_figures_per_step_and_per_second():
    doc = _summary(4.0, 2.0, 1.0, 6007)
    per_step = compare.figures(doc, 2003)
    assert per_step["python"] == pytest.approx(2.0 / 2003)
    assert per_step["python->backend"] == pytest.approx(6007 / 2003)
    per_s = compare.figures(doc, None)
    assert per_s["backend"] == pytest.approx(0.25)
    assert per_s["simulator"] is None


def test_table_shows_ratio_transitions_and_calls_per_step(tmp_path):
    fw = {"torch": {"backend_s": 1.0, "calls": 6007, "python->backend": 6007}}
    a = _write(tmp_path, "torch.json", _summary(4.0, 2.0, 1.0, 6007, frameworks=fw))
    b = _write(tmp_path, "jax.json", _summary(3.0, 1.5, 0.5, 1009, calls=2017,
                                                 frameworks={"jax": {"backend_s": 0.5, "calls": 2017,
                                                                     "python->backend": 1009}}))
    con = Console(record=True, width=200)
    compare.run(a, b, 2003, 2003, ("torch", "jax"), console=con)
    text = con.export_text()
    rows = {ln.split("│")[0].strip(): [c.strip() for c in ln.split("│")[1:]] for ln in text.splitlines() if "│" in ln}
    assert rows["python->backend"][0] == "3.0" and rows["python->backend"][2] == "0.5"
    assert rows["python->backend"][4] == f"{1009 / 6007:.2f}x"
    assert rows["backend calls"][2] == "1.0"
    assert rows["backend"][4] == "0.50x" and rows["python"][4] == "0.75x"
    assert rows["backend: torch"][2] == "n/a" and rows["backend: jax"][0] == "n/a"
    assert "per step" in text


def test_steps_from_the_summary_and_per_second_without(tmp_path):
    a = _write(tmp_path, "a.json", _summary(4.0, 2.0, 1.0, 400, steps=100))
    b = _write(tmp_path, "b.json", _summary(2.0, 1.0, 1.0, 100, steps=50))
    con = Console(record=True, width=200)
    compare.run(a, b, console=con)
    assert "per step" in con.export_text()
    c = _write(tmp_path, "c.json", _summary(2.0, 1.0, 1.0, 100))
    con = Console(record=True, width=200)
    compare.run(a, c, console=con)
    text = con.export_text()
    assert "per second of wall time" in text and "--steps-a" in text


@pytest.mark.parametrize("content, words", [
    (None, "no such summary file"),
    ("not json at all", "is not JSON"),
    ('{"schema": "something/2"}', "is not an rlscope-top summary"),
    ("[1, 2]", "is not an rlscope-top summary"),
    ('{"schema": "rlscope-top.summary/1", "duration_s": 0, "totals": {}}', "no measured window"),
])
def test_bad_summary_files(tmp_path, content, words):
    good = _write(tmp_path, "good.json", _summary(1.0, 0.5, 0.5, 10))
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    with pytest.raises(UsageError, match=words):
        compare.run(good, str(bad), console=Console(file=open("/dev/null", "w")))


@pytest.mark.parametrize("argv, words", [
    (["good", "missing"], "no such summary file"),
    (["good", "good", "--steps-a", "10"], "steps given for one run only"),
    (["good", "good", "--steps-a", "-3", "--steps-b", "2"], "is not a step count"),
    (["good", "good", "--names", "onlyone"], "two titles"),
    (["good"], "required"),
])
def test_cli_bad_input_one_line_hint_exit_2(tmp_path, argv, words):
    good = _write(tmp_path, "good.json", _summary(1.0, 0.5, 0.5, 10))
    args = [good if x == "good" else str(tmp_path / x) if x == "missing" else x for x in argv]
    p = subprocess.run([*CLI, "compare", *args], capture_output=True, text=True, cwd=str(REPO), timeout=60)
    assert p.returncode == 2, p.stderr
    assert words in p.stderr and "Traceback" not in p.stderr
    if "usage:" not in p.stderr:                 # our own errors: one line and a hint
        assert p.stderr.count("\n") == 2 and "hint:" in p.stderr


def test_cli_compare_ok(tmp_path):
    a = _write(tmp_path, "a.json", _summary(4.0, 2.0, 1.0, 400))
    b = _write(tmp_path, "b.json", _summary(2.0, 1.0, 1.0, 100))
    p = subprocess.run([*CLI, "compare", a, b, "--steps", "97", "--names", "torch,tf"], capture_output=True,
                       text=True, cwd=str(REPO), timeout=60)
    assert p.returncode == 0, p.stderr
    assert "torch" in p.stdout and "B/A" in p.stdout and "per step" in p.stdout


@pytest.mark.parametrize("what", ["compare", "symbols"])
def test_a_reader_that_stops_early_ends_us_quietly(tmp_path, what):
    """`rlscope-top symbols LIB | head`, `compare A B | head -1`: the reader closes the pipe
    after a line; we end with 141 (128 + SIGPIPE, as the shell's own tools) and say nothing,
    where we said "internal error: BrokenPipeError" (symbols) or exited 1 (compare). Both
    outputs are larger than a pipe's 64 KiB, so the writer always meets the closed pipe (a
    compare of two plain summaries, ~1.5 KB, could finish before the reader closed: 0, once
    in CI)."""
    import sys  # noqa: PLC0415

    if what == "compare":
        fw = {f"fw{i:04d}": {"backend_s": 0.001, "calls": 7, "python->backend": 7} for i in range(1500)}
        args = [_write(tmp_path, "a.json", _summary(4.0, 2.0, 1.0, 6007, frameworks=fw)),   # ~210 KB of rows
                _write(tmp_path, "b.json", _summary(5.0, 2.0, 2.0, 9001, frameworks=fw))]
    else:
        args = [sys.executable]           # the interpreter's dynamic symbols: a long list
    for _ in range(3):
        p = subprocess.Popen([*CLI, what, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, cwd=str(REPO))
        assert p.stdout.readline()
        p.stdout.close()
        err = p.stderr.read()
        assert p.wait(timeout=60) == 141, err
        assert err == "", err


def test_estimated_calls_and_shares_carry_their_bound(tmp_path):
    est = {"backend": {"mode": "off", "calls_estimated": 500_000, "calls_bound": 140_000, "bound_pp": 1.3}}
    src = {"python_s": "estimated", "backend_s": "estimated", "simulator_s": "exact"}
    fw = {"torch": {"backend_s": 3.0, "calls": 700_001, "python->backend": 700_001}}
    a = _write(tmp_path, "a.json", _summary(10.0, 1.0, 3.0, 700_001, estimates=est, sources=src, frameworks=fw))
    b = _write(tmp_path, "b.json", _summary(10.0, 1.0, 3.0, 400_009))      # counted: no bound
    fw2 = {**fw, "jax": {"backend_s": 1.0, "calls": 1009, "python->backend": 1009}}
    c = _write(tmp_path, "c.json", _summary(10.0, 1.0, 3.0, 700_001, estimates=est, sources=src, frameworks=fw2))
    con = Console(record=True, width=200)
    compare.run(a, b, console=con)
    compare.run(c, b, console=con)
    rows = [[x.strip() for x in ln.split("│")] for ln in con.export_text().splitlines() if "│" in ln]
    first, second = rows[:len(rows) // 2], rows[len(rows) // 2:]
    by = {r[0]: r[1:] for r in first}
    assert by["backend calls"][0] == "70,000.1 ±20%" and by["backend calls"][2] == "40,000.9"
    assert by["python->backend: torch"][0] == "70,000.1 ±20%"
    assert by["backend"][1] == "75.0% ±1.3pp" and by["backend"][3] == "75.0%"
    by2 = {r[0]: r[1:] for r in second}
    assert by2["python->backend: torch"][0].endswith("±?") and by2["backend calls"][0].endswith("±20%")
