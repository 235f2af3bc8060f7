"""Every figures block of every study page and of docs/results.md agrees with the committed data (no training), the
check fails where a page and its data part, and research/ stays small."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from research import figures

REPO = Path(__file__).resolve().parents[2]
# All of research/ (pages, scripts, compact data, one chart a study) must stay a few MB: whole run folders do not belong.
RESEARCH_LIMIT_BYTES = 4 * 1024 * 1024


def test_every_page_agrees_with_its_data():
    problems = figures.refresh(write=False)
    assert not problems, "pages and their data disagree; run `python -m research.figures`:\n" + "\n".join(map(str, problems))


def test_every_study_with_figures_has_a_page_that_shows_them():
    for study in figures.studies():
        assert (figures.RESEARCH / study / "README.md").exists(), f"research/{study} has figures.py but no README.md"


@pytest.fixture
def fake_study(tmp_path, monkeypatch):
    """A research package in tmp_path holding one study `toy` whose table is "| a |\\n|---|\\n| 1 |"."""
    root = tmp_path / "repo"
    package = root / "research_toy"
    (package / "toy").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "toy" / "__init__.py").write_text("")
    (package / "toy" / "figures.py").write_text(
        textwrap.dedent(
            '''
            def tables():
                return {"count": "| a |\\n|---|\\n| 1 |"}
            '''
        )
    )
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setattr(figures, "RESEARCH", package)
    monkeypatch.setattr(figures, "REPO", root)
    monkeypatch.setattr(figures, "RESULTS_TABLE", root / "docs" / "results.md")
    real_import = figures.importlib.import_module
    monkeypatch.setattr(
        figures.importlib, "import_module", lambda name: real_import(name.replace("research.", "research_toy.", 1))
    )
    return package / "toy" / "README.md"


def page(*blocks: str) -> str:
    return "# toy\n\n" + "\n".join(blocks)


def block(name: str, body: str) -> str:
    return f"<!-- figures: {name} -->\n{body}<!-- /figures -->\n"


def test_a_page_that_shows_the_tables_text_passes(fake_study):
    fake_study.write_text(page(block("count", "| a |\n|---|\n| 1 |\n")))
    assert figures.refresh(write=False) == []


def test_a_block_whose_text_differs_fails_and_is_rewritten(fake_study):
    fake_study.write_text(page(block("count", "| a |\n|---|\n| 2 |\n")))
    problems = figures.refresh(write=False)
    assert [(p.block, "differs" in p.problem) for p in problems] == [("count", True)]
    assert "| 2 |" in fake_study.read_text(), "a check must not write"
    figures.refresh(write=True)
    assert "| 1 |" in fake_study.read_text() and "| 2 |" not in fake_study.read_text()
    assert figures.refresh(write=False) == []


def test_a_block_no_table_makes_fails(fake_study):
    fake_study.write_text(page(block("count", "| a |\n|---|\n| 1 |\n"), block("gone", "old text\n")))
    problems = figures.refresh(write=False)
    assert [(p.block, p.problem) for p in problems] == [("gone", "no figures.py table makes this block")]


def test_a_table_no_page_shows_fails(fake_study):
    fake_study.write_text(page("no blocks at all\n"))
    problems = figures.refresh(write=False)
    assert [(p.block, p.problem) for p in problems] == [("count", "a table no page shows")]


def test_the_results_table_counts_as_showing_a_table(fake_study):
    fake_study.write_text(page("no blocks\n"))
    figures.RESULTS_TABLE.parent.mkdir(parents=True)
    figures.RESULTS_TABLE.write_text(block("toy/count", "| a |\n|---|\n| 1 |\n"))
    assert figures.refresh(write=False) == []
    figures.RESULTS_TABLE.write_text(block("toy/count", "| a |\n|---|\n| 9 |\n"))
    assert [p.block for p in figures.refresh(write=False)] == ["toy/count"]


def test_check_exits_1_naming_the_block(fake_study, capsys):
    fake_study.write_text(page(block("count", "stale\n")))
    assert figures.main(["--check"]) == 1
    assert "block 'count': the page's text differs from what its data gives" in capsys.readouterr().out


def test_research_stays_small():
    tracked = subprocess.run(
        ["git", "ls-files", "-z", "research"], cwd=REPO, capture_output=True, check=True
    ).stdout.decode().split("\0")
    sizes = {name: (REPO / name).stat().st_size for name in tracked if name and (REPO / name).is_file()}
    total = sum(sizes.values())
    largest = sorted(sizes, key=sizes.get, reverse=True)[:5]
    assert total < RESEARCH_LIMIT_BYTES, f"research/ holds {total / 1e6:.1f} MB in git; largest: {largest}"


def test_the_command_line_check_passes_on_the_committed_data():
    run = subprocess.run([sys.executable, "-m", "research.figures", "--check"], cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
