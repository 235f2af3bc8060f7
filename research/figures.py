"""Every figure a study page quotes, recomputed from the study's committed data.

A study folder `research/<study>/` may hold `figures.py` with `tables() -> dict[str, str]`: block name to the
Markdown its page shows, computed from the folder's data alone (no training). A page marks each block:

    <!-- figures: NAME -->
    ...the Markdown `tables()[NAME]` returns...
    <!-- /figures -->

`python -m research.figures` rewrites every block of every page from the data; `--check` changes nothing and exits 1
naming each block whose text differs from its data, each block a page marks that no `tables()` makes, and each table
no page shows. Pages are the study folder's `README.md` and the results table `docs/results.md`, whose blocks name
their study: `<!-- figures: STUDY/NAME -->`.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path

RESEARCH = Path(__file__).resolve().parent
REPO = RESEARCH.parent
RESULTS_TABLE = REPO / "docs" / "results.md"
BLOCK = re.compile(r"(<!-- figures: (?P<name>[\w./-]+) -->\n)(?P<body>.*?)(<!-- /figures -->)", re.DOTALL)


@dataclass(frozen=True)
class Disagreement:
    """One block of one page that its data does not reproduce, or that has no table (or a table with no block)."""

    page: Path
    block: str
    problem: str

    def __str__(self) -> str:
        return f"{self.page.relative_to(REPO)}: block {self.block!r}: {self.problem}"


def studies() -> list[str]:
    """The study folders that hold a `figures.py`, sorted by name."""
    return sorted(p.parent.name for p in RESEARCH.glob("*/figures.py"))


def study_tables(study: str) -> dict[str, str]:
    """`research.<study>.figures.tables()`, each value ending in exactly one newline."""
    module = importlib.import_module(f"research.{study}.figures")
    return {name: text.rstrip("\n") + "\n" for name, text in module.tables().items()}


def all_tables() -> dict[str, str]:
    """Every study's tables, keyed `STUDY/NAME`."""
    return {f"{study}/{name}": text for study in studies() for name, text in study_tables(study).items()}


def refreshed(page: Path, tables: dict[str, str], prefix: str) -> tuple[str, list[Disagreement], set[str]]:
    """The page's text with every block replaced by its table; the disagreements found; the block names shown."""
    text = page.read_text()
    problems: list[Disagreement] = []
    shown: set[str] = set()

    def replace(match: re.Match) -> str:
        name = prefix + match["name"]
        if name not in tables:
            problems.append(Disagreement(page, match["name"], "no figures.py table makes this block"))
            return match.group(0)
        shown.add(name)
        if match["body"] != tables[name]:
            problems.append(Disagreement(page, match["name"], "the page's text differs from what its data gives"))
        return match.group(1) + tables[name] + match.group(4)

    return BLOCK.sub(replace, text), problems, shown


def refresh(write: bool) -> list[Disagreement]:
    """Compare (and with `write`, rewrite) every study page and the results table against the data."""
    tables = all_tables()
    problems: list[Disagreement] = []
    shown: set[str] = set()
    pages = [(RESEARCH / study / "README.md", f"{study}/") for study in studies()]
    pages += [(RESULTS_TABLE, "")] if RESULTS_TABLE.exists() else []
    for page, prefix in pages:
        if not page.exists():
            problems.append(Disagreement(page, "*", "the study has figures.py but no README.md page"))
            continue
        text, found, names = refreshed(page, tables, prefix)
        problems += found
        shown |= names
        if write and text != page.read_text():
            page.write_text(text)
    for name in sorted(tables.keys() - shown):
        study, block = name.split("/", 1)
        problems.append(Disagreement(RESEARCH / study / "README.md", block, "a table no page shows"))
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 where a page and its data differ")
    args = parser.parse_args(argv)
    problems = refresh(write=not args.check)
    if args.check:
        for problem in problems:
            print(problem)
        return 1 if problems else 0
    # Rewritten blocks now agree; what is left is a block without a table, or a table without a block.
    left = [p for p in problems if "differs" not in p.problem]
    for problem in left:
        print(problem)
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
