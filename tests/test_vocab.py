"""One vocabulary (rlscope_top/vocab.py): the kernel's category codes agree with it, every
probe set declares its category once (in the catalog), and "n/a" is shown one way."""

from __future__ import annotations

import pathlib
import re

import pytest

from rlscope_top import vocab as V
from rlscope_top.account.accounting import Accounting
from rlscope_top.probes import catalog

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_the_bpf_program_numbers_categories_as_vocab_does():
    text = (REPO / "probes" / "bpf_program.c").read_text()
    defined = {m[0]: int(m[1]) for m in re.findall(r"#define (CAT_\w+|NCAT) (\d+)", text)}
    assert defined == {"CAT_PY": V.CAT_PY, "CAT_BACKEND": V.CAT_BACKEND, "CAT_SIM": V.CAT_SIM,
                       "CAT_CUDA": V.CAT_CUDA, "NCAT": V.NCAT}
    assert [V.CATEGORIES[i] for i in (V.CAT_PY, V.CAT_BACKEND, V.CAT_SIM, V.CAT_CUDA)] == \
        ["python", "backend", "simulator", "cuda_api"]


@pytest.mark.parametrize("group", sorted({s.group for s in catalog.builtin()}) + ["sim:libphysics.so"])
def test_every_probe_set_has_the_category_its_specs_declare(group):
    """The accounting reads a set's category from the catalog, so a new set can never read
    n/a for want of a second, hand-kept table."""
    specs = [s for s in catalog.builtin() if s.group == group] or catalog.sim_lib_specs(group[4:], ["step"])
    want = {V.CATEGORIES[s.category] for s in specs}
    assert {catalog.category_of_group(group)} == want
    acct = Accounting()
    acct.meta = {"groups": {group: ["/x/lib.so"]}}
    assert acct.attached_categories() == {"python"} | want


def test_an_unknown_set_adds_no_category():
    assert catalog.category_of_group("pybullet") is None


@pytest.mark.parametrize("value, spec, suffix, shown", [
    (None, ",.3f", "s", "n/a"), (1234.5, ",.1f", "s", "1,234.5s"), (0, ".0f", "%", "0%"), (None, ",", "", "n/a")])
def test_not_available_is_shown_one_way(value, spec, suffix, shown):
    assert V.fmt(value, spec, suffix) == shown
