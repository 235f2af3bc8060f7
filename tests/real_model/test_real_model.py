"""The real pretrained model through both engines: `make run`'s command cut to one step; a format tune by the model's
name, then one AT-GRPO step of the local engine and one launch of verl's real stack on CPU, both from the tuned
weights.

Marked `real_model`: left out of `make test` (minutes of CPU each) and run by `make test-real-model`, which CI runs
after `make test`. Zero-shot every reply is invalid, every group's rewards are equal and no gradient flows, so both
engines start from a short tune that makes some moves readable.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from make_run import make_run_arguments
from safetensors.torch import load_file

from verl_mas.cpu_run import run_on_cpu
from verl_mas.dataset import write_dataset
from verl_mas.local.export import export_policies
from verl_mas.local.presets import SMOLLM2_OVERRIDES, resolve_train_config
from verl_mas.local.reporting import read_metrics
from verl_mas.local.train import train
from verl_mas.overrides import parse_overrides

pytestmark = pytest.mark.real_model

ENV_OPTIONS = SMOLLM2_OVERRIDES["env_options"]
# A quick tune at a high rate (the preset's 2e-5 takes longer to make moves readable): enough for varied rewards.
TUNE = [
    "preset=smollm2",
    "warm_start.tasks=32",
    "warm_start.epochs=1",
    "warm_start.lr=1e-4",
    "steps=0",
    "progress=false",
]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """The model tuned from its name (the registry package's file, converted), saved in Hugging Face form as
    `verl-mas export` saves it."""
    folder = tmp_path_factory.mktemp("tuned")
    lines: list[str] = []
    config = resolve_train_config(parse_overrides([*TUNE, f"output_dir={folder / 'run'}"]))
    assert export_policies(config, folder / "model", log=lines.append) == {"shared": folder / "model"}
    assert any(line.startswith("warm start shared:") for line in lines), lines
    return folder / "model"


def test_the_local_engine_trains_a_team_of_the_real_model(tuned, tmp_path):
    overrides = ["preset=smollm2", f"model.path={tuned}", "warm_start.tune_loaded=false", "steps=1", "eval_tasks=4"]
    config = resolve_train_config(parse_overrides([*overrides, "checkpoint_every=1", f"output_dir={tmp_path}"]))
    summary = train(config, log=lambda _: None)
    assert summary.steps == 1
    (row,) = [row for row in read_metrics(tmp_path) if "update/shared/tokens" in row]
    assert row["update/shared/tokens"] > 0 and row["update/shared/grad_norm"] > 0, row
    start = load_file(tuned / "model.safetensors")
    trained = torch.load(tmp_path / "checkpoints" / "step_00000001" / "model_shared.pt", weights_only=True)
    assert max(float((trained[name] - start[name]).abs().max()) for name in start if name in trained) > 0
    assert start.keys() <= trained.keys()


def test_make_runs_command_trains_the_real_model_from_its_name(tmp_path):
    """`make run`'s own command (read from the Makefile), cut to one step of a smaller evaluation, through the CLI:
    the untuned model, converted from its name in this process's cache, gets a gradient at its first step."""
    command = [str(Path(sys.executable).parent / "verl-mas"), *make_run_arguments()]
    done = subprocess.run(
        [*command, "steps=1", "eval_tasks=8", "progress=false", f"output_dir={tmp_path}"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "held-out success (greedy):" in done.stdout and "after 1 steps" in done.stdout, done.stdout[-2000:]
    (row,) = [row for row in read_metrics(tmp_path) if "update/shared/tokens" in row]
    assert row["update/shared/tokens"] > 0 and row["update/shared/grad_norm"] > 0, row
    assert json.loads((tmp_path / "config.json").read_text())["model"]["path"] == "smollm2-135m-instruct"


def test_verls_real_stack_trains_the_real_model(tuned, tmp_path):
    data = write_dataset("plan_path", tmp_path / "data", n_train=4, n_eval=2, seed=0, options=ENV_OPTIONS)
    run = run_on_cpu(
        tmp_path / "launch",
        [
            f"actor_rollout_ref.model.path={tuned}",
            f"data.train_files={data['train']}",
            f"data.val_files={data['eval']}",
            *(f"+mas.env_options.{key}={str(value).lower()}" for key, value in ENV_OPTIONS.items()),
            "mas.rollout.k=4",
            "mas.rollout.max_turns=2",
            "data.train_batch_size=4",
            "data.max_prompt_length=512",
            "data.max_response_length=16",
            "actor_rollout_ref.rollout.max_model_len=640",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=8192",
            "actor_rollout_ref.actor.optim.lr=1e-5",
            "trainer.total_training_steps=1",
            "trainer.val_before_train=false",
            "trainer.test_freq=-1",
            "trainer.save_freq=-1",
        ],
        timeout_s=1500,
        audit=True,
    )
    assert run.returncode == 0, f"the launch failed ({run.returncode}):\n{run.log()[-6000:]}"
    (step,) = [row["data"] for row in run.metrics() if "actor/grad_norm" in row["data"]]
    assert step["actor/grad_norm"] > 0, {k: v for k, v in step.items() if k.startswith(("mas/", "group_health/"))}
    assert "mas/plan/reward/mean" in step and "mas/tool/invalid_share" in step
    (audit,) = run.audit()
    assert {row["role"] for row in audit["rows"] if not row["padding"]} == {"tool", "plan"}
