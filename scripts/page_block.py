"""A generated block of a documentation page, between a marker line that opens it and one that closes it:
printed, checked against the page (``--check``, exit 1 when stale) or written into it (``--write``). The
validation scripts' shared command line."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PageBlock:
    """The block of ``page`` from ``begin`` to ``end`` (both kept), called ``name`` in messages."""

    page: Path
    begin: str
    end: str
    name: str

    def rewritten(self, text: str, block: str) -> str:
        """``text`` with its block replaced by ``block`` (which carries the markers)."""
        start, end = text.find(self.begin), text.find(self.end)
        if start < 0 or end < start:
            raise SystemExit(f"{self.page}: the {self.name}'s markers are missing")
        return text[:start] + block + text[end + len(self.end) :]

    def main(self, argv: Sequence[str], block: Callable[[], str], usage: str) -> int:
        """No flag: print the block; ``--check``: 0 when the page holds it, else 1; ``--write``: put it in."""
        if argv not in ([], ["--check"], ["--write"]):
            print(usage, file=sys.stderr)
            return 2
        table = block()
        if not argv:
            print(table)
            return 0
        text = self.page.read_text(encoding="utf-8")
        if argv == ["--check"]:
            current = self.rewritten(text, table) == text
            print(f"docs/{self.page.name}'s {self.name} is {'current' if current else 'stale'}")
            return 0 if current else 1
        self.page.write_text(self.rewritten(text, table), encoding="utf-8")
        return 0
