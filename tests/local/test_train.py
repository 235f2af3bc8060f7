"""Smoke and behaviour tests of the local training loop on a very small Plan-Path setting."""

from __future__ import annotations

import dataclasses
import itertools
import json

import pytest
import torch

from verl_mas.cli import main
from verl_mas.local.train import (
    LocalTrainConfig,
    ModelSpec,
    WarmStartConfig,
    collect_expert_pairs,
    expert_tokenizer,
    make_tasks,
    render_prompt,
    resolve_device,
    sample_advantages,
    warm_start,
    warm_start_lr,
)
from verl_mas.sample import Sample

TINY = {
    "env_options": {"size": 4, "wall_ratio": 0.1, "tool_mode": "compact", "max_turns": 2},
    "k": 2,
    "tasks_per_step": 2,
    "steps": 1,
    "eval_tasks": 2,
    "eval_every": 1,
}


def test_train_command_writes_metrics_curve_and_config(tmp_path, capsys):
    args = [f"{k}={json.dumps(v)}" for k, v in TINY.items()]
    args += [
        "warm_start.tasks=4",
        "warm_start.epochs=1",
        "model.hidden=32",
        "model.vocab_size=300",
        "sampling.max_new_tokens=8",
        f"output_dir={tmp_path}",
    ]
    assert main(["train", *args]) == 0
    assert "held-out success" in capsys.readouterr().out
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [0, 1]
    assert "rollout/success" in lines[1] and "eval/success" in lines[1] and "update/shared/pg_loss" in lines[1]
    assert (tmp_path / "learning_curve.png").stat().st_size > 1000
    assert json.loads((tmp_path / "config.json").read_text())["k"] == 2


def test_train_and_eval_tasks_never_overlap():
    config = LocalTrainConfig()
    train_seeds = {t.seed for t in make_tasks(config, "train", 0, 500)}
    eval_seeds = {t.seed for t in make_tasks(config, "eval", 0, 100)}
    assert not train_seeds & eval_seeds
    assert {t.split for t in make_tasks(config, "eval", 0, 3)} == {"eval"}


def sample(uid, role, turn, reward):
    return Sample(uid, role, turn, 0, "p", (1,), (2,), None, reward, 0.0, reward, False)


def test_advantage_grouping_ablation():
    samples = [sample("t", "a", 0, 1.0), sample("t", "a", 0, 3.0), sample("t", "b", 0, 10.0), sample("t", "b", 0, 10.0)]
    by_key = sample_advantages(samples, "task_role_turn")
    by_task = sample_advantages(samples, "task")
    s = 1 / 2**0.5
    assert by_key.tolist() == pytest.approx([-s, s, 0.0, 0.0], abs=1e-5)
    assert by_task[2].item() > 0 and by_task[0].item() < by_task[1].item() < 0
    assert torch.isclose(by_task.sum(), torch.tensor(0.0), atol=1e-5)


def test_local_advantages_come_from_verls_estimator_registry(monkeypatch):
    from verl.trainer.ppo import core_algos

    served = core_algos.ADV_ESTIMATOR_REGISTRY["at_grpo"]
    calls = []

    def recording(**kwargs):
        calls.append(kwargs["grouping"])
        return served(**kwargs)

    monkeypatch.setitem(core_algos.ADV_ESTIMATOR_REGISTRY, "at_grpo", recording)
    samples = [sample("t", "a", 0, 1.0), sample("t", "a", 0, 3.0)]
    assert sample_advantages(samples, "task").tolist() == pytest.approx([-(0.5**0.5), 0.5**0.5], abs=1e-5)
    assert calls == ["task"]


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"grouping": "episode"}, "grouping must be"),
        ({"k": 0}, "k must be >= 1"),
        ({"device": "gpu0"}, "device must be 'cpu', 'cuda', 'cuda:N' or 'auto'"),
    ],
)
def test_bad_config_fails_at_start(overrides, message):
    with pytest.raises(ValueError, match=message):
        LocalTrainConfig(**overrides)


def test_device_names_resolve_and_cuda_without_a_gpu_is_refused(monkeypatch):
    assert resolve_device("cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(ValueError, match="torch sees no CUDA device"):
        resolve_device("cuda:1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("auto") == torch.device("cuda")
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(ValueError, match="sees 2 CUDA device"):
        resolve_device("cuda:2")


def test_sampling_and_update_temperatures_must_agree(capsys):
    from verl_mas.local.generator import SamplingConfig

    with pytest.raises(ValueError, match="must equal sampling.temperature"):
        LocalTrainConfig(sampling=SamplingConfig(temperature=0.7))
    assert ModelSpec().path == "" and WarmStartConfig().epochs >= 1


def test_warm_start_states_come_from_mixed_play_but_labels_are_the_experts():
    from verl_mas.router import PolicyRouter

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
    from verl_mas.local.model import build_tiny_model
    from verl_mas.router import PolicyRouter

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
    import asyncio

    from verl_mas.local.train import ExpertRecorder
    from verl_mas.rollout import GenerationRequest

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


def test_warm_start_with_only_plan_moves_corrupted_covers_later_turns_with_proposals_worth_copying():
    import re

    from verl_mas.router import PolicyRouter

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
    from verl_mas.local.presets import resolve_train_config
    from verl_mas.local.train import read_config
    from verl_mas.overrides import parse_overrides
    from verl_mas.router import PolicyRouter

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
    small = {**TINY["env_options"], "size": 4}
    large = {**TINY["env_options"], "size": 6}
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


def test_warm_start_corrupt_roles_must_be_role_names(tmp_path):
    from verl_mas.local.presets import resolve_train_config
    from verl_mas.local.train import LocalRun, read_config
    from verl_mas.overrides import parse_overrides

    config = resolve_train_config(parse_overrides(["warm_start.corrupt_roles=[plan]", f"output_dir={tmp_path}"]))
    assert config.warm_start.corrupt_roles == ("plan",)
    (tmp_path / "config.json").write_text(json.dumps(dataclasses.asdict(config)))
    assert read_config(tmp_path / "config.json").warm_start.corrupt_roles == ("plan",)
    with pytest.raises(ValueError, match="corrupt_roles must be a list of role names, got 'plan'"):
        resolve_train_config(parse_overrides(["warm_start.corrupt_roles=plan"]))
    bogus = resolve_train_config(parse_overrides(["warm_start.corrupt_roles=[critic]", f"output_dir={tmp_path}"]))
    with pytest.raises(
        ValueError, match=r"corrupt_roles names unknown role 'critic'; plan_path's roles: \['tool', 'plan'\]"
    ):
        LocalRun(bogus, log=lambda _: None)


def test_warm_start_play_skill_is_a_probability():
    with pytest.raises(ValueError, match="play_skill must be in"):
        WarmStartConfig(play_skill=1.5)


def test_warm_start_lr_follows_a_half_cosine_to_zero():
    config = WarmStartConfig(lr=2e-3, lr_schedule="cosine")
    # 0.5 * (1 + cos(pi * i / 8)) at i = 0, 2, 4, 6: 1, (2 + sqrt 2) / 4, 1/2, (2 - sqrt 2) / 4
    expected = [2e-3, 2e-3 * (2 + 2**0.5) / 4, 1e-3, 2e-3 * (2 - 2**0.5) / 4]
    assert [warm_start_lr(config, i, 8) for i in (0, 2, 4, 6)] == pytest.approx(expected)
    lrs = [warm_start_lr(config, i, 8) for i in range(8)]
    assert all(a > b > 0 for a, b in itertools.pairwise(lrs))
    constant = WarmStartConfig(lr=2e-3, lr_schedule="constant")
    assert {warm_start_lr(constant, i, 8) for i in range(8)} == {2e-3}


def test_warm_start_lr_schedule_must_be_known():
    with pytest.raises(ValueError, match="lr_schedule must be one of"):
        WarmStartConfig(lr_schedule="linear")


@pytest.mark.parametrize(
    "env, options", [("plan_path", {}), ("sokoban", {"size": 5, "boxes": 1}), ("sudoku", {"size": 4})]
)
def test_code_tool_preset_leaves_room_for_each_envs_whole_program(env, options):
    from verl_mas.local.presets import apply_train_overrides, resolve_train_config
    from verl_mas.local.train import expert_moves_cut
    from verl_mas.router import PolicyRouter

    config = resolve_train_config({"preset": "code_tool", "env": env, "env_options": options})
    assert config.env_options["tool_mode"] == "code" and config.warm_start.corrupt_roles == ("plan",)
    six_tasks = apply_train_overrides(config, {"warm_start": {"tasks": 6}})
    pairs = collect_expert_pairs(six_tasks, PolicyRouter.from_spec("shared", ("tool", "plan")))
    programs = [pair.move for pair in pairs if pair.move.startswith("```python")]
    # Every tool move is the program, one per turn played; a corrupted plan move adds a turn.
    assert len(programs) == len(pairs) // 2 >= 6 and all("print(" in program for program in programs)
    tokenizer = expert_tokenizer(pairs, config.model.vocab_size)
    cuts = {cut.key: cut for cut in expert_moves_cut(tokenizer, pairs, config.sampling)}
    assert set(cuts) == {"sampling.max_new_tokens", "sampling.role_max_new_tokens.plan"}
    assert all(cut.cut == 0 for cut in cuts.values())
    assert cuts["sampling.max_new_tokens"].longest > 300  # a whole program with its eos, not a short compact move
