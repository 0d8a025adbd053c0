"""A calibration file that cannot be used: the defaults, and one line saying why (never a
traceback in attach, doctor or calibrate)."""

import json
import os
import math
import subprocess

import pytest

from rlscope_top.collect import calibration as C

from support import CLI, REPO

GOOD = {"bracket": {"outside": 1035, "inside": 873, "kernel_share": 0.8}, "pair": {"outside": 927, "inside": 725},
        "bracket_torch": {"outside": 1129, "inside": 953}, "sched_switch": {"per_switch": 0}}


def _write(tmp_path, monkeypatch, doc, raw: str | None = None):
    p = tmp_path / "calibration.json"
    p.write_text(raw if raw is not None else json.dumps(doc))
    monkeypatch.setenv("RLSCOPE_CALIBRATION", str(p))
    return p


def _entry(kinds) -> dict:
    return {"schema": C.SCHEMA, "machines": {C.machine_key(): {"kinds": kinds}}}


def test_a_good_file_is_used(tmp_path, monkeypatch):
    _write(tmp_path, monkeypatch, _entry(GOOD))
    cal = C.load()
    assert cal.measured and not cal.problem
    assert cal.kinds["bracket_torch"]["inside"] == 953
    assert cal.hit_ns("enter", True, "torch") == 1129 // 2 + 953 // 2


def test_no_file_is_no_problem(tmp_path, monkeypatch):
    monkeypatch.setenv("RLSCOPE_CALIBRATION", str(tmp_path / "none.json"))
    cal = C.load()
    assert not cal.measured and cal.problem == ""


@pytest.mark.parametrize("doc, raw, said", [
    (None, '{"schema": ', "cannot read"),
    ([1, 2], None, "is not a rlscope-top.calibration/1 file"),
    ({"schema": "other/9", "machines": {}}, None, "is not a"),
    ({"schema": C.SCHEMA, "machines": []}, None, "is not a"),
    ("entry", None, 'no "kinds"'),
    (_entry({"bracket": {"outside": "lots", "inside": 790}}), None, "bracket.outside is 'lots'"),
    (_entry({"pair": None}), None, "pair is not a table"),
    (_entry({"pair": {"outside": -5, "inside": 1}}), None, "pair.outside is -5"),
    (_entry({"pair": {"outside": 1e12, "inside": 1}}), None, "pair.outside is 1000000000000.0"),
    (_entry({"pair": {"outside": True, "inside": 1}}), None, "pair.outside is True"),
    (_entry({"bracket": {"outside": 1, "inside": 1, "kernel_share": 3}}), None, "kernel_share is 3"),
    (_entry({"bracket_torch": {"outside": 1}}), None, "bracket_torch lacks inside"),
    (_entry({"sched_switch": {}}), None, "sched_switch lacks per_switch"),
])
def test_a_broken_file_gives_the_defaults_and_says_why(tmp_path, monkeypatch, doc, raw, said):
    if doc == "entry":
        doc = {"schema": C.SCHEMA, "machines": {C.machine_key(): {"nokinds": 1}}}
    p = _write(tmp_path, monkeypatch, doc, raw)
    cal = C.load()
    assert not cal.measured and cal.kinds == C.DEFAULT_KINDS
    assert said in cal.problem and str(p) in cal.problem
    for kind in ("pair", "enter", "exit", "count"):      # every figure the probes use is a number
        assert math.isfinite(cal.hit_ns(kind, True)) and math.isfinite(cal.hit_ns(kind, False))


def test_calibrate_saves_over_a_broken_file(tmp_path, monkeypatch):
    p = _write(tmp_path, monkeypatch, [1, 2])
    C.save(GOOD, {})
    assert C.load().measured and json.loads(p.read_text())["schema"] == C.SCHEMA


def test_doctor_names_the_broken_field(tmp_path):
    p = tmp_path / "calibration.json"
    p.write_text(json.dumps(_entry({"bracket": {"outside": "lots", "inside": 790}})))
    d = subprocess.run([*CLI, "doctor"], capture_output=True, text=True, timeout=60, cwd=str(REPO),
                       env={**os.environ, "RLSCOPE_CALIBRATION": str(p)})
    line = next(ln for ln in d.stdout.splitlines() if "calibration" in ln)
    assert "bracket.outside is 'lots'" in line and "rlscope-top calibrate" in line
    assert "Traceback" not in d.stdout + d.stderr
