"""research.smollm2_regime and research.smollm2_learning: their arms' configs, the low-temperature reading, and the
learning runs' callback, on the tiny model (the real model's runs are the studies themselves)."""

from __future__ import annotations

import json

import pytest

from research.smollm2_learning import learning
from research.smollm2_regime import regime
from verl_mas.dataset import split_tasks
from verl_mas.env import make_env
from verl_mas.local.config import resolved_warm_start, trains_warm_start
from verl_mas.local.presets import resolve_train_config
from verl_mas.local.train import LocalRun, train
from verl_mas.overrides import parse_overrides

TINY = ["preset=smoke", "eval_tasks=4", "progress=false"]


def test_the_regime_arms_are_the_designs(tmp_path):
    configs = {name: regime.arm_config(name, tmp_path) for name in regime.ARMS}
    assert {name: config.warm_start.epochs for name, config in configs.items()} == {
        "team_zero_shot": 0,
        "team_tune1": 1,
        "team_tune3": 3,
        "single_tune3": 3,
        "team_zero_shot_example": 0,
        "team_tune1_example": 1,
        "team_tune3_example": 3,
    }
    for name, config in configs.items():
        assert config.env_options.get("worked_example", False) == (name in regime.DESIGNS["second"])
        tune = resolved_warm_start(config)
        assert config.model.path == "smollm2-135m-instruct" and trains_warm_start(
            config
        )  # the pretrained model is tuned
        assert (tune.lr, tune.batch_size, tune.tasks) == (2e-5, 8, 128)
        assert (config.seed, config.eval_tasks, config.eval_samples, config.steps) == (0, 64, 1, 0)
        assert config.env_options.get("single_agent", False) == (name == "single_tune3")
        assert config.output_dir == str(tmp_path / name)


def test_sampling_at_a_temperature_near_zero_reads_what_greedy_reads(tmp_path):
    run = LocalRun(resolve_train_config(parse_overrides([*TINY, f"output_dir={tmp_path}"])), log=lambda _: None)
    greedy, _ = run.evaluate()
    near_greedy = regime.sampled_success(run, 1e-4)
    assert near_greedy["success"] == greedy
    low = regime.sampled_success(run, regime.LOW_TEMPERATURE)
    assert low == regime.sampled_success(run, regime.LOW_TEMPERATURE)  # its own seeded stream: the same reading
    assert 0.0 <= low["success"] <= 1.0 and 0.0 <= low["invalid_move_share"] <= 1.0


def test_a_recorded_regime_arm_is_not_run_again(tmp_path):
    (tmp_path / regime.RUNS_FILE).write_text(json.dumps({"arm": "team_tune1"}) + "\n")
    assert set(regime.recorded(tmp_path)) == {"team_tune1"}
    regime.main(["--arms", "team_tune1", "--out", str(tmp_path)])  # would tune the real model if it ran
    assert len((tmp_path / regime.RUNS_FILE).read_text().splitlines()) == 1


def test_the_learning_arms_share_a_start_and_differ_in_the_sampler_seed_only():
    assert learning.arm_overrides("at_grpo", 2) == []
    assert learning.arm_overrides("at_grpo_again", 2) == ["sampler_seed=1002"]
    assert learning.start_overrides("team_tune3") == ["preset=smollm2", "warm_start.epochs=3"]
    with pytest.raises(KeyError):
        learning.start_overrides("no_such_arm")


def test_the_low_temperature_reading_sits_beside_every_evaluation(tmp_path):
    folder = tmp_path / "run"
    config = resolve_train_config(parse_overrides([*TINY, "steps=1", "eval_samples=1", f"output_dir={folder}"]))
    summary = train(config, log=lambda _: None, callbacks=[learning.LowTemperatureEval(folder)])
    before = json.loads((folder / learning.LOW_BEFORE_FILE).read_text())
    assert set(before) == {"success", "invalid_move_share"}
    evaluated = [row for row in summary.history[1:] if "eval/success" in row]
    assert len(evaluated) == 1 and all("eval_low/success" in row for row in evaluated)
    assert "eval_low/success" not in summary.history[0]  # the start's reading is the file, written at step 0


def regime_record(arm: str, greedy: float) -> dict:
    return {"arm": arm, "overrides": regime.ARMS[arm], "eval_tasks": 64, "greedy": greedy, "sampled": greedy / 2,
            f"sampled_t{regime.LOW_TEMPERATURE}": greedy, "invalid_greedy": 0.25, "invalid_sampled": 0.5,
            "wall_s": 600.0}  # fmt: skip


def test_the_regime_rule_takes_the_cheapest_team_arm_inside_the_band(tmp_path, monkeypatch):
    from research.smollm2_regime import figures

    monkeypatch.setattr(figures, "DATA", tmp_path)

    def write(*recorded: dict) -> None:
        (tmp_path / figures.RUNS_FILE).write_text("".join(json.dumps(r) + "\n" for r in recorded))

    write(regime_record("team_tune3", 0.25), regime_record("team_zero_shot", 0.0))
    assert figures.choice_text("first") == "The first design's rule chooses `team_tune3` (greedy 0.250)."
    assert figures.choice_text("second").startswith("No arm of the second design run so far")  # its own arms only
    write(regime_record("team_tune1", 0.09), regime_record("single_tune3", 0.3))  # below the band; not a team arm
    assert figures.choice_text("first").startswith("No arm of the first design run so far meets its rule")
    assert "not run yet: `team_zero_shot`, `team_tune3`." in figures.choice_text("first")
    write(regime_record("team_tune3_example", 0.1), regime_record("team_tune1_example", 0.6))  # both band edges
    assert figures.choice_text("second") == "The second design's rule chooses `team_tune1_example` (greedy 0.600)."
    write(*(regime_record(arm, 0.7) for arm in regime.ARMS))  # all above it
    assert figures.choice_text("first").endswith("none is left to run.")
    assert figures.headline().startswith("`team_zero_shot`: greedy success 0.700, 0.250 of its moves invalid.")
    table = figures.arms_table("first")
    assert table.splitlines()[2].startswith(
        "| `team_zero_shot` | warm_start.epochs=0 | 0.700 (0.057) |"
    )  # sqrt(.21/64)
    # the second design also asks for more than copying the worked example reads (0.1875 on these boards)
    write(regime_record("team_zero_shot_example", 0.1875), regime_record("team_tune1_example", 0.19))
    assert figures.choice_text("second") == "The second design's rule chooses `team_tune1_example` (greedy 0.190)."
    assert figures.arms_table("first") == "No arm of this design has finished yet."
    assert "`team_tune1_example`" in figures.arms_table("second")


def test_the_copy_baseline_plays_the_worked_examples_reply_on_every_second_design_arms_boards():
    copied = regime.copy_baseline("team_zero_shot_example")
    assert all(regime.copy_baseline(arm) == copied for arm in regime.DESIGNS["second"])  # one yardstick for all
    # by hand, without the turn protocol: the plan commits the example's moves at most max_turns times from the start
    config = regime.arm_config("team_zero_shot_example", regime.DEFAULT_OUT)
    env = make_env(config.env, **config.env_options)
    tasks = split_tasks(config.env, "eval", config.eval_tasks, config.seed, config.env_options)
    solved = 0
    for task in tasks:
        env.reset(task)
        reply = env.observe("plan")[2]["content"]
        assert env.observe("tool")[2]["content"] == reply and reply.startswith("Actions: ")  # one copied move list
        position = env.state.position
        for _ in range(config.env_options["max_turns"]):
            simulation = env.simulate(position, reply.removeprefix("Actions: ").split())
            position = simulation.end
            if simulation.solved:
                solved += 1
                break
    assert copied["success"] == solved / len(tasks) and 0 < solved < len(tasks)


def test_the_speed_figures_are_medians_of_the_raw_repeats(tmp_path, monkeypatch):
    from research.smollm2_speed import figures

    step = {"samples": 64, "prompt_tokens_distinct": 1400, "response_tokens": 1000, "time/rollout_s": 8.0,
            "time/update_s": 12.0, "update_gflops": 150.0, "roofline_gflops": 300.0}  # fmt: skip
    steps = [step | {"time/step_s": seconds} for seconds in (30.0, 20.0, 100.0)]
    generation = {"rows": 32, "prompt_tokens_mean": 70.0, "new_tokens": 16,
                  "local_tokens_per_s": [90.0, 120.0, 100.0], "vllm_tokens_per_s": [50.0, 40.0, 60.0]}  # fmt: skip
    found = {"date": "2026-12-07", "torch_threads": 2, "step": {"steps": steps}, "generation": generation}
    (tmp_path / figures.RESULT_FILE).write_text(json.dumps(found))
    monkeypatch.setattr(figures, "DATA", tmp_path)
    assert figures.headline().startswith("one step 30.0 s (goal 90 s); local sampler 2.00x vLLM-CPU's tokens/s")
    assert "| AT-GRPO step, s | 30.0 (20.0-100.0) |" in figures.speed_table()
    assert "| update / roofline | 0.50 (0.50-0.50) |" in figures.speed_table()


def test_the_preset_timing_splits_the_training_command_into_its_parts(tmp_path, monkeypatch):
    from research.smollm2_speed import figures

    monkeypatch.setattr(figures, "DATA", tmp_path)
    blocks = figures.PRESET_FILES
    assert [figures.preset_table(name) for name in blocks.values()] == ["Not timed yet."] * 2
    found = {"date": "2026-12-07", "command": "python benchmarks/time_preset.py", "cpus": 2, "conversion_s": 30.0,
             "train_command": "verl-mas train preset=smollm2", "train_s": 1500.0, "load_and_tune_s": 600.0,
             "evaluations": 4, "evaluation_s": 300.0, "rl_steps": 30, "rl_s": 600.0, "step_s_median": 19.5,
             "greedy": [0.2, 0.25], "sampled": [0.2, 0.1]}  # fmt: skip
    (tmp_path / blocks["preset"]).write_text(json.dumps(found))
    table = figures.preset_table(blocks["preset"])
    assert figures.preset_table(blocks["preset_math"]) == "Not timed yet."  # each block reads its own preset's file
    assert "| `verl-mas train preset=smollm2` | 25.0 |" in table
    assert "| - 30 AT-GRPO steps (median 19.5 s) | 10.0 |" in table
    assert "| both commands | 25.5 |" in table  # (30 + 1500) s
    assert "greedy success 0.200 -> 0.250, sampled 0.200 -> 0.100" in table

    # make run's line reads the math preset's file: (0.2, 0.6) on 100 problems, se = sqrt(.16/100 + .24/100) = 0.0632
    (tmp_path / blocks[figures.MAKE_RUN_BLOCK]).write_text(
        json.dumps(found | {"greedy": [0.2, 0.6], "config": {"eval_tasks": 100, "seed": 3}})
    )
    assert figures.make_run_line() == (
        "**greedy 0.200 -> 0.600, sampled 0.200 -> 0.100** in 25 min 30 s, the conversion included (2026-12-07); "
        "greedy change +0.400 (SE 0.063) [+0.276, +0.524], n = 100 problems, seed 3 (one run; the two readings "
        "treated as independent, which overstates the noise)"
    )


def learning_record(seed: int, arm: str, greedy: tuple, sampled: tuple, low: tuple, curve: list[float]) -> dict:
    return {"seed": seed, "arm": arm, "eval_tasks": 64, "greedy": list(greedy), "sampled": list(sampled),
            f"sampled_t{regime.LOW_TEMPERATURE}": list(low), "reward_curve": curve,
            "zero_variance_curve": [0.5] * 10 + [1.0] * 30, "step_s_median": 20.0,
            "start_arm": "team_tune3"}  # fmt: skip


def test_the_learning_figures_from_hand_made_runs(tmp_path):
    from research.smollm2_learning import figures

    rising, flat = [0.0] * 10 + [0.5] * 20 + [1.0] * 10, [0.2] * 40
    recorded = [
        learning_record(0, "at_grpo", (0.2, 0.3), (0.2, 0.4), (0.25, 0.3), rising),
        learning_record(0, "at_grpo_again", (0.2, 0.2), (0.2, 0.3), (0.25, 0.3), flat),
        learning_record(1, "at_grpo", (0.1, 0.3), (0.1, 0.2), (0.15, 0.2), flat),
        learning_record(1, "at_grpo_again", (0.1, 0.1), (0.1, 0.1), (0.15, 0.1), rising),
    ]
    (tmp_path / learning.RUNS_FILE).write_text("".join(json.dumps(r) + "\n" for r in reversed(recorded)))
    found = figures.records(tmp_path)
    assert list(found) == [(0, "at_grpo"), (0, "at_grpo_again"), (1, "at_grpo"), (1, "at_grpo_again")]
    greedy = figures.gains(found, "at_grpo")["greedy"]
    assert greedy.per_seed == pytest.approx((0.1, 0.2)) and greedy.mean == pytest.approx(0.15)
    # twins' greedy after-readings differ by 0.1 and 0.2: sd 0.0707, one run's sd 0.05
    assert "greedy 0.050" in figures.noise_floor_text(found)
    # at_grpo's sampled after minus the start at 0.5: 0.4 - 0.25 and 0.2 - 0.15 -> mean +0.100; above in 2 of 2
    assert "+0.100" in figures.sharpening_text(found) and "in 2 of 2 seeds" in figures.sharpening_text(found)
    assert figures.validity_text(found).startswith("Validity check (the training reward rises in at least 2 of 3")
    assert "open; it rises in 1 of 2 finished `at_grpo` runs (seed 0)." in figures.validity_text(found)
    assert figures.headline(found).endswith("n = 2 seeds (interim: 2 of 3 seeds)")
    assert "interim: not a result" in figures.gains_table(found)
    # seed 0's at_grpo: reward 0.0 / 1.0 over the first and last 10 steps, zero-variance groups 0.5 / 1.0
    assert "| 0.000 / 1.000 | 0.500 / 1.000 | 20.0 |" in figures.runs_table(found).splitlines()[2]
    (tmp_path / learning.RUNS_FILE).write_text(json.dumps(recorded[0]) + "\n" + json.dumps(recorded[0]) + "\n")
    with pytest.raises(ValueError, match="seed 0, arm at_grpo: recorded twice"):
        figures.records(tmp_path)


def test_the_learning_figures_before_any_run(tmp_path):
    from research.smollm2_learning import figures

    assert figures.tables(tmp_path) == {
        "runs": "No run has finished yet.",
        "gains": "No run has finished yet.",
        "checks": "Validity check (the training reward rises in at least 2 of 3 seeds): open; it rises in 0 of 0 "
        "finished `at_grpo` runs.\n\nSharpening check: no `at_grpo` run yet.\n\nNoise floor: 0 seed(s) with both "
        "runs; it needs 2.",
        "headline": "Not run yet.",
    }
    # a run that started from an arm of the regime's second design is not this design's
    run = learning_record(0, "at_grpo", (0.2, 0.3), (0.2, 0.4), (0.25, 0.3), [0.1] * 40)
    (tmp_path / learning.RUNS_FILE).write_text(json.dumps(run | {"start_arm": "team_tune3_example"}) + "\n")
    with pytest.raises(ValueError, match="starts from 'team_tune3_example', not one of \\('team_zero_shot',"):
        figures.tables(tmp_path)
