"""The real pretrained model through both engines: a local-engine step and a launch of verl's real stack on CPU.

Marked `real_model`: left out of `make test` (minutes of CPU each) and run by `make test-real-model`, which CI runs
after `make test`.
"""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from safetensors.torch import load_file

from verl_mas.dataset import write_dataset
from verl_mas.local.presets import SMOLLM2_OVERRIDES, resolve_train_config
from verl_mas.local.reporting import read_metrics
from verl_mas.local.train import train
from verl_mas.overrides import parse_overrides
from verl_mas.pretrained import prepare
from verl_mas.verl_engine.cpu_run import run_on_cpu

pytestmark = pytest.mark.real_model

MODEL = "smollm2-135m-instruct"
ENV_OPTIONS = SMOLLM2_OVERRIDES["env_options"]


def test_the_local_engine_tunes_then_trains_a_team_of_the_real_model(tmp_path):
    config = resolve_train_config(
        parse_overrides(
            [
                "preset=smollm2",
                "warm_start.tasks=8",
                "steps=1",
                "tasks_per_step=2",
                "k=2",
                "eval_tasks=4",
                "checkpoint_every=1",
                f"output_dir={tmp_path}",
                "progress=false",
            ]
        )
    )
    lines: list[str] = []
    summary = train(config, log=lines.append)
    assert any(line.startswith("warm start shared:") for line in lines), lines  # the format tune ran
    assert summary.steps == 1
    (row,) = [row for row in read_metrics(tmp_path) if "update/shared/tokens" in row]
    assert row["update/shared/tokens"] > 0 and row["rollout/samples"] > 0
    assert "eval/success" in read_metrics(tmp_path)[-1]
    start = load_file(prepare(MODEL) / "model.safetensors")
    trained = torch.load(tmp_path / "checkpoints" / "step_00000001" / "model_shared.pt", weights_only=True)
    moved = max(float((trained[name] - start[name]).abs().max()) for name in start if name in trained)
    assert moved > 0  # the tune and the step changed the pretrained weights


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs the cpu extra (make test installs it)")
def test_verls_real_stack_trains_the_real_model_by_its_name(tmp_path):
    data = write_dataset("plan_path", tmp_path / "data", n_train=4, n_eval=2, seed=0, options=ENV_OPTIONS)
    run = run_on_cpu(
        tmp_path / "launch",
        [
            f"actor_rollout_ref.model.path={MODEL}",  # the name: the driver converts it and hands out the folder
            f"data.train_files={data['train']}",
            f"data.val_files={data['eval']}",
            *(f"+mas.env_options.{key}={str(value).lower()}" for key, value in ENV_OPTIONS.items()),
            "mas.rollout.k=2",
            "mas.rollout.max_turns=2",
            "data.train_batch_size=2",
            "data.max_prompt_length=512",
            "data.max_response_length=16",
            "actor_rollout_ref.rollout.max_model_len=640",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=8192",
            "actor_rollout_ref.actor.optim.lr=1e-5",
            "trainer.total_training_steps=1",
            "trainer.val_before_train=false",
            "trainer.test_freq=-1",
            "trainer.save_freq=-1",
        ],
        timeout_s=1500,
    )
    assert run.returncode == 0, f"the launch failed ({run.returncode}):\n{run.log()[-6000:]}"
    assert str(prepare(MODEL)) in run.log()  # the workers were handed the converted folder
    (step,) = [row["data"] for row in run.metrics() if "actor/grad_norm" in row["data"]]
    assert step["actor/grad_norm"] > 0 and torch.isfinite(torch.tensor(step["actor/grad_norm"]))
    assert "mas/plan/reward/mean" in step and "mas/tool/invalid_share" in step
    (audit,) = run.audit()
    assert {row["role"] for row in audit["rows"] if not row["padding"]} == {"tool", "plan"}
    print(json.dumps({key: step[key] for key in sorted(step) if key.startswith(("mas/", "timing_s/"))}, indent=1))
