"""research.learning and its harness: --collect reports the table from saved runs, finished or stopped early,
training nothing; saved runs, configs, warm-start keys and methods."""

import dataclasses
import json
from pathlib import Path

import pytest

from research import harness
from research.learning import learning
from verl_mas.local.config import CONFIG_FILE, config_json, read_config


def save_run(out: Path, seed: int, method: str, rows: list[dict], config_changes: dict | None = None) -> None:
    config = dataclasses.replace(harness.env_config("plan_path", ["default"], {}, 4), seed=seed)
    folder = out / "plan_path" / f"seed{seed}"
    agents = "team" if harness.METHODS[method].team else "single"
    config = harness.method_config(config, method, str(folder / f"warm_start_{agents}"), folder / method)
    saved = dataclasses.replace(config, **(config_changes or {}))
    run = Path(config.output_dir)
    run.mkdir(parents=True)
    (run / CONFIG_FILE).write_text(config_json(saved))
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_collect_reports_finished_and_stopped_runs_and_refuses_other_configs(tmp_path):
    out = tmp_path / "table"
    save_run(out, 0, "mas_no_rl", [{"step": 0, "eval/success": 0.5, "eval_sampled/success": 0.25}])
    stopped = [
        {"step": 0, "eval/success": 0.5, "eval_sampled/success": 0.25},
        {"step": 1, "time/step_s": 2.0},
        {"step": 2, "time/step_s": 2.0, "eval/success": 0.75, "eval_sampled/success": 0.5, "time/eval_s": 1.0},
        {"step": 3, "time/step_s": 2.0},
    ]
    save_run(out, 0, "at_grpo_shared", stopped)
    finished = [{"step": 0, "eval/success": 0.25}, *({"step": s, "time/step_s": 1.0} for s in (1, 2, 3))]
    save_run(out, 1, "at_grpo_shared", [*finished, {"step": 4, "eval/success": 0.5}])
    save_run(out, 1, "mas_no_rl", [{"step": 0, "eval/success": 0.9}], {"k": 8})  # another setting
    args = ["--envs", "plan_path", "--seeds", "0", "1", "--methods", "mas_no_rl", "at_grpo_shared"]
    learning.main([*args, "--steps", "4", "--out", str(out), "--collect"])

    report = json.loads((out / harness.RESULTS_FILE).read_text())
    runs = {(r["method"], r["seed"]): r for r in report["runs"]}
    assert runs["at_grpo_shared", 0]["stopped_at"] == 3 and runs["at_grpo_shared", 0]["evals"] == [[0, 0.5], [2, 0.75]]
    assert runs["at_grpo_shared", 0]["wall_s"] == pytest.approx(7.0)
    assert runs["at_grpo_shared", 1]["stopped_at"] is None and runs["at_grpo_shared", 1]["evals"][-1] == [4, 0.5]
    assert runs["mas_no_rl", 0]["stopped_at"] is None and runs["mas_no_rl", 0]["sampled_evals"] == [[0, 0.25]]
    assert runs["mas_no_rl", 1]["error"].startswith("no saved run of this config")
    summary = {row["method"]: row for row in report["summary"]}
    assert summary["at_grpo_shared"]["after_per_seed"] == [0.75, 0.5]
    assert summary["at_grpo_shared"]["gain_per_seed"] == [0.25, 0.25]
    assert summary["at_grpo_shared"]["stopped"] == ["seed 0 at step 3 (last eval: step 2)"]
    assert summary["mas_no_rl"]["seeds"] == [0] and len(summary["mas_no_rl"]["errors"]) == 1
    assert "seed 0 at step 3 (last eval: step 2)" in out.with_suffix(".md").read_text()
    # nothing was trained: no warm start folder, and the runs' files are as they were saved
    assert not list(out.rglob("warm_start_*"))
    assert len((out / "plan_path" / "seed0" / "at_grpo_shared" / "metrics.jsonl").read_text().splitlines()) == 4


def test_a_run_saved_before_a_key_existed_counts_as_run_with_its_default(tmp_path):
    out = tmp_path / "table"
    rows = [{"step": 0, "eval/success": 0.5}, {"step": 4, "eval/success": 0.75}]
    save_run(out, 0, "at_grpo_shared", rows)
    saved = out / "plan_path" / "seed0" / "at_grpo_shared" / CONFIG_FILE
    older = json.loads(saved.read_text())
    del older["norm_adv_by_std"]  # as written before the key existed
    saved.write_text(json.dumps(older, indent=2))
    config = read_config(saved)
    assert harness.saved_run(config) == harness.SavedRun(rows)
    other = dataclasses.replace(config, norm_adv_by_std=False, update=dataclasses.replace(config.update, lr=0.5))
    why = "its saved config differs at norm_adv_by_std, update.lr"
    assert harness.saved_run(other) == harness.SavedRun(None, why)
    older["no_such_key"] = 1  # a key this code does not know: not this config
    saved.write_text(json.dumps(older, indent=2))
    unknown = harness.saved_run(config)
    assert unknown.history is None and "no_such_key" in unknown.why_not
    (saved.parent / "metrics.jsonl").unlink()
    saved.unlink()
    missing = harness.saved_run(config)
    assert missing.history is None and missing.why_not.endswith("config.json is missing")


def test_config_differences_name_nested_keys_and_a_key_one_side_lacks():
    assert harness.flat_keys({"a": {"b": {"c": 1}, "d": {}}, "e": None}) == {"a.b.c": 1, "a.d": {}, "e": None}
    base = harness.env_config("plan_path", ["default"], {}, 4)
    other = dataclasses.replace(base, env_options={**base.env_options, "source_options": {"terms": 2}})
    assert harness.config_differences(base, other) == ["env_options.source_options.terms"]
    assert harness.config_differences(other, other) == []
    assert harness.flat_keys({"o": {"x": None, "y": 1}}).keys() != harness.flat_keys({"o": {"y": 1}}).keys()


def test_a_corrupt_metrics_file_is_named_in_why_no_run_was_found(tmp_path):
    out = tmp_path / "table"
    save_run(out, 0, "at_grpo_shared", [{"step": 0, "eval/success": 0.5}])
    folder = out / "plan_path" / "seed0" / "at_grpo_shared"
    (folder / "metrics.jsonl").write_text('{"step": 0}\n\n{"step": 1, "eval/succ')  # cut off mid-row
    config = read_config(folder / CONFIG_FILE)
    why = harness.saved_run(config).why_not
    assert "metrics.jsonl: row 1 (line 3): not JSON" in why


def test_collect_needs_an_evaluation(tmp_path):
    out = tmp_path / "table"
    save_run(out, 0, "single_grpo", [{"step": 1, "time/step_s": 1.0}])
    learning.main(["--envs", "plan_path", "--methods", "single_grpo", "--steps", "4", "--out", str(out), "--collect"])
    (run,) = json.loads((out / harness.RESULTS_FILE).read_text())["runs"]
    assert run["error"].startswith("no evaluation saved")


def test_one_warm_start_serves_every_rl_board_size_with_the_same_warm_start_boards():
    base = harness.env_config("plan_path", ["default"], {}, 4)

    def key(size: int, warm_size: int | None = None) -> str:
        config = dataclasses.replace(base, env_options={**base.env_options, "size": size})
        if warm_size is not None:
            warm_start = dataclasses.replace(config.warm_start, env_options={"size": warm_size})
            config = dataclasses.replace(config, warm_start=warm_start)
        return harness.warm_start_key(config)

    assert key(6, warm_size=5) == key(7, warm_size=5) == key(5)
    assert key(6) != key(5) and key(6, warm_size=4) != key(6, warm_size=5)


def test_the_warm_start_key_shows_near_misses_only_when_they_are_played():
    base = harness.env_config("code", ["default"], {}, 4)

    def key(near_misses: float) -> str:
        warm_start = dataclasses.replace(base.warm_start, near_misses=near_misses)
        return json.loads(harness.warm_start_key(dataclasses.replace(base, warm_start=warm_start)))["warm_start"]

    # At 0 the text a warm start saved before the key existed holds (written out by hand), so it is still reused.
    assert key(0.0) == (
        "WarmStartConfig(tasks=1024, epochs=8, lr=0.003, batch_size=32, lr_schedule='cosine', play_skill=0.5, "
        "corrupt_roles=('coder',), env_options={})"
    )
    assert key(0.5) == key(0.0).replace("env_options={})", "near_misses=0.5, env_options={})")


def test_collect_reports_paired_differences_from_a_baseline(tmp_path):
    out = tmp_path / "table"
    # greedy afters per seed: baseline 0.5, 0.6, 0.7; task grouping 0.4, 0.6, 0.5 (differences -0.1, 0, -0.2);
    # the grouping arm has no run on seed 3, so seed 3 pairs with nothing
    afters = {"at_grpo_shared": [0.5, 0.6, 0.7, 0.9], "mas_grpo_task": [0.4, 0.6, 0.5]}
    for method, values in afters.items():
        for seed, after in enumerate(values):
            rows = [
                {"step": 0, "eval/success": 0.5, "eval_sampled/success": 0.25},
                {"step": 4, "eval/success": after, "eval_sampled/success": after / 2},
            ]
            save_run(out, seed, method, rows)
    args = ["--envs", "plan_path", "--seeds", "0", "1", "2", "3", "--methods", "at_grpo_shared", "mas_grpo_task"]
    learning.main([*args, "--steps", "4", "--out", str(out), "--collect", "--baseline", "at_grpo_shared"])

    (row,) = json.loads((out / harness.RESULTS_FILE).read_text())["paired"]
    assert row["method"] == "mas_grpo_task" and row["baseline"] == "at_grpo_shared" and row["seeds"] == [0, 1, 2]
    greedy, sampled = row["greedy"], row["sampled"]
    assert greedy["per_seed"] == pytest.approx([-0.1, 0.0, -0.2])
    assert greedy["mean"] == pytest.approx(-0.1) and greedy["se"] == pytest.approx(0.1 / 3**0.5)
    half = 4.303 * 0.1 / 3**0.5  # Student's t, 2 degrees of freedom
    assert greedy["ci95"] == pytest.approx([-0.1 - half, -0.1 + half])
    assert sampled["mean"] == pytest.approx(-0.05) and sampled["n"] == 3
    text = out.with_suffix(".md").read_text()
    assert "### Paired differences from `at_grpo_shared`" in text
    assert "| plan_path | mas_grpo_task - at_grpo_shared | 3 | -0.100 (0.058) | [-0.348, +0.148] |" in text


def test_the_kl_method_turns_the_kl_loss_on_with_the_commands_coefficient_and_no_other_method_does(tmp_path):
    config = harness.env_config("sokoban", ["default"], {"update": {"kl_coef": 0.3}}, 4)
    runs = {m: harness.method_config(config, m, "warm", tmp_path / m) for m in harness.METHODS}
    assert (runs["at_grpo_shared_kl"].update.use_kl_loss, runs["at_grpo_shared_kl"].update.kl_coef) == (True, 0.3)
    assert [m for m, run in runs.items() if run.update.use_kl_loss] == ["at_grpo_shared_kl"]
    kl, plain = (dataclasses.asdict(runs[m]) for m in ("at_grpo_shared_kl", "at_grpo_shared"))
    for config_of_run in (kl, plain):
        config_of_run["update"].pop("use_kl_loss")
        config_of_run.pop("output_dir")
    assert kl == plain  # the same run otherwise
