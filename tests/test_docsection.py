"""A bench that rewrites its table in docs/ keeps the section's hand-written notes below the
KEEP line, and every other section (bench/docsection.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from docsection import KEEP, replace_section  # noqa: E402


def test_the_notes_below_the_keep_line_survive_a_rewrite(tmp_path):
    doc = tmp_path / "d.md"
    doc.write_text(f"# T\n\n## A\n\nold table\n\n{KEEP}\n\nWhat changed: 1.30x -> 1.12x.\n\n## B\n\nother\n")
    replace_section(str(doc), "## A", ["new table"])
    text = doc.read_text()
    assert "old table" not in text and "new table" in text
    assert text.index("new table") < text.index(KEEP) < text.index("What changed: 1.30x -> 1.12x.") < text.index("## B")
    assert text.endswith("## B\n\nother\n") and text.count(KEEP) == 1
    replace_section(str(doc), "## A", ["newer table"])          # twice: still one line, the notes once
    text = doc.read_text()
    assert text.count(KEEP) == 1 and text.count("What changed") == 1 and "newer table" in text


def test_a_section_without_the_line_is_replaced_whole_and_a_new_one_goes_last(tmp_path):
    doc = tmp_path / "d.md"
    doc.write_text("# T\n\n## A\n\nold table\n\nold notes\n\n## B\n\nother\n")
    replace_section(str(doc), "## A", ["new table"])
    replace_section(str(doc), "## C", ["c table"])
    text = doc.read_text()
    assert "old notes" not in text and "other" in text
    assert text.index("## A") < text.index("## B") < text.index("## C") and text.rstrip().endswith(KEEP)
