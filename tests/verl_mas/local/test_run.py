"""The local run end to end: exact resume at every policy level, LoRA adapter routing, eval, metrics and TensorBoard."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from pathlib import Path

import pytest
import torch

from mas_testkit import say_digit_config
from verl_mas.cli import main
from verl_mas.env import MultiAgentEnv, Task
from verl_mas.local.config import LocalTrainConfig
from verl_mas.local.files import RunError
from verl_mas.local.tokenizer import render_prompt
from verl_mas.local.train import LocalRun, train
from verl_mas.local.warm_start import collect_expert_pairs
from verl_mas.overrides import apply_overrides
from verl_mas.rollout import GenerationRequest
from verl_mas.router import PolicyRouter
from verl_mas.sample import Sample, samples_to_tensors

LEVELS = {
    "L0_single_agent": {"env_options": {"single_agent": True}, "router": "shared"},
    "L1_shared": {"router": "shared"},
    "L2_lora_per_role": {"router": "per_role", "lora": {"rank": 4}},
    "L3_per_role": {"router": "per_role"},
}


# The GPU variants run where torch sees one (the lent GPU machine); CI has none and skips them.
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA"))]


def tiny_config(output_dir: Path, **overrides) -> LocalTrainConfig:
    """mas_testkit's tiny say_digit run, one turn per episode."""
    return say_digit_config(output_dir, {"env_options": {"max_turns": 1}}, **overrides)


def checkpoint_tensors(checkpoint: Path) -> dict[str, torch.Tensor]:
    tensors = {}
    for file in sorted(checkpoint.glob("model_*.pt")):
        for name, value in torch.load(file, weights_only=True).items():
            tensors[f"{file.stem}/{name}"] = value
    return tensors


def without_timings(row: dict[str, float]) -> dict[str, float]:
    return {key: value for key, value in row.items() if not key.startswith("time/")}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("level", list(LEVELS))
def test_resume_continues_exactly_at_every_policy_level(tmp_path, level, device):
    overrides = LEVELS[level] | {"device": device}
    straight = train(tiny_config(tmp_path / "straight", steps=4, checkpoint_every=2, **overrides), log=lambda _: None)
    stopped = tiny_config(tmp_path / "stopped", steps=2, checkpoint_every=2, **overrides)
    train(stopped, log=lambda _: None)
    with (tmp_path / "stopped" / "metrics.jsonl").open("a") as sink:  # a crash after writing step 3's row
        sink.write(json.dumps({"step": 3, "rollout/success": -1.0}) + "\n")
    resumed = train(apply_overrides(stopped, {"steps": 4, "resume": True}), log=lambda _: None)

    expected = checkpoint_tensors(tmp_path / "straight" / "checkpoints" / "step_00000004")
    got = checkpoint_tensors(tmp_path / "stopped" / "checkpoints" / "step_00000004")
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        assert torch.equal(got[name], value), name
    at_step_2 = checkpoint_tensors(tmp_path / "straight" / "checkpoints" / "step_00000002")
    assert any(not torch.equal(at_step_2[name], value) for name, value in expected.items())  # steps 3-4 moved them
    rows = [json.loads(line) for line in (tmp_path / "stopped" / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [0, 1, 2, 3, 4]
    assert [without_timings(row) for row in rows[3:]] == [without_timings(row) for row in straight.history[3:]]
    assert [without_timings(row) for row in resumed.history] == [without_timings(row) for row in rows]
    roles = ("solo",) if level.startswith("L0") else ("red", "blue")
    assert {key.split("/")[1] for key in rows[4] if key.startswith("update/")} == set(
        ("shared",) if overrides["router"] == "shared" else roles
    )
    assert all(f"rollout/{role}/turn0/reward" in rows[4] for role in roles)


@pytest.mark.parametrize("level", ["L1_shared", "L2_lora_per_role"])
def test_kl_loss_trains_and_resumes_against_the_runs_starting_model(tmp_path, level):
    overrides = LEVELS[level] | {"update": {"use_kl_loss": True, "kl_coef": 0.5}}
    straight = train(tiny_config(tmp_path / "straight", steps=4, checkpoint_every=2, **overrides), log=lambda _: None)
    stopped = tiny_config(tmp_path / "stopped", steps=2, checkpoint_every=2, **overrides)
    train(stopped, log=lambda _: None)
    resumed = train(apply_overrides(stopped, {"steps": 4, "resume": True}), log=lambda _: None)
    kl = [{k: v for k, v in row.items() if k.endswith("/kl_loss")} for row in straight.history[1:]]
    assert all(len(step) == len(kl[0]) > 0 for step in kl)
    assert all(value == pytest.approx(0.0, abs=1e-7) for value in kl[0].values())  # step 1 starts at the reference
    assert all(value > 0 for value in kl[-1].values())
    # Step 2 differs by the stopped run's final evaluation; a resume that rebuilt its reference from the resumed
    # weights would measure another KL from step 3 on.
    later = slice(3, None)
    assert [without_timings(row) for row in resumed.history[later]] == [
        without_timings(row) for row in straight.history[later]
    ]


def test_resuming_without_a_reference_model_into_the_kl_loss_names_the_key(tmp_path):
    train(tiny_config(tmp_path, steps=1, checkpoint_every=1), log=lambda _: None)
    with pytest.raises(ValueError, match="update.use_kl_loss: saved false, now true"):
        train(tiny_config(tmp_path, steps=2, resume=True, update={"use_kl_loss": True}), log=lambda _: None)


def greedy_replies(run: LocalRun, policies: tuple[str, ...]) -> dict[str, tuple[tuple[int, ...], tuple[float, ...]]]:
    """Each policy's greedy reply to the same prompt, with the log-probs the sampler recorded."""
    messages = ({"role": "user", "content": "red: say 7"},)
    requests = [GenerationRequest(f"t/{p}", p, p, messages, n=1) for p in policies]

    async def ask():
        return await asyncio.gather(*(run.evaluator(request) for request in requests))

    return {r.policy: (g[0].response_ids, g[0].logprobs) for r, g in zip(requests, asyncio.run(ask()), strict=True)}


def trainer_logprobs(run: LocalRun, policy: str, prompt: tuple[int, ...], response: tuple[int, ...]) -> torch.Tensor:
    sample = Sample("t", policy, 0, 0, policy, prompt, response, None, 0.0, 0.0, 0.0, True)
    tensors = samples_to_tensors([sample], pad_token_id=run.tokenizer.pad_token_id)
    return run.trainers[policy].compute_logprobs(tensors)[0, : len(response)]


@pytest.mark.parametrize("device", DEVICES)
def test_each_role_samples_with_the_lora_adapter_it_trains(tmp_path, device):
    run = LocalRun(tiny_config(tmp_path, router="per_role", lora={"rank": 4}, device=device), log=lambda _: None)
    assert {p.device.type for p in run.models["base"].parameters()} == {device}
    assert list(run.models) == ["base"] and set(run.trainers) == {"red", "blue"}
    before = greedy_replies(run, ("red", "blue"))
    assert before["red"] == before["blue"]  # peft starts every adapter as the identity
    calls = run.evaluator.stats.batched_calls

    prompt = tuple(render_prompt(run.tokenizer, ({"role": "user", "content": "red: say 7"},)))
    samples = [Sample("t", "red", 0, i, "red", prompt, (5 + i, 6), None, 0.0, 0.0, 0.0, True) for i in range(4)]
    tensors = samples_to_tensors(samples, pad_token_id=run.tokenizer.pad_token_id)
    advantages = torch.tensor([[1.0], [-1.0], [1.0], [-1.0]]) * tensors.response_mask
    run.trainers["red"].step(tensors, advantages)  # leaves adapter "red" active in the shared model

    after = greedy_replies(run, ("blue", "red"))
    assert run.evaluator.stats.batched_calls == calls + 2  # one batch per adapter, never mixed
    assert after["blue"] == before["blue"]  # blue's adapter is untouched, and blue is not sampled with red's
    assert after["red"][1] != before["red"][1]
    for policy in ("red", "blue"):
        response, sampled = after[policy]
        recomputed = trainer_logprobs(run, policy, prompt, response)
        assert torch.allclose(recomputed.cpu(), torch.tensor(sampled), atol=1e-5), policy
    response_blue, sampled_blue = after["blue"]
    assert not torch.allclose(
        trainer_logprobs(run, "red", prompt, response_blue).cpu(), torch.tensor(sampled_blue), atol=1e-3
    )


def test_eval_command_reproduces_the_training_evaluation_from_a_checkpoint(tmp_path, capsys):
    config = tiny_config(tmp_path / "run", steps=1, checkpoint_every=1, eval_tasks=3)
    trained = train(config, log=lambda _: None)
    checkpoint = tmp_path / "run" / "checkpoints" / "step_00000001"
    report_path = tmp_path / "greedy.json"
    assert main(["eval", f"checkpoint={tmp_path / 'run'}", f"json={report_path}"]) == 0
    greedy = json.loads(report_path.read_text())
    assert greedy["checkpoint"] == str(checkpoint) and greedy["step"] == 1
    assert greedy["success"] == {"say_digit": trained.history[-1]["eval/success"]}
    run = LocalRun(config, log=lambda _: None, checkpoint=checkpoint)
    run.load(checkpoint)
    in_training = run.evaluate()[1]
    assert greedy["metrics"] == {k: v for k, v in in_training.items() if k.startswith("eval/")}
    assert any(k.startswith("eval_sampled/") for k in in_training)  # tiny_config's default eval_samples

    assert main(["eval", f"checkpoint={checkpoint}", "preset=smoke"]) == 2
    assert "a checkpoint brings the config it was trained with" in capsys.readouterr().err
    assert main(["eval", f"checkpoint={checkpoint}", "samples=2", "temperature=1.5", "eval_tasks=2"]) == 0
    out = capsys.readouterr().out
    assert "2 tasks x 2 samples, temperature 1.5" in out and "role" in out and "group std" in out
    sampled = json.loads((checkpoint / "eval.json").read_text())
    assert (sampled["tasks"], sampled["samples"], sampled["temperature"]) == (2, 2, 1.5)
    assert [(row["role"], row["turn"]) for row in sampled["role_turns"]] == [("blue", 0), ("red", 0)]
    samples = sampled["metrics"]["eval/samples"]  # 2 tasks x 2 episodes of 1 turn: red, then blue unless red solved
    assert 4 <= samples <= 8 and samples == 4 + sampled["metrics"]["eval/blue/turn0/samples"]
    assert sampled["solved_by_any_sample"]["say_digit"] >= sampled["success"]["say_digit"]


def test_metrics_rows_progress_bar_and_tensorboard(tmp_path, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    config = tiny_config(tmp_path, steps=2, eval_every=1, progress=True, tensorboard=True)
    train(config, log=lambda _: None)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    step = rows[1]
    assert "rollout/success" in step and "eval/success" in step
    for key in ("reward", "response_length", "group_reward_std", "zero_variance_share", "invalid_move_share"):
        assert {f"rollout/{key}", f"rollout/red/{key}", f"rollout/blue/turn0/{key}"} <= step.keys()
    for key in ("rollout", "generation", "generator_overhead", "advantage", "tensors", "update", "step", "eval"):
        assert step[f"time/{key}_s"] >= 0.0
    assert step["time/generation_s"] <= step["time/rollout_s"] <= step["time/step_s"]
    progress = capsys.readouterr().err
    assert "train_success=" in progress and "eval_success=" in progress
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [e.step for e in events.Scalars("eval/success")] == [0, 1, 2]
    assert [e.value for e in events.Scalars("rollout/success")] == pytest.approx(
        [r["rollout/success"] for r in rows[1:]]
    )


def test_resume_from_a_missing_path_fails_and_resume_true_without_checkpoint_starts_afresh(tmp_path):
    with pytest.raises(ValueError, match="no checkpoint at"):
        train(tiny_config(tmp_path, resume=str(tmp_path / "nowhere")), log=lambda _: None)
    lines: list[str] = []
    summary = train(tiny_config(tmp_path, steps=1, resume=True), log=lines.append)
    assert any("starting afresh" in line for line in lines) and summary.history[0]["step"] == 0


def test_sampled_evaluation_neither_shifts_training_nor_depends_on_history(tmp_path):
    with_sampled = train(tiny_config(tmp_path / "a", steps=3, eval_every=1, eval_samples=3), log=lambda _: None)
    greedy_only = train(tiny_config(tmp_path / "b", steps=3, eval_every=1, eval_samples=0), log=lambda _: None)

    def training_keys(row):
        return {k: v for k, v in without_timings(row).items() if not k.startswith(("eval/", "eval_sampled/"))}

    assert [training_keys(r) for r in with_sampled.history] == [training_keys(r) for r in greedy_only.history]
    assert all("eval_sampled/success" not in row for row in greedy_only.history)
    first = with_sampled.history[0]
    assert first["eval_sampled/samples"] > 0 and 0.0 <= first["eval_sampled/success"] <= 1.0
    assert with_sampled.sampled_success_before == first["eval_sampled/success"]
    assert greedy_only.sampled_success_before is None

    run = LocalRun(tiny_config(tmp_path / "c", eval_samples=3), log=lambda _: None)
    once = run.evaluate()[1]
    run.sampler.set_rng_state(torch.Generator().manual_seed(123).get_state())  # unrelated stream moves
    again = run.evaluate()[1]
    assert {k: v for k, v in once.items() if k.startswith("eval_sampled/")} == {
        k: v for k, v in again.items() if k.startswith("eval_sampled/")
    }


def test_expert_moves_longer_than_max_new_tokens_are_reported_at_start(tmp_path):
    messages: list[str] = []
    LocalRun(tiny_config(tmp_path / "short", sampling={"max_new_tokens": 1}), log=messages.append)
    (warning,) = [m for m in messages if m.startswith("warning:")]
    # every say_digit expert move is one digit + eos = 2 tokens, so all of them are cut at 1
    assert re.search(r"warning: (\d+) of \1 expert moves", warning) and "sampling.max_new_tokens=2 " in warning
    messages.clear()
    LocalRun(tiny_config(tmp_path / "room", sampling={"max_new_tokens": 2}), log=messages.append)
    assert not [m for m in messages if m.startswith("warning:")]
    # A role's own limit is checked against that role's moves only, and the warning names its key.
    one_role = tiny_config(tmp_path / "red", sampling={"max_new_tokens": 2, "role_max_new_tokens": {"red": 1}})
    LocalRun(one_role, log=messages.append)
    (warning,) = [m for m in messages if m.startswith("warning:")]
    cut, moves = map(int, re.search(r"warning: (\d+) of (\d+) expert moves", warning).groups())
    assert cut == moves and "longer than sampling.role_max_new_tokens.red=1 " in warning
    pairs = collect_expert_pairs(one_role, PolicyRouter.from_spec("shared", ("red", "blue")))
    assert moves == sum(pair.role == "red" for pair in pairs) < len(pairs)
    unknown_role = tiny_config(tmp_path / "x", sampling={"role_max_new_tokens": {"green": 3}})
    with pytest.raises(ValueError, match=r"role_max_new_tokens names unknown role 'green'; say_digit's roles: "):
        LocalRun(unknown_role, log=lambda _: None)


@pytest.mark.parametrize("lora", [{"rank": 0}, {"rank": 4}])
def test_policy_lr_sets_one_policys_optimizer_and_the_others_keep_update_lr(tmp_path, lora):
    config = tiny_config(tmp_path, router="per_role", lora=lora, policy_lr={"blue": 2.5e-3})
    run = LocalRun(config, log=lambda _: None)
    lrs = {policy: trainer.optimizer.param_groups[0]["lr"] for policy, trainer in run.trainers.items()}
    assert lrs == {"red": 1e-2, "blue": 2.5e-3}
    # and the step really uses it: Adam's first step moves each trained weight by about lr
    before = {n: p.detach().clone() for n, p in run.trainers["blue"].model.named_parameters() if p.requires_grad}
    run.train_step(0)
    moved = [
        (p.detach() - before[n]).abs().max().item()
        for n, p in run.trainers["blue"].model.named_parameters()
        if p.requires_grad and "blue" in n or (not lora["rank"] and p.requires_grad)
    ]
    assert max(moved) == pytest.approx(2.5e-3, rel=0.05)


def test_policy_lr_refuses_unknown_policies_and_bad_rates(tmp_path):
    with pytest.raises(ValueError, match="policy_lr names unknown policy 'green'; this router's policies: "):
        LocalRun(tiny_config(tmp_path, router="per_role", policy_lr={"green": 1e-3}), log=lambda _: None)
    with pytest.raises(ValueError, match="policy_lr names unknown policy 'red'"):
        LocalRun(tiny_config(tmp_path, router="shared", policy_lr={"red": 1e-3}), log=lambda _: None)
    for bad in (0.0, -1e-3, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="policy_lr.red must be a finite number > 0"):
            tiny_config(tmp_path, router="per_role", policy_lr={"red": bad})


def failing_env_factory(task: Task) -> MultiAgentEnv:
    raise RuntimeError(f"cannot build a board for {task.uid}")


def test_a_step_whose_every_task_failed_is_an_error_not_a_silent_step(tmp_path):
    run = LocalRun(tiny_config(tmp_path), log=lambda _: None)
    run.train_step(0)  # the real env plays
    run.env_factory = failing_env_factory
    with pytest.raises(RunError, match=r"^every one of the 2 tasks failed in the environment.*cannot build a board"):
        run.train_step(1)


def test_a_run_whose_every_task_fails_exits_with_an_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("verl_mas.local.train.default_env_factory", failing_env_factory)
    args = [f"{key}={json.dumps(value)}" for key, value in dataclasses.asdict(tiny_config(tmp_path)).items()]
    assert main(["train", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("verl-mas train: error: every one of the 2 tasks failed") and len(err.splitlines()) == 1
    assert not (tmp_path / "metrics.jsonl").exists()


def test_an_environment_named_by_its_import_path_trains_from_the_same_start_as_by_its_name(tmp_path):
    # `env=module:Class` reaches an environment no registry or entry point names. The same class gives the same warm
    # start and held-out boards; the training samples differ, as the sampler is seeded by task ids that carry the name
    by_name = train(tiny_config(tmp_path / "name", steps=2), log=lambda _: None)
    path = "mas_testkit:SayDigitEnv"
    # a new env takes its options afresh (they are the env's): tiny_config's, given again
    by_path = train(tiny_config(tmp_path / "path", steps=2, env=path, env_options={"max_turns": 1}), log=lambda _: None)
    start = [without_timings(row) for row in by_path.history if row["step"] == 0]
    assert start == [without_timings(row) for row in by_name.history if row["step"] == 0]
    assert [row["step"] for row in by_path.history] == [row["step"] for row in by_name.history]
    assert all("update/shared/grad_norm" in row for row in by_path.history if row["step"] > 0)


def test_every_phase_before_rl_says_it_has_started(tmp_path):
    """A user sees each slow phase begin (expert moves, tokenizer, each warm-start epoch, the first evaluation) before
    any step: the lines come in that order, one per warm-start epoch."""
    lines: list[str] = []
    config = tiny_config(tmp_path, steps=1)
    train(config, log=lines.append)
    epochs = config.warm_start.epochs
    expected = [
        f"collecting expert moves on {config.warm_start.tasks} warm-start tasks",
        "training a ",
        "warm start shared: ",
        *(f"warm start shared: epoch {epoch}/{epochs}: mean loss" for epoch in range(1, epochs + 1)),
        f"evaluating before RL on {config.eval_tasks} tasks",
    ]
    found, position = [], 0
    for prefix in expected:
        position = next(i for i in range(position, len(lines)) if lines[i].startswith(prefix))
        found.append(position)
        position += 1
    assert found == sorted(found) and len(set(found)) == len(found)
