"""research.smollm2_math.verl_runs: verl's keys as the design sets them (composed and checked as verl_mas.main checks
them), verl's training problems in the local run's order, the per-problem reading equal to `LocalRun.evaluate`'s,
and the bookkeeping of launches resumed from a checkpoint (verl's runs on the real model are the study itself)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from verl.trainer.ppo.utils import create_rl_sampler

from research.smollm2_math import study, verl_runs
from verl_mas import main
from verl_mas.dataset import read_tasks
from verl_mas.env import Task, make_env
from verl_mas.local.train import LocalRun, make_tasks
from verl_mas.rollout import EpisodeResult

ROUTERS = {"shared": (64, 1), "per_role": (32, 2)}  # (samples of one policy's mini-batch, worker groups)


def design_config(tmp_path: Path, router: str):
    return verl_runs.local_config(verl_runs.local_overrides(0, router), tmp_path / "local")


def composed(overrides: list[str]):
    """The config `python -m verl_mas.main +platform=cpu` composes from `overrides` (not yet checked)."""
    with initialize_config_dir(config_dir=str(main.CONFIG_DIR), version_base=None):
        return compose("mas_trainer", overrides=["+platform=cpu", *overrides])


@pytest.mark.parametrize("router", ROUTERS)
def test_verls_keys_carry_the_designs_values(tmp_path, monkeypatch, router):
    config = design_config(tmp_path, router)
    assert verl_runs.local_overrides(0, router) == study.learning_overrides(0, verl_runs.TWINS[router])
    verl_runs.write_data(config, tmp_path)
    composed_config = composed(verl_runs.verl_overrides(config, tmp_path))
    # the model's name goes to the project's model-name support (its conversion, minutes in a fresh cache, left out)
    monkeypatch.setattr(main, "prepared_path", lambda name, log=None: f"/converted/{name}")
    mas = main.check_config(composed_config)  # everything verl_mas.main checks before Ray starts
    c = OmegaConf.to_container(composed_config, resolve=True)
    actor, rollout, trainer = c["actor_rollout_ref"]["actor"], c["actor_rollout_ref"]["rollout"], c["trainer"]
    model = c["actor_rollout_ref"]["model"]
    assert model["path"] == "/converted/smollm2-135m-instruct" and model["enable_gradient_checkpointing"] is True
    assert (mas.env, mas.env_options, mas.router) == ("math", config.env_options, router)
    assert mas.env_options["source_options"]["operators"] == ["+", "-"] and mas.env_options["worked_example"]
    assert (mas.rollout.k, mas.rollout.max_turns, mas.rollout.alpha, mas.grouping) == (4, 2, 1.0, "task_role_turn")
    assert (c["data"]["train_batch_size"], c["data"]["max_response_length"], c["data"]["shuffle"]) == (4, 32, False)
    assert (actor["optim"]["lr"], actor["optim"]["weight_decay"], actor["ppo_epochs"]) == (1e-5, 0.0, 1)
    assert set(actor["fsdp_config"]["mixed_precision"].values()) == {"fp32"}
    assert rollout["temperature"] == config.sampling.temperature == 1.0 and rollout["top_k"] == -1
    assert actor["use_kl_loss"] is False and c["algorithm"]["use_kl_in_reward"] is False
    assert actor["entropy_coeff"] == 0
    assert (actor["ppo_mini_batch_size"], trainer["n_gpus_per_node"]) == ROUTERS[router]
    assert actor["ppo_max_token_len_per_gpu"] >= c["data"]["max_prompt_length"] + 32
    assert (trainer["total_training_steps"], trainer["save_freq"], trainer["resume_mode"]) == (40, 10, "auto")
    assert trainer["default_local_dir"] == str(tmp_path / "verl" / "checkpoints")


def test_a_probes_steps_and_checkpoints_reach_verl_and_its_data(tmp_path):
    config = verl_runs.local_config(verl_runs.local_overrides(0, "shared", steps=2), tmp_path / "local")
    overrides = verl_runs.verl_overrides(config, tmp_path, save_every=1)
    assert {"trainer.total_training_steps=2", "trainer.save_freq=1", "trainer.test_freq=2"} <= set(overrides)
    files = verl_runs.write_data(config, tmp_path)
    assert len(read_tasks(files["train"])) == 2 * 4


def test_verls_training_problems_are_the_local_runs_in_its_order(tmp_path):
    config = design_config(tmp_path, "shared")
    files = verl_runs.write_data(config, tmp_path)
    # the local engine's own choice of a step's tasks (LocalRun.train_tasks reads only the run's config)
    steps = range(config.steps)
    local = [task for step in steps for task in LocalRun.train_tasks(SimpleNamespace(config=config), step)]
    written = read_tasks(files["train"])
    assert [(t.uid, t.seed, t.options) for t in written] == [(t.uid, t.seed, t.options) for t in local]
    assert len({t.seed for t in local}) == len(local) == 160
    env = make_env(config.env, **config.env_options)
    role = env.workflow().roles[0]
    # the problem each row poses, as the local run poses it
    for task, row in zip(local, pq.read_table(files["train"]).to_pylist(), strict=True):
        env.reset(task)
        assert row["prompt"] == env.observe(role)
    assert [t.uid for t in read_tasks(files["eval"])] == [t.uid for t in make_tasks(config, "eval", 0, 64)]
    # verl's loader: batches of train_batch_size from a sequential sampler, one batch a step, none left over
    data = composed(verl_runs.verl_overrides(config, tmp_path)).data
    assert list(create_rl_sampler(data, written)) == list(range(len(written)))
    assert data.get("gen_batch_size") is None and data.train_batch_size * config.steps == len(written)


def result(uid: str, success: bool) -> EpisodeResult:
    return EpisodeResult(task=Task(uid=uid, env="math", seed=0, split="eval", options={}), success=success)


def test_per_problem_results_follow_the_evaluation_splits_order_whatever_the_rollouts(tmp_path):
    config = dataclasses.replace(design_config(tmp_path, "shared"), eval_tasks=4)
    uids = [task.uid for task in make_tasks(config, "eval", 0, 4)]
    shuffled = [result(uids[2], True), result(uids[0], False), result(uids[3], True), result(uids[1], True)]
    assert verl_runs.per_problem(config, shuffled) == [0.0, 1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="3 results for 4 problems"):
        verl_runs.per_problem(config, shuffled[:3])
    with pytest.raises(ValueError, match="4 results for 4 problems"):
        verl_runs.per_problem(config, [*shuffled[:3], result(uids[2], True)])


# The study's task and evaluation on a tiny model, warm-started from scratch once (enough to solve a problem or two).
TINY = ["model.path=", "model.hidden=32", "model.layers=1", "model.vocab_size=300", "warm_start.tasks=128",
        "warm_start.epochs=8", "eval_tasks=16", "sampling.max_new_tokens=8"]  # fmt: skip


def test_the_readings_are_the_local_evaluations_before_and_after_the_weights(tmp_path):
    tune = verl_runs.local_config([*verl_runs.local_overrides(0, "shared"), *TINY], tmp_path / "tune")
    tuned = LocalRun(tune, log=lambda _: None)
    tuned.models["shared"].save_pretrained(tmp_path / "model")
    tuned.tokenizer.save_pretrained(str(tmp_path / "model"))
    loaded = [*verl_runs.local_overrides(0, "shared"), *TINY, f"model.path={tmp_path / 'model'}"]
    config = verl_runs.local_config(loaded, tmp_path / "run")  # as the study's: the saved model, not tuned again
    plain = LocalRun(config, log=lambda _: None)
    tasks = make_tasks(config, "eval", 0, config.eval_tasks)
    start = {name: tensor.clone() for name, tensor in plain.models["shared"].state_dict().items()}
    moved = {name: tensor + 0.05 * torch.randn_like(tensor) for name, tensor in start.items()}

    def expected() -> dict:  # what the local arms read (run.evaluate), and the greedy rollout as Evaluator runs it
        _, metrics = plain.evaluate()
        greedy = [float(r.success) for r in plain.rollout(tasks, plain.evaluator, 1, "tree")]
        low = verl_runs.sampled_success(plain, verl_runs.LOW_TEMPERATURE)["success"]
        assert sum(greedy) / len(greedy) == metrics["eval/success"]
        return {"greedy": metrics["eval/success"], "sampled": metrics["eval_sampled/success"], "sampled_t0.5": low,
                "greedy_per_problem": greedy}  # fmt: skip

    before = expected()
    assert 0 < sum(before["greedy_per_problem"]) < config.eval_tasks  # some solved, not all: the order shows
    plain.models["shared"].load_state_dict(moved)
    after = expected()
    found = verl_runs.before_and_after(config, {"shared": moved})
    assert found == {key: [before[key], after[key]] for key in before}
    with pytest.raises(ValueError, match=r"policies \['reasoner'\], the local run \['shared'\]"):
        verl_runs.before_and_after(config, {"reasoner": moved})


def rows(*steps: tuple[int, dict]) -> list[dict]:
    return [{"step": step, "data": data} for step, data in steps]


def test_a_resumed_launchs_rows_replace_the_steps_it_redid():
    first = rows((0, {"val": 0.2}), (1, {"timing_s/step": 10.0}), (2, {"timing_s/step": 11.0}), (3, {"x": 1}))
    second = rows((2, {"val": 0.3}), (3, {"timing_s/step": 9.0}), (4, {"timing_s/step": 8.0}))
    merged = verl_runs.merged_metrics([(0, first), (2, second)])
    assert merged == rows(
        (0, {"val": 0.2}),
        (1, {"timing_s/step": 10.0}),
        (2, {"timing_s/step": 11.0, "val": 0.3}),  # its step's training row and the resumed launch's validation
        (3, {"timing_s/step": 9.0}),  # the redone step, without the stopped launch's row
        (4, {"timing_s/step": 8.0}),
    )


def test_each_launchs_log_and_metrics_are_kept_and_read_together(tmp_path):
    folder = tmp_path / "verl"
    folder.mkdir()
    for number, (resumed, steps) in enumerate([(0, [1, 2]), (1, [2, 3])]):
        verl_runs.set_aside(folder)
        launches = verl_runs.read_jsonl(folder / verl_runs.LAUNCHES_FILE)
        entry = {"resumed_from": resumed, "returncode": None if number == 0 else 0, "wall_s": 5.0}
        verl_runs.write_launches(folder, [*launches, entry])
        (folder / "log.txt").write_text(f"launch {number}")
        lines = [{"step": s, "data": {"timing_s/step": float(10 * number + s)}} for s in steps]
        (folder / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert (folder / verl_runs.EARLIER / "0.log.txt").read_text() == "launch 0"
    assert (folder / "log.txt").read_text() == "launch 1"
    run = verl_runs.launched_run(folder)
    assert [(r["step"], r["data"]["timing_s/step"]) for r in run.metrics()] == [(1, 1.0), (2, 12.0), (3, 13.0)]
    assert (run.returncode, run.wall_s) == (0, 10.0)


def test_the_reward_curve_weights_each_turns_mean_by_its_samples():
    row = {"timing_s/step": 1.0, "mas/turn_1/reward/mean": 0.5, "mas/turn_1/samples": 32.0,
           "mas/turn_2/reward/mean": 2.0, "mas/turn_2/samples": 16.0, "mas/reasoner/reward/mean": 9.0}  # fmt: skip
    assert verl_runs.reward_curve(rows((0, {"val": 1.0}), (1, row))) == [pytest.approx(1.0)]


def test_the_rows_read_at_each_checkpoint_come_from_its_loaders_state(tmp_path):
    for policy, step, yielded in [("reasoner", 10, 40), ("tool", 10, 40), ("reasoner", 20, 80), ("tool", 20, 76)]:
        folder = tmp_path / policy / f"global_step_{step}"
        folder.mkdir(parents=True)
        torch.save({"_sampler_iter_state": {"samples_yielded": yielded}, "_num_yielded": step}, folder / "data.pt")
    assert verl_runs.rows_read(tmp_path) == {10: 40, 20: -1}  # the policies' loaders disagree at step 20


def test_a_recorded_arm_is_not_run_again(tmp_path, monkeypatch, capsys):
    (tmp_path / "runs.jsonl").write_text(json.dumps({"seed": 0, "arm": "verl_per_role"}) + "\n")
    monkeypatch.setattr(verl_runs, "run_arm", lambda args: pytest.fail("ran again"))
    verl_runs.main(["--router", "per_role", "--out", str(tmp_path)])
    assert "recorded already" in capsys.readouterr().out


def test_a_probe_never_writes_into_the_studys_folder(capsys):
    with pytest.raises(SystemExit):
        verl_runs.main(["--router", "shared", "--steps", "2"])
    assert "another --out than the study's" in capsys.readouterr().err
