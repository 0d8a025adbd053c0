"""Replace one `## ` section of a Markdown file, keeping the others (benches share docs/overhead.md)."""

from __future__ import annotations

import os


def replace_section(path: str, heading: str, lines: list[str]) -> None:
    """Put `heading` + `lines` where that section is now (or at the end), leaving other sections alone."""
    text = open(path).read() if os.path.exists(path) else ""
    body = "\n".join([heading, "", *lines]).rstrip() + "\n"
    if heading in text:
        head, rest = text.split(heading, 1)
        nxt = rest.find("\n## ")
        tail = rest[nxt + 1:] if nxt >= 0 else ""
        text = head + body + ("\n" + tail if tail else "")
    else:
        text = text.rstrip() + "\n\n" + body
    with open(path, "w") as f:
        f.write(text)
