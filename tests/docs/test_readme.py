"""The README's first screen holds what it promises: exactly two set-up commands, `make run` and `make test`, which
the Makefile and .ci/run run; a verl config selecting `at_grpo` that passes `python -m verl_mas.main`'s own checks;
and the pages a newcomer reads first keep sentences of at most 40 words and links that resolve."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from doc_commands import doc_session, shown_files
from make_run import make_run_arguments

from verl_mas.verl_engine.config import MasConfigError

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
FIRST_READ = [README, REPO / "docs" / "extending.md", REPO / "docs" / "local_engine.md"]
MOST_WORDS = 40
EXAMPLE_LAUNCH = ["--config-path", ".", "--config-name", "my_run"]  # as the README launches its example


def code_lines(text: str) -> list[str]:
    """The lines of the indented code blocks, stripped."""
    return [line.strip() for line in text.splitlines() if line.startswith("    ") and line.strip()]


def test_the_readme_holds_exactly_two_setup_commands_and_ci_runs_the_test_one():
    make_lines = [line.split("#")[0].strip() for line in code_lines(README.read_text()) if line.startswith("make ")]
    assert make_lines == ["make run", "make test"]
    assert make_run_arguments() == ["train", "preset=smollm2_math"], (
        "make run is `verl-mas train preset=smollm2_math`: the main job on the real model, embedded as a preset"
    )
    ci = [
        line
        for line in (REPO / ".ci" / "run").read_text().splitlines()
        if line and not line.startswith(("#", "set", "cd"))
    ]
    assert ci[0] == "make test", ".ci/run's first command is the README's test command"


def example(tmp_path: Path, change: tuple[str, str] | None = None):
    """A doc session holding the README's my_run.yaml, with one text replaced by another when `change` says so."""
    text = shown_files(README)["my_run.yaml"]
    if change is not None:
        assert change[0] in text
        text = text.replace(*change)
    return doc_session(REPO, tmp_path, {}, {"my_run.yaml": text})


def test_the_readmes_verl_config_selects_at_grpo_and_passes_mains_checks(tmp_path):
    with example(tmp_path) as session:
        config = session.compose_main(EXAMPLE_LAUNCH)
        session.check_main(EXAMPLE_LAUNCH)  # check_config: mas:, what the trainer supports, data, verl's validation
    assert config.algorithm.adv_estimator == "at_grpo"
    assert (config.mas.env, config.mas.router, config.mas.rollout.k) == ("sudoku", "per_role", 4)
    assert config.actor_rollout_ref.model.path == "Qwen/Qwen3-1.7B"
    assert config.trainer.use_v1 is True  # from mas_defaults, under the example


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (("adv_estimator: at_grpo", "adv_estimator: grpo"), "algorithm.adv_estimator must be at_grpo"),
        (("rollout: {k: 4}", "rollout: {kk: 4}"), "mas.rollout: unknown key(s) ['kk']"),
        (("router: per_role", "router: per_agent"), "mas.router: unknown router 'per_agent'"),
        (("env: sudoku", "env: sudok"), "mas.env: unknown environment 'sudok'"),
    ],
)
def test_a_broken_copy_of_the_readmes_verl_config_is_refused_naming_the_key(tmp_path, change, named):
    with example(tmp_path, change) as session, pytest.raises(MasConfigError) as raised:
        session.check_main(EXAMPLE_LAUNCH)
    assert named in str(raised.value)


def sentences(path: Path) -> list[str]:
    """The prose sentences of a Markdown page: code blocks, tables, headings and HTML left out, a list item or a
    paragraph split at sentence ends, each inline code span counted as one word and each link as its text."""
    chunks, current, fenced = [], [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        stripped = line.strip()
        other = (
            fenced or line.startswith("    ") and not stripped.startswith("-") or stripped.startswith(("|", "#", "<"))
        )
        if other or not stripped or stripped.startswith("- "):
            chunks.append(" ".join(current))
            current = [stripped[2:]] if not other and stripped.startswith("- ") else []
            continue
        current.append(stripped)
    chunks.append(" ".join(current))
    found = []
    for chunk in filter(None, chunks):
        chunk = re.sub(r"`[^`]*`", "CODE", chunk)
        for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z`(\[\"*])", chunk):
            found.append(re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", sentence))
    return found


@pytest.mark.parametrize("page", FIRST_READ, ids=lambda p: str(p.relative_to(REPO)))
def test_pages_read_first_keep_sentences_of_at_most_40_words(page):
    long = [f"{len(s.split())} words: {s}" for s in sentences(page) if len(s.split()) > MOST_WORDS]
    assert not long, f"{page.relative_to(REPO)}: split these sentences:\n" + "\n".join(long)


def test_the_sentence_reader_counts_what_a_reader_reads(tmp_path):
    page = tmp_path / "page.md"
    words = " ".join(["word"] * 39)
    page.write_text(
        f"# A heading of no count\n\n{words} `a code span of many words` end. Next one [a link text](x.md).\n\n"
        "    a code block line with very many words " + "x " * 50 + "\n\n- an item. Its second\n  line.\n"
    )
    assert [len(s.split()) for s in sentences(page)] == [41, 5, 2, 3]


def anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation but - and _ dropped, spaces as -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def broken_links(page: Path) -> list[str]:
    """Each relative link of `page` whose file, or heading within a Markdown file, is not there."""
    broken = []
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if "://" in target or target.startswith("mailto:"):
            continue
        file, _, fragment = target.partition("#")
        linked = (page.parent / file).resolve() if file else page
        if not linked.exists():
            broken.append(f"{target}: no {linked}")
        elif fragment and linked.suffix == ".md":
            headings = re.findall(r"^#+ (.*)$", linked.read_text(encoding="utf-8"), flags=re.MULTILINE)
            if fragment not in {anchor(heading) for heading in headings}:
                broken.append(f"{target}: {linked.name} has no heading #{fragment}")
    return broken


@pytest.mark.parametrize(
    "page", [README, *sorted((REPO / "docs").glob("*.md"))], ids=lambda p: str(p.relative_to(REPO))
)
def test_every_relative_link_resolves(page):
    assert not broken_links(page)


def test_a_link_to_a_missing_file_or_heading_is_named(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n\n## The `mas.lora_per_role` key, (L2)\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[a](other.md) [b](other.md#the-maslora_per_role-key-l2) [c](other.md#gone) [d](missing.md) [e](#nowhere)\n"
    )
    assert broken_links(page) == [
        "other.md#gone: other.md has no heading #gone",
        f"missing.md: no {tmp_path / 'missing.md'}",
        "#nowhere: page.md has no heading #nowhere",
    ]
