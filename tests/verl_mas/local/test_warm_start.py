"""The warm start: expert pairs from mixed play, its boards, its loss and lr schedule, and the moves a limit cuts."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import re

import pytest
import torch

from verl_mas.local.config import LocalTrainConfig, WarmStartConfig, read_config
from verl_mas.local.model import build_tiny_model
from verl_mas.local.presets import apply_train_overrides, resolve_train_config
from verl_mas.local.tokenizer import render_prompt
from verl_mas.local.train import make_tasks
from verl_mas.local.warm_start import (
    ExpertRecorder,
    collect_expert_pairs,
    expert_move_lengths,
    expert_moves_cut,
    expert_tokenizer,
    warm_start,
    warm_start_lr,
)
from verl_mas.overrides import parse_overrides
from verl_mas.rollout import GenerationRequest
from verl_mas.router import PolicyRouter

SMALL_BOARDS = {"size": 4, "wall_ratio": 0.1, "tool_mode": "compact", "max_turns": 2}


def test_warm_start_states_come_from_mixed_play_but_labels_are_the_experts():
    options = {"size": 5, "wall_ratio": 0.2, "tool_mode": "compact", "max_turns": 3}
    router = PolicyRouter.from_spec("shared", ("tool", "plan"))
    expert_only = collect_expert_pairs(
        LocalTrainConfig(env_options=options, warm_start=WarmStartConfig(tasks=3, play_skill=1.0)), router
    )
    # The expert solves a board in one turn: one tool and one plan move per task, all on turn 1.
    assert len(expert_only) == 6 and all("Turn 1 of 3" in p.messages[-1]["content"] for p in expert_only)
    never_expert = collect_expert_pairs(
        LocalTrainConfig(env_options=options, warm_start=WarmStartConfig(tasks=3, play_skill=0.0)), router
    )
    # Corrupted play never solves, so every episode runs all 3 turns and the data covers turns 2 and 3.
    assert len(never_expert) == 3 * 3 * 2
    turns = {p.messages[-1]["content"].split(".")[0] for p in never_expert}
    assert turns == {"Turn 1 of 3", "Turn 2 of 3", "Turn 3 of 3"}
    assert all(p.move.startswith("Actions: ") and len(p.move.split()) > 1 for p in never_expert)


def test_warm_start_loss_is_the_mean_cross_entropy_of_the_expert_tokens():
    options = {"size": 5, "wall_ratio": 0.2, "tool_mode": "compact", "max_turns": 3}
    router = PolicyRouter.from_spec("shared", ("tool", "plan"))
    pairs = collect_expert_pairs(LocalTrainConfig(env_options=options, warm_start=WarmStartConfig(tasks=3)), router)
    tokenizer = expert_tokenizer(pairs, 300)
    model = build_tiny_model(len(tokenizer), hidden=32, layers=1, heads=4, seed=3)
    examples = [(pair.messages, pair.move) for pair in pairs]
    # The reference: transformers' own label loss on right-padded prompt + response rows, prompts masked out.
    rows = [render_prompt(tokenizer, m) + tokenizer.encode(mv, add_special_tokens=False) for m, mv in examples]
    rows = [(row, len(render_prompt(tokenizer, m))) for row, (m, _) in zip(rows, examples, strict=True)]
    width = max(len(row) + 1 for row, _ in rows)
    input_ids = torch.zeros((len(rows), width), dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    labels = torch.full_like(input_ids, -100)
    for i, (row, prompt_length) in enumerate(rows):
        sequence = torch.tensor([*row, tokenizer.eos_token_id])
        input_ids[i, : len(sequence)] = sequence
        attention_mask[i, : len(sequence)] = 1
        labels[i, prompt_length : len(sequence)] = sequence[prompt_length:]
    with torch.no_grad():
        expected = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
    # lr 0 and one batch holding every example: the returned loss is the untouched model's loss.
    config = WarmStartConfig(epochs=1, lr=0.0, lr_schedule="constant", batch_size=len(examples))
    assert warm_start(model, tokenizer, examples, config, seed=0) == pytest.approx(expected.item(), rel=1e-5)


def test_warm_start_corrupts_only_the_named_roles_and_keeps_their_corruptions():
    def request(role: str) -> GenerationRequest:
        messages = ({"role": "user", "content": "board"},)
        return GenerationRequest(f"task/{role}", "shared", role, messages, n=1, turn=0, expert="Actions: U R R")

    def played(recorder: ExpertRecorder) -> dict[str, str]:
        return {role: asyncio.run(recorder(request(role)))[0].text for role in ("tool", "plan")}

    every_role = played(ExpertRecorder(play_skill=0.0, seed=3))
    plan_only = played(ExpertRecorder(play_skill=0.0, seed=3, corrupt_roles=("plan",)))
    assert every_role["tool"] != "Actions: U R R" and every_role["plan"] != "Actions: U R R"
    # The exempt tool plays the expert; the plan's corruption is the very one it gets when every role is corrupted.
    assert plan_only == {"tool": "Actions: U R R", "plan": every_role["plan"]}
    no_role = played(ExpertRecorder(play_skill=0.0, seed=3, corrupt_roles=()))
    assert no_role == {"tool": "Actions: U R R", "plan": "Actions: U R R"}


def test_warm_start_plays_the_envs_near_misses_in_place_of_garbled_moves_at_the_set_share():
    misses = ("Actions: D D", "Actions: L L L")  # never a garbled copy of the expert's "Actions: U R R"

    def played(recorder: ExpertRecorder, near_misses: tuple[str, ...], task: int = 0) -> str:
        messages = ({"role": "user", "content": "board"},)
        request = GenerationRequest(
            f"task{task}/plan", "shared", "plan", messages, n=1, expert="Actions: U R R", near_misses=near_misses
        )
        return asyncio.run(recorder(request))[0].text

    garbled = played(ExpertRecorder(play_skill=0.0, seed=3), ())
    assert garbled not in (*misses, "Actions: U R R")
    # Off (the default), or none offered: the very garbled move a warm start played before near misses existed.
    assert played(ExpertRecorder(play_skill=0.0, seed=3), misses) == garbled
    assert played(ExpertRecorder(play_skill=0.0, seed=3, near_misses=1.0), ()) == garbled
    always = {played(ExpertRecorder(play_skill=0.0, seed=3, near_misses=1.0), misses, task) for task in range(40)}
    assert always == set(misses)
    half = [played(ExpertRecorder(play_skill=0.0, seed=3, near_misses=0.5), misses, task) for task in range(400)]
    assert 0.4 < sum(move in misses for move in half) / len(half) < 0.6
    # The expert's share of moves is untouched: near misses replace garbled moves only.
    skilled = [played(ExpertRecorder(play_skill=0.5, seed=3, near_misses=1.0), misses, task) for task in range(400)]
    plain = [played(ExpertRecorder(play_skill=0.5, seed=3), misses, task) for task in range(400)]
    assert [move == "Actions: U R R" for move in skilled] == [move == "Actions: U R R" for move in plain]


def test_code_warm_start_with_near_misses_holds_second_turns_that_show_a_failing_program():
    options = {"brief_prompts": True, "brief_examples": True, "wrong_programs": 0, "max_turns": 2}

    def coder_prompts(near_misses: float) -> list[str]:
        warm = WarmStartConfig(tasks=4, play_skill=0.0, corrupt_roles=("coder",), near_misses=near_misses)
        pairs = collect_expert_pairs(LocalTrainConfig(env="code", env_options=options, warm_start=warm), router)
        return [pair.messages[-1]["content"] for pair in pairs if pair.role == "coder"]

    router = PolicyRouter.from_spec("shared", ("coder", "tester"))
    # A garbled program never compiles: the second turn's prompt shows no program. A near miss compiles, fails the
    # tester's (expert) examples, and the second turn shows it with what it printed: the state a model's mistake
    # leads to, labelled with the right program.
    garbled, near = coder_prompts(0.0), coder_prompts(1.0)
    assert len(garbled) == len(near) == 8
    assert not any("prog:" in prompt for prompt in garbled)
    assert sum("prog:" in prompt and "want:" in prompt for prompt in near) == 4


def test_warm_start_with_only_plan_moves_corrupted_covers_later_turns_with_proposals_worth_copying():
    options = {"size": 5, "wall_ratio": 0.2, "tool_mode": "code", "max_turns": 3, "brief_prompts": True}
    config = LocalTrainConfig(
        env_options=options, warm_start=WarmStartConfig(tasks=3, play_skill=0.0, corrupt_roles=("plan",))
    )
    pairs = collect_expert_pairs(config, PolicyRouter.from_spec("shared", ("tool", "plan")))
    # The plan never plays right, so every episode runs all 3 turns; the tool's program runs at every turn.
    assert len(pairs) == 3 * 3 * 2
    plan_prompts = [(pair.messages[-1]["content"], pair.move) for pair in pairs if pair.role == "plan"]
    assert all(pair.move.startswith("```python") for pair in pairs if pair.role == "tool")
    assert {prompt.split(".")[0] for prompt, _ in plan_prompts} == {"Turn 1 of 3", "Turn 2 of 3", "Turn 3 of 3"}
    for prompt, move in plan_prompts:
        # The expert program's proposal is the plan's label: copying it is always right.
        proposed = re.search(r"The tool agent proposed: ([UDLR ]+) ->", prompt)
        assert proposed is not None and f"Actions: {proposed.group(1)}" == move


def test_warm_start_env_options_choose_the_warm_start_boards_only(tmp_path):
    def board_sizes(pairs) -> set[tuple[int, int]]:
        """(rows, columns) of the board drawn in each prompt, between its "Board" line and the legend."""
        sizes = set()
        for pair in pairs:
            lines = pair.messages[-1]["content"].splitlines()
            board = lines[lines.index(next(x for x in lines if x.startswith("Board"))) + 1 :]
            board = board[: next(i for i, x in enumerate(board) if x.startswith("Legend"))]
            sizes.add((len(board), len(board[0])))
        return sizes

    router = PolicyRouter.from_spec("shared", ("tool", "plan"))
    small = {**SMALL_BOARDS, "size": 4}
    large = {**SMALL_BOARDS, "size": 6}
    on_small = LocalTrainConfig(env_options=small, warm_start=WarmStartConfig(tasks=4))
    mixed = LocalTrainConfig(env_options=large, warm_start=WarmStartConfig(tasks=4, env_options={"size": 4}))
    # The warm start plays exactly the boards of a run on the small size ...
    pairs = collect_expert_pairs(mixed, router)
    assert pairs == collect_expert_pairs(on_small, router) and board_sizes(pairs) == {(4, 4)}
    without = dataclasses.replace(mixed, warm_start=WarmStartConfig(tasks=4))
    assert board_sizes(collect_expert_pairs(without, router)) == {(6, 6)}
    # ... while training and evaluation keep the large one.
    for split in ("train", "eval"):
        assert make_tasks(mixed, split, 0, 3) == make_tasks(without, split, 0, 3)
        assert {task.options["size"] for task in make_tasks(mixed, split, 0, 3)} == {6}
    config = resolve_train_config(parse_overrides(["warm_start.env_options.size=4", f"output_dir={tmp_path}"]))
    (tmp_path / "config.json").write_text(json.dumps(dataclasses.asdict(config)))
    assert read_config(tmp_path / "config.json").warm_start.env_options == {"size": 4}


def test_warm_start_lr_follows_a_half_cosine_to_zero():
    config = WarmStartConfig(lr=2e-3, lr_schedule="cosine")
    # 0.5 * (1 + cos(pi * i / 8)) at i = 0, 2, 4, 6: 1, (2 + sqrt 2) / 4, 1/2, (2 - sqrt 2) / 4
    expected = [2e-3, 2e-3 * (2 + 2**0.5) / 4, 1e-3, 2e-3 * (2 - 2**0.5) / 4]
    assert [warm_start_lr(config, i, 8) for i in (0, 2, 4, 6)] == pytest.approx(expected)
    lrs = [warm_start_lr(config, i, 8) for i in range(8)]
    assert all(a > b > 0 for a, b in itertools.pairwise(lrs))
    constant = WarmStartConfig(lr=2e-3, lr_schedule="constant")
    assert {warm_start_lr(constant, i, 8) for i in range(8)} == {2e-3}


@pytest.mark.parametrize(
    "env, options", [("plan_path", {}), ("sokoban", {"size": 5, "boxes": 1}), ("sudoku", {"size": 4})]
)
def test_code_tool_preset_leaves_room_for_each_envs_whole_program(env, options):
    config = resolve_train_config({"preset": "code_tool", "env": env, "env_options": options})
    assert config.env_options["tool_mode"] == "code" and config.warm_start.corrupt_roles == ("plan",)
    six_tasks = apply_train_overrides(config, {"warm_start": {"tasks": 6}})
    pairs = collect_expert_pairs(six_tasks, PolicyRouter.from_spec("shared", ("tool", "plan")))
    programs = [pair.move for pair in pairs if pair.move.startswith("```python")]
    # Every tool move is the program, one per turn played; a corrupted plan move adds a turn.
    assert len(programs) == len(pairs) // 2 >= 6 and all("print(" in program for program in programs)
    tokenizer = expert_tokenizer(pairs, config.model.vocab_size)
    cuts = {cut.key: cut for cut in expert_moves_cut(expert_move_lengths(tokenizer, pairs), config.sampling)}
    assert set(cuts) == {"sampling.max_new_tokens", "sampling.role_max_new_tokens.plan"}
    assert all(cut.cut == 0 for cut in cuts.values())
    assert cuts["sampling.max_new_tokens"].longest > 300  # a whole program with its eos, not a short compact move
