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


def test_torchs_backward_counter_has_its_own_price_and_other_counters_the_c_loops(tmp_path, monkeypatch):
    _write(tmp_path, monkeypatch, _entry({**GOOD, "count_torch": {"outside": 3407, "inside": 3407, "kernel_share": 0.3}}))
    cal = C.load()
    assert cal.hit_ns("count", True, "torch") == 3406          # a lone probe: (outside + inside) // 4, twice
    assert cal.kernel_share("count", True, "torch") == 0.3
    assert cal.hit_ns("count", True, "sim") == cal.hit_ns("count", True) == (1035 + 873) // 4 * 2
    assert cal.hit_ns("enter", True, "torch") == 1129 // 2 + 953 // 2   # the bracket keeps bracket_torch
    _write(tmp_path, monkeypatch, _entry(GOOD))                 # an older file, measured before count_torch:
    assert C.load().hit_ns("count", True, "torch") == 3400      # the development VM's figure


def test_a_file_from_before_the_tick_was_measured_prices_it_at_the_default(tmp_path, monkeypatch):
    _write(tmp_path, monkeypatch, _entry(GOOD))                 # no "tick": calibrated before 2026-12-06
    assert C.load().kinds["tick"]["per_tick"] == C.DEFAULT_KINDS["tick"]["per_tick"] == 26000
    _write(tmp_path, monkeypatch, _entry({**GOOD, "tick": {"per_tick": 4001}}))
    assert C.load().measured and C.load().kinds["tick"]["per_tick"] == 4001


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
    (_entry({"tick": {"per_switch": 5}}), None, "tick lacks per_tick"),
    (_entry({"tick": {"per_tick": -1}}), None, "tick.per_tick is -1"),
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


def _load_within(seconds: float):
    """C.load() in a thread: a FIFO read as a file would block it for good."""
    import threading  # noqa: PLC0415

    box = []
    t = threading.Thread(target=lambda: box.append(C.load()), daemon=True)
    t.start()
    t.join(seconds)
    assert box, "loading the calibration blocked"
    return box[0]


@pytest.mark.parametrize("kind, said", [
    ("symlink", "is a symlink"),
    ("fifo", "is not a regular file"),
    ("directory", "Is a directory"),
    ("group-writable", "writable by root alone"),
    ("another user's", "owned by uid 65534"),
])
def test_a_file_root_should_not_trust_is_not_read(tmp_path, monkeypatch, kind, said):
    """Root reads this file: never through a symlink, never a FIFO (a hang), never a file that
    someone else could have written (its figures move every estimate)."""
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_entry(GOOD)))
    p = tmp_path / "calibration.json"
    if kind == "symlink":
        p.symlink_to(good)
    elif kind == "fifo":
        os.mkfifo(p)
    elif kind == "directory":
        p.mkdir()
    else:
        p.write_text(good.read_text())
        if kind == "group-writable":
            p.chmod(0o664)
        elif os.geteuid() == 0:
            os.chown(p, 65534, 65534)
        else:
            pytest.skip("chown needs root")
    monkeypatch.setenv("RLSCOPE_CALIBRATION", str(p))
    cal = _load_within(5)
    assert not cal.measured and cal.kinds == C.DEFAULT_KINDS
    assert said in cal.problem and str(p) in cal.problem, cal.problem


def test_a_fifo_in_place_of_a_library_is_not_elf_and_does_not_block(tmp_path):
    from rlscope_top.errors import NotElf  # noqa: PLC0415
    from rlscope_top.probes.elf_symbols import ElfFile  # noqa: PLC0415

    p = tmp_path / "libtorch_cpu.so"
    os.mkfifo(p)
    with pytest.raises(NotElf, match="not a regular file"):
        ElfFile(str(p))


def test_calibrate_replaces_a_fifo_or_symlink_without_reading_it(tmp_path, monkeypatch):
    other = tmp_path / "elsewhere.json"
    other.write_text(json.dumps({"schema": C.SCHEMA, "machines": {"another machine": {"kinds": GOOD}}}))
    for kind in ("fifo", "symlink"):
        p = tmp_path / f"{kind}.json"
        os.mkfifo(p) if kind == "fifo" else p.symlink_to(other)
        monkeypatch.setenv("RLSCOPE_CALIBRATION", str(p))
        C.save(GOOD, {})
        assert p.is_file() and not p.is_symlink()
        assert list(json.loads(p.read_text())["machines"]) == [C.machine_key()]   # nothing read through it
        assert json.loads(other.read_text())["machines"].keys() == {"another machine"}


@pytest.mark.parametrize("torch_total, inside", [
    ((1152, 956), round(2108 * 859 / 1895)),   # dearer than the C loop: still its proportions
    ((900, 600), round(1500 * 859 / 1895)),    # cheaper: the same
    ((900, 0), round(900 * 859 / 1895)),       # a measured split is not used: the loop cannot time its inside
])
def test_a_torch_brackets_cost_is_split_as_the_c_brackets(torch_total, inside):
    from rlscope_top.commands.calibrate import _torch_split

    c_bracket = {"outside": 1036, "inside": 859}
    got = _torch_split({"outside": torch_total[0], "inside": torch_total[1], "kernel_share": 0.8}, c_bracket)
    assert got["inside"] == inside and got["outside"] + got["inside"] == sum(torch_total)
    assert got["kernel_share"] == 0.8


@pytest.mark.parametrize("diffs, price, outside", [
    ([30e6, 36e6, 33e6], 3300.0, ""),                 # 10,000 passes: 3.3 us each, 2.5 lone probes
    ([60e6, 65e6, 64e6], 6400.0, ""),                 # 4.9 lone probes: inside the range
    ([-4e6, 2e6, -1e6], 3900.0, "low"),               # the loops' difference inside their noise (CI read 0 ns)
    ([-290e6, 830e6, 770e6], 3900.0, "high"),         # 77 us a pass (the Intel VM's noise)
])
def test_the_backward_counters_price_outside_one_to_five_lone_probes_is_three_of_them(diffs, price, outside):
    from rlscope_top.commands.calibrate import count_price

    assert count_price(diffs, 10_000, 1300) == (pytest.approx(price), outside)


@pytest.mark.parametrize("diffs, calls, outside, inside, rl, lowest", [
    ([29e6, 31e6, 30e6], 10_000, 1537, 1363, 3000.0, 2900.0),   # every round above 2.5 us: priced at the lowest
    ([10e6, 12e6, 11e6], 10_000, 1325, 1175, 1100.0, 1000.0),   # below the tight loop's 2.5 us: kept that
    ([10e6, 48e6, 49e6, 50e6, 23e6], 10_000, 1325, 1175, 4800.0, 1000.0),   # a noisy median (CI): not priced at it
    ([5e6], 0, 1325, 1175, 0.0, 0.0),                             # no call seen: the tight loop's
])
def test_a_torch_brackets_price_rises_above_a_tight_loops_only_as_far_as_every_rl_round_shows(
        diffs, calls, outside, inside, rl, lowest):
    from rlscope_top.commands.calibrate import rl_bracket_price

    tight = {"outside": 1325, "inside": 1175, "kernel_share": 0.9}
    price, read, low = rl_bracket_price(diffs, calls, tight)
    assert price == {"outside": outside, "inside": inside, "kernel_share": 0.9}   # tight's proportions
    assert (read, low) == (pytest.approx(rl), pytest.approx(lowest))


@pytest.mark.parametrize("at, now, words", [
    (1000.0, 1000.0 + 3 * 86400 + 5, "3 days ago"), (1000.0, 1000.0 + 3600, "1 hour ago"),
    (1000.0, 1000.0 + 7 * 60 + 59, "7 minutes ago"), (1000.0, 1010.0, "just now"),
    (0.0, 5000.0, ""), (2000.0, 1000.0, ""),           # unknown, or a clock that went back
])
def test_a_calibrations_age_in_words(at, now, words):
    assert C.age_words(at, now) == words


@pytest.mark.parametrize("stored, read", [(1795793198.5, 1795793198.5), ("yesterday", 0.0), (True, 0.0), (None, 0.0)])
def test_the_time_a_calibration_was_measured_is_read_or_unknown(tmp_path, monkeypatch, stored, read):
    doc = _entry(GOOD)
    if stored is not None:
        doc["machines"][C.machine_key()]["measured_at"] = stored
    _write(tmp_path, monkeypatch, doc)
    cal = C.load()
    assert cal.measured and cal.measured_at == read


def test_a_kinds_inside_is_its_rounds_median_share_of_the_total():
    """Rounds at two machine speeds (today's VM alternated 1.1 and 2.1 us a loop): the share
    inside is the same in each, so the split is, whatever the ns of the median round."""
    from rlscope_top.commands.calibrate import inside_ns

    diffs = [2000, 4000, 2000, 4000, 4100, 3900, 2100]
    inside = [0.45 * d for d in diffs]
    assert inside_ns(inside, diffs, 2100) == round(0.45 * 2100)        # the ns' median would be 1,755
    assert inside_ns([500, 9000], [1000, 1000], 1000) == 1000          # never more than the total
    assert inside_ns([-50, -40, 10], [1000, 1000, 1000], 1000) == 0    # nor below nothing
    assert inside_ns([], [], 1000) == 0
