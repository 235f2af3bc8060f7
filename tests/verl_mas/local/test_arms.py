"""Arms from one warm start: the warm start's key, its saving and reuse, the expert moves a reply limit cuts, which
runs a folder holds, and arms as named override sets sharing a warm start by name."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

import pytest

from verl_mas.local.arms import (
    EXPERT_MOVES_FILE,
    WARM_START_KEY_FILE,
    Arm,
    ArmsPlan,
    SavedRun,
    config_differences,
    ensure_warm_start,
    finished_history,
    flat_keys,
    merged,
    read_expert_move_lengths,
    saved_run,
    set_keys,
    warm_start_key,
    warm_start_run_config,
)
from verl_mas.local.config import CONFIG_FILE, LocalTrainConfig, config_json, read_config
from verl_mas.local.presets import SMOKE_OVERRIDES, apply_train_overrides
from verl_mas.local.reporting import METRICS_FILE
from verl_mas.local.warm_start import collect_expert_pairs
from verl_mas.router import PolicyRouter

TEAM = Arm({"grouping": "task"}, start="warm_start_team", start_overrides={"env_options": {"single_agent": False}})
SINGLE = Arm(
    {"rollout_mode": "independent", "env_options": {"tool_cost": 1.0}},
    start="warm_start_single",
    start_overrides={"env_options": {"single_agent": True}},
)


def save(config: LocalTrainConfig, rows: list[dict]) -> Path:
    """A run folder as `train` leaves it: the config and its metrics."""
    folder = Path(config.output_dir)
    folder.mkdir(parents=True)
    (folder / CONFIG_FILE).write_text(config_json(config))
    (folder / METRICS_FILE).write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder


def test_a_run_saved_before_a_key_existed_counts_as_run_with_its_default(tmp_path):
    rows = [{"step": 0, "eval/success": 0.5}, {"step": 4, "eval/success": 0.75}]
    saved = save(LocalTrainConfig(steps=4, output_dir=str(tmp_path / "run")), rows) / CONFIG_FILE
    older = json.loads(saved.read_text())
    del older["norm_adv_by_std"]  # as written before the key existed
    saved.write_text(json.dumps(older, indent=2))
    config = read_config(saved)
    assert saved_run(config) == SavedRun(rows) and finished_history(config) == rows
    other = dataclasses.replace(config, norm_adv_by_std=False, update=dataclasses.replace(config.update, lr=0.5))
    why = "its saved config differs at norm_adv_by_std, update.lr"
    assert saved_run(other) == SavedRun(None, why) and finished_history(other) is None
    assert saved_run(other, free=("norm_adv_by_std", "update")) == SavedRun(rows)  # keys a resume may change
    older["no_such_key"] = 1  # a key this code does not know: not this config
    saved.write_text(json.dumps(older, indent=2))
    unknown = saved_run(config)
    assert unknown.history is None and "no_such_key" in unknown.why_not
    (saved.parent / METRICS_FILE).unlink()
    saved.unlink()
    missing = saved_run(config)
    assert missing.history is None and missing.why_not.endswith("config.json is missing")


def test_config_differences_name_nested_keys_and_a_key_one_side_lacks():
    assert flat_keys({"a": {"b": {"c": 1}, "d": {}}, "e": None}) == {"a.b.c": 1, "a.d": {}, "e": None}
    base = LocalTrainConfig()
    other = dataclasses.replace(base, env_options={**base.env_options, "source_options": {"terms": 2}})
    assert config_differences(base, other) == ["env_options.source_options.terms"]
    assert config_differences(other, other) == []
    assert config_differences(base, other, free=("env_options",)) == []
    assert flat_keys({"o": {"x": None, "y": 1}}).keys() != flat_keys({"o": {"y": 1}}).keys()


def test_a_corrupt_metrics_file_is_named_in_why_no_run_was_found(tmp_path):
    config = LocalTrainConfig(output_dir=str(tmp_path / "run"))
    folder = save(config, [{"step": 0, "eval/success": 0.5}])
    (folder / METRICS_FILE).write_text('{"step": 0}\n\n{"step": 1, "eval/succ')  # cut off mid-row
    assert "metrics.jsonl: row 1 (line 3): not JSON" in saved_run(config).why_not


def test_one_warm_start_serves_every_rl_board_size_with_the_same_warm_start_boards():
    base = LocalTrainConfig()

    def key(size: int, warm_size: int | None = None) -> str:
        config = dataclasses.replace(base, env_options={**base.env_options, "size": size})
        if warm_size is not None:
            warm_start = dataclasses.replace(config.warm_start, env_options={"size": warm_size})
            config = dataclasses.replace(config, warm_start=warm_start)
        return warm_start_key(config)

    assert key(6, warm_size=5) == key(7, warm_size=5) == key(5)
    assert key(6) != key(5) and key(6, warm_size=4) != key(6, warm_size=5)


def test_the_warm_start_key_shows_near_misses_only_when_they_are_played():
    warm_start = {"tasks": 1024, "epochs": 8, "corrupt_roles": ["coder"], "play_skill": 0.5}
    base = apply_train_overrides(LocalTrainConfig(), {"env": "code", "warm_start": warm_start})

    def key(near_misses: float) -> str:
        warm_start = dataclasses.replace(base.warm_start, near_misses=near_misses)
        return json.loads(warm_start_key(dataclasses.replace(base, warm_start=warm_start)))["warm_start"]

    # At 0 the text a warm start saved before the key existed holds (written out by hand), so it is still reused.
    assert key(0.0) == (
        "WarmStartConfig(tasks=1024, epochs=8, lr=0.003, batch_size=32, lr_schedule='cosine', play_skill=0.5, "
        "corrupt_roles=('coder',), env_options={})"
    )
    assert key(0.5) == key(0.0).replace("env_options={})", "near_misses=0.5, env_options={})")


def test_override_sets_merge_key_by_key_and_name_their_dotted_keys():
    assert merged({"a": {"b": 1, "c": 2}, "d": 1}, {"a": {"c": 3, "e": 4}}, {"d": {"f": 5}}) == {
        "a": {"b": 1, "c": 3, "e": 4},
        "d": {"f": 5},
    }
    assert set_keys([TEAM, SINGLE, Arm()]) == (
        "env_options.single_agent",
        "env_options.tool_cost",
        "grouping",
        "rollout_mode",
    )


def plan(tmp_path: Path, base: LocalTrainConfig | None = None, **arms: Arm) -> ArmsPlan:
    found = arms or {"team": TEAM, "single": SINGLE}
    return ArmsPlan("test", base or LocalTrainConfig(), found, (0, 3), tmp_path, next(iter(found)), seed_dir="s{seed}")


def test_arms_share_a_warm_start_by_name_and_run_with_its_keys_and_their_own(tmp_path):
    arms = plan(tmp_path, team=TEAM, team_turn=Arm({"grouping": "task_role_turn"}, TEAM.start, TEAM.start_overrides))
    team_start = str(tmp_path / "s3/warm_start_team")
    assert arms.warm_start_path(3, "team") == arms.warm_start_path(3, "team_turn") == team_start
    assert arms.warm_start_path(3) == team_start  # one start: no arm needs naming
    two = plan(tmp_path)
    with pytest.raises(ValueError, match="the arms have several warm starts; name the arm"):
        two.warm_start_path(0)
    single = two.arm_config(3, "single")
    assert single.seed == 3 and single.rollout_mode == "independent"
    assert single.output_dir == str(tmp_path / "s3/single")
    # the run's own env options first, then its warm start's: one order, so a saved config reads back equal
    assert list(single.env_options)[-2:] == ["tool_cost", "single_agent"] and single.env_options["single_agent"]
    assert single.model.path == str(tmp_path / "s3/warm_start_single") and not single.warm_start.tune_loaded
    warm = two.warm_start_config(3, "single")
    assert warm.env_options["single_agent"] and "tool_cost" not in warm.env_options  # the run's own: not its start's
    assert warm.router == "shared" and warm.output_dir == str(tmp_path / "s3/warm_start_single")
    assert warm_start_key(warm) != warm_start_key(two.warm_start_config(3, "team"))
    assert not two.resume and not single.resume


def test_a_plan_refuses_arms_it_cannot_run(tmp_path):
    other = Arm({"grouping": "task"}, TEAM.start, {"env_options": {"single_agent": True}})
    with pytest.raises(ValueError, match="arm other: its start 'warm_start_team' is another arm's"):
        plan(tmp_path, team=TEAM, other=other)
    with pytest.raises(ValueError, match="baseline 'nobody' is none of the arms team"):
        ArmsPlan("test", LocalTrainConfig(), {"team": TEAM}, (0,), tmp_path, "nobody")


def test_an_arm_setting_a_key_two_ways_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"sets update.lr one way for its runs \(0.001\) and another for its warm"):
        Arm({"update": {"lr": 1e-3}, "grouping": "task"}, "warm_start", {"update": {"lr": 3e-3}})
    same = Arm({"update": {"lr": 1e-3}}, "warm_start", {"update": {"lr": 1e-3}, "warm_start": {"epochs": 2}})
    assert same.start_overrides["warm_start"] == {"epochs": 2}  # one key set alike in both is no clash


def test_loaded_weights_untuned_are_every_arms_start_and_nothing_is_saved(tmp_path):
    loaded = plan(tmp_path, LocalTrainConfig(model=dataclasses.replace(LocalTrainConfig().model, path="/some/model")))
    assert not loaded.saves_warm_start and loaded.warm_start_path(0, "single") == "/some/model"
    assert loaded.prepare_warm_start(0, print, "team") is False and not list(tmp_path.iterdir())
    assert loaded.cut_expert_moves(0, "team") == []  # a model given by path: its expert moves are unknown


def test_the_expert_moves_a_reply_limit_cuts_are_read_from_the_saved_warm_start(tmp_path):
    base = apply_train_overrides(LocalTrainConfig(), {"sampling": {"max_new_tokens": 8}})
    limited = Arm({"sampling": {"role_max_new_tokens": {"plan": 12}}})
    arms = plan(tmp_path, base, roomy=Arm(), limited=limited)
    folder = tmp_path / "s0" / "warm_start"
    folder.mkdir(parents=True)
    (folder / EXPERT_MOVES_FILE).write_text(json.dumps({"plan": {"5": 3, "9": 2, "12": 1}, "tool": {"8": 4, "11": 1}}))
    assert read_expert_move_lengths(folder) == {"plan": {5: 3, 9: 2, 12: 1}, "tool": {8: 4, 11: 1}}
    # one limit for both roles: 10 moves, of which 9, 12 (plan) and 11 (tool) are longer than 8
    (cut,) = arms.cut_expert_moves(0, "roomy")
    assert (cut.key, cut.limit, cut.moves, cut.cut, cut.longest) == ("sampling.max_new_tokens", 8, 11, 4, 12)
    # the plan's own limit of 12 holds all of its moves: only the tool's 11 is cut, at 8
    (cut,) = arms.cut_expert_moves(0, "limited")
    assert (cut.key, cut.moves, cut.cut, cut.longest) == ("sampling.max_new_tokens", 5, 1, 11)
    assert arms.cut_expert_moves(3, "roomy") == [] and read_expert_move_lengths(tmp_path / "s3") is None


def test_a_warm_start_is_saved_once_with_its_expert_moves_and_replaced_when_its_settings_change(tmp_path):
    sizes = {key: value for key, value in SMOKE_OVERRIDES.items() if key != "output_dir"}
    config = warm_start_run_config(apply_train_overrides(LocalTrainConfig(), sizes), tmp_path / "warm_start")
    lines: list[str] = []
    assert ensure_warm_start(config, lines.append) is False
    folder = tmp_path / "warm_start"
    assert (folder / WARM_START_KEY_FILE).read_text() == warm_start_key(config)
    assert (folder / "config.json").is_file() and not (tmp_path / "warm_start.partial").exists()
    pairs = collect_expert_pairs(config, PolicyRouter.from_spec("shared", ("tool", "plan")))
    lengths = read_expert_move_lengths(folder)
    assert {role: sum(found.values()) for role, found in lengths.items()} == Counter(pair.role for pair in pairs)
    assert ensure_warm_start(config, lines.append) is True and lines[-1] == f"reusing the warm start in {folder}"
    (folder / "stale").write_text("left by the warm start of other settings")
    other = apply_train_overrides(config, {"warm_start": {"epochs": 2}})
    assert ensure_warm_start(other, lines.append) is False
    assert (folder / WARM_START_KEY_FILE).read_text() == warm_start_key(other) and not (folder / "stale").exists()
