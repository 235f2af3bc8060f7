"""The docs' `verl-mas` examples chain: each `eval checkpoint=X` reads what a `train` line above it saved. The
README's train and eval examples run in order at the smoke size; every page's are checked from their configs."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
from doc_commands import DocCommand, extract

from verl_mas import cli
from verl_mas.local.presets import resolve_train_config
from verl_mas.overrides import parse_overrides
from verl_mas.pretrained import is_pretrained_name

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
# Examples the smoke-size run leaves out, and why: what they need is not on a CPU test machine.
NOT_RUN = {"device=cuda": "needs a GPU"}  # and every example that loads the registered real model (`real_model`)
# Appended to every train example: two steps of the smoke preset's size, whatever steps the doc asks for. Any
# checkpoint_every > 0 still saves the last step, so a chain holds at two steps exactly when it holds at the doc's.
SMOKE_PINS = ("steps=2", "progress=false")


def train_and_eval_examples(page: Path) -> list[DocCommand]:
    """The page's `verl-mas train` and `verl-mas eval` examples that run something (not `--help`), in order."""
    return [
        command
        for command in extract(page, REPO)
        if command.kind == "cli" and command.words[1:2] in (("train",), ("eval",)) and "--help" not in command.words
    ]


def broken_links(commands: list[DocCommand]) -> list[str]:
    """`path:line: why` for each eval that reads a checkpoint no train line above it saves, from their configs."""
    saved: dict[str, bool] = {}  # output_dir -> whether a train above saved checkpoints there
    broken = []
    for command in commands:
        overrides = parse_overrides(list(command.words[2:]))
        if command.words[1] == "train":
            config = resolve_train_config(overrides)
            saves = config.checkpoint_every > 0
            saved[config.output_dir] = saved.get(config.output_dir, False) or saves
            continue
        checkpoint = str(overrides.get("checkpoint") or "")
        if not checkpoint:
            continue  # a fresh warm start of the training config
        runs = [run for run in saved if checkpoint == run or checkpoint.startswith(f"{run}/")]
        if not runs:
            broken.append(f"{command.where}: checkpoint={checkpoint}: no train example above writes {checkpoint}")
        elif not saved[runs[0]]:
            broken.append(
                f"{command.where}: checkpoint={checkpoint}: the train examples above that write {runs[0]} save no "
                "checkpoint; give one of them checkpoint_every=N"
            )
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_eval_example_reads_a_checkpoint_a_train_example_above_saves(page):
    assert not broken_links(train_and_eval_examples(page))


def test_a_page_whose_eval_comes_first_or_reads_an_unsaved_run_is_named(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "    verl-mas eval checkpoint=runs/per_role swap_roles=true\n"
        "    verl-mas train preset=per_role steps=60\n"
        "    verl-mas eval checkpoint=runs/per_role\n"
        "    verl-mas train preset=per_role checkpoint_every=60\n"
        "    verl-mas eval checkpoint=runs/per_role/checkpoints/step_00000060\n"
        "    verl-mas eval checkpoint=runs/perrole\n"
    )
    assert broken_links([c for c in extract(page, tmp_path) if c.kind == "cli"]) == [
        "page.md:1: checkpoint=runs/per_role: no train example above writes runs/per_role",
        "page.md:3: checkpoint=runs/per_role: the train examples above that write runs/per_role save no checkpoint; "
        "give one of them checkpoint_every=N",
        "page.md:6: checkpoint=runs/perrole: no train example above writes runs/perrole",
    ]


def at_smoke_size(words: tuple[str, ...]) -> list[str]:
    """A train or eval example's arguments with the smoke preset first (beside the example's own) and, for train,
    SMOKE_PINS last; an eval of a checkpoint takes the size its run was trained at."""
    command, overrides = words[1], list(words[2:])
    named = [i for i, word in enumerate(overrides) if word.startswith("preset=")]
    if command == "eval" and any(word.startswith("checkpoint=") for word in overrides):
        return [command, *overrides]
    if named:
        presets = overrides[named[0]].split("=", 1)[1].strip("[]")
        overrides[named[0]] = f"preset=[smoke,{presets}]"
    else:
        overrides.insert(0, "preset=smoke")
    return [command, *overrides, *(SMOKE_PINS if command == "train" else ())]


def real_model(command: DocCommand) -> bool:
    """Whether the example loads a registered pretrained model (a 0.5 GB conversion and minutes of CPU even at two
    steps: `make test-real-model` runs that model)."""
    if command.words[1] != "train":
        return False
    return is_pretrained_name(resolve_train_config(parse_overrides(list(command.words[2:]))).model.path)


def test_the_real_model_examples_are_told_apart_by_their_config():
    def example(*words: str) -> DocCommand:
        return DocCommand(Path("x"), 1, "cli", ("verl-mas", *words), " ".join(words))

    assert real_model(example("train", "preset=smollm2_math")) and real_model(example("train", "preset=smollm2"))
    assert real_model(example("train", "model.path=smollm2-135m-instruct", "steps=3"))
    assert not real_model(example("train", "preset=per_role", "steps=60"))
    assert not real_model(example("eval", "checkpoint=runs/a"))


def test_the_smoke_size_keeps_the_examples_own_keys_and_presets():
    assert at_smoke_size(("verl-mas", "train", "preset=per_role", "steps=60", "checkpoint_every=60")) == [
        "train", "preset=[smoke,per_role]", "steps=60", "checkpoint_every=60", *SMOKE_PINS,
    ]  # fmt: skip
    assert at_smoke_size(("verl-mas", "train", "preset=[per_role,no_tree]")) == [
        "train", "preset=[smoke,per_role,no_tree]", *SMOKE_PINS,
    ]  # fmt: skip
    evaluation = ("verl-mas", "eval", "checkpoint=runs/a", "samples=4")
    assert at_smoke_size(evaluation) == ["eval", "checkpoint=runs/a", "samples=4"]
    assert at_smoke_size(("verl-mas", "eval", "samples=2")) == ["eval", "preset=smoke", "samples=2"]


def test_the_readmes_train_and_eval_examples_run_in_order_at_the_smoke_size(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ran = []
    for command in train_and_eval_examples(REPO / "README.md"):
        if any(marker in command.words for marker in NOT_RUN) or real_model(command):
            continue
        argv = at_smoke_size(command.words)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as stderr:
            status = cli.main(argv)
        assert status == 0, f"{command.where}: `verl-mas {' '.join(argv)}` failed: {stderr.getvalue().strip()}"
        ran.append(command.words[1])
    assert ran.count("eval") >= 2 and ran.index("eval") > ran.index("train"), ran
