"""research.grouping_signal.measure on a tiny saved model: one batch's samples and gradients per setting, the Gram
record the figures read back, and the update's own gradient."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from saved_run_testkit import TINY, saved_tiny_model

from research.grouping.grouping import ENV, PlanPathToolCost
from research.grouping_signal import figures, measure, settings
from verl_mas.env import register_env
from verl_mas.local.config import LocalTrainConfig
from verl_mas.local.train import LocalRun
from verl_mas.sample import Sample, samples_to_tensors


@pytest.fixture(scope="module")
def run_and_config(tmp_path_factory):
    register_env(ENV)(PlanPathToolCost)  # as main does (the same class: registering it again is allowed)
    folder = tmp_path_factory.mktemp("signal")
    saved_tiny_model(folder)
    config = measure.measurement_config(0, folder / "model", folder / "measurement")
    small = {"env_options": {**TINY["env_options"], "tool_cost": 0.0}, "tasks_per_step": 2, "k": 2}
    config = dataclasses.replace(config, **small, sampling=dataclasses.replace(config.sampling, max_new_tokens=8))
    return LocalRun(config, log=lambda line: None), config


def test_one_batch_gives_every_setting_a_gradient_and_the_cost_reaches_only_task_groups(run_and_config) -> None:
    run, config = run_and_config
    state = run.sampler.rng_state()
    batch = measure.measure_batch(run, config, 0)
    assert set(batch["gradients"]) == set(settings.SETTINGS)
    size = sum(p.numel() for p in run.trainers["shared"].parameters)
    assert all(g.shape == (size,) for g in batch["gradients"].values())
    assert batch["change"] <= measure.ADVANTAGE_TOLERANCE
    # the tool's cost is an offset between roles: task groups feel it, so their gradient moves with it
    assert not np.allclose(batch["gradients"]["task@0"], batch["gradients"]["task@2"])
    assert batch["offsets"]["task_role_turn"] == pytest.approx(0.0, abs=1e-9)
    assert batch["offsets"]["task@2"] > batch["offsets"]["task@0"]
    # the weights never moved: the batch again, from the same sampler state, gives the same gradients
    run.sampler.set_rng_state(state)
    again = measure.measure_batch(run, config, 0)
    for name, gradient in batch["gradients"].items():
        np.testing.assert_allclose(again["gradients"][name], gradient, rtol=1e-6, atol=1e-9)


def test_at_cost_charges_the_tool_moves_only_as_the_env_does() -> None:
    from research.grouping.grouping import PlanPathToolCost
    from verl_mas.dataset import split_tasks

    options = {**settings_env_options(), "tool_cost": 0.0}
    (free_task,) = split_tasks(ENV, "train", 1, 0, options)
    (paid_task,) = split_tasks(ENV, "train", 1, 0, {**options, "tool_cost": 1.5})
    free, paid = PlanPathToolCost(**options), PlanPathToolCost(**options)
    free.reset(free_task)
    paid.reset(paid_task)
    for role in ("tool", "plan"):
        move = free.expert(role)
        unpaid_step, paid_step = free.step(role, move), paid.step(role, move)
        unpaid = sample_of(role, unpaid_step)
        (charged,) = measure.at_cost([unpaid], 1.5)
        assert charged.local_reward == pytest.approx(paid_step.local_reward)
        assert charged.reward == pytest.approx(paid_step.team_reward + paid_step.local_reward)
        assert charged.team_reward == unpaid.team_reward and charged.response_ids == unpaid.response_ids


def settings_env_options() -> dict:
    return dict(LocalTrainConfig().env_options)


def sample_of(role: str, step) -> Sample:
    return Sample(
        task_uid="t", role=role, turn=0, branch=0, policy="shared", prompt_ids=(1,), response_ids=(2, 3),
        logprobs=None, team_reward=step.team_reward, local_reward=step.local_reward,
        reward=step.team_reward + step.local_reward, continued=True,
    )  # fmt: skip


def test_the_batch_gradient_is_the_trainers_on_the_batchs_tensors(run_and_config) -> None:
    run, config = run_and_config
    results = run.rollout(measure.make_tasks(config, "train", 0, 2), run.sampler, config.k, "tree")
    samples = [s for r in results for s in r.samples]
    advantages = torch.linspace(-1.0, 1.0, len(samples))  # a tiny model's rewards may all be equal: not these
    got = measure.batch_gradient(run, samples, advantages, {})
    tensors = samples_to_tensors(samples, pad_token_id=run.tokenizer.pad_token_id)
    want = run.trainers["shared"].gradient(tensors, advantages.unsqueeze(-1) * tensors.response_mask)
    np.testing.assert_allclose(got, want.double().numpy(), rtol=1e-5, atol=1e-8)
    assert np.abs(got).sum() > 0


def test_the_gram_record_reads_back_as_the_inner_products() -> None:
    rng = np.random.default_rng(0)
    gradients = {name: rng.standard_normal((4, 50)) for name in settings.SETTINGS}
    record = measure.gram_record(gradients)
    gram, cross = figures.matrices(record)
    scale = max(float(np.diag(g @ g.T).max()) for g in gradients.values())
    for name, g in gradients.items():
        np.testing.assert_allclose(gram[name], g @ g.T, atol=scale / measure.GRAM_UNITS)
    np.testing.assert_allclose(cross["task@2"], gradients["task@2"] @ gradients[settings.FINE].T, atol=scale * 1e-5)
    assert settings.FINE not in cross
    assert isinstance(record["gram"]["task@0"][0][0], int)


def test_settings_are_named_by_grouping_and_cost_only_where_the_cost_reaches() -> None:
    assert settings.setting_names("task", 0.5) == "task@0.5" and settings.setting_names("task", 2.0) == "task@2"
    assert settings.setting_names("task_role", 2.0) == "task_role"
    assert torch.__version__  # the measure module's imports load (torch, transformers) without a run


def synthetic_record(noise_of_task_at_2: float) -> dict:
    """Two warm starts of 8 batches: every setting's gradients are mu + noise, `task@2` with extra noise."""
    rng = np.random.default_rng(5)
    mu = np.zeros(400)
    mu[0] = 20.0
    seeds = {}
    for seed in ("0", "1"):
        shared = rng.standard_normal((8, 400))
        gradients = {name: mu + shared for name in settings.SETTINGS}
        gradients["task@2"] = mu + shared + noise_of_task_at_2 * rng.standard_normal((8, 400))
        seeds[seed] = {
            **measure.gram_record(gradients),
            "samples": [200] * 8,
            "parameters": 400,
            "offset_share": {name: [0.9 if name == "task@2" else 0.0] * 8 for name in settings.SETTINGS},
            "largest_cost_free_change": 0.0,
            "measurement_s": 60.0,
            "warm_start_s": 120.0,
            "warm_start_reused": False,
        }
    return {"batches": 8, "costs": list(settings.COSTS), "seeds": seeds, "machine": "m", "date": "d"}


def test_the_page_tables_show_every_setting_and_a_noisier_task_grouping_below_one() -> None:
    record = synthetic_record(3.0)
    table = figures.signal_table(record)
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in table.splitlines()[2:] if "|" in line}
    assert set(rows) == set(settings.SETTINGS.values())
    # identical gradients in every other setting: their ratio is 1, task@2's (SNR 1 against 1 / 10) far below
    assert rows["`task`, tool cost 0"][4].startswith("1.00")
    assert float(rows["`task`, tool cost 2"][4].split()[0]) < 0.5
    assert rows["`task`, tool cost 2"][5] == "0.10"  # 1 - offset share
    assert "seed 0" in figures.per_seed_table(record) and "16 batches" in figures.checks_text(record)
    assert "; `task`, tool cost 2 0." in figures.headline(record)
