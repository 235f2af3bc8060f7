"""docs/results.md quotes the test suite and the tiny default run as docs/test_suite.json and
research/default_run/data/default_run.json record them (a doc or a record changed alone fails here); the README's
round times stay near the records of `make test` and `make run` (whose record timed the Makefile's own command); and
the default run's recorder (research.default_run.default_run) tells a run that matches its record from one that does
not."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest
from make_run import make_run_arguments

from research.default_run import default_run as default_run_module
from research.smollm2_speed import figures as speed

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "docs" / "test_suite.json"
DEFAULT_RUN = REPO / "research" / "default_run"
# make run's record (benchmarks/time_preset.py --preset smollm2_math), the file docs/results.md's make_run line reads
MAKE_RUN_RECORD = str((speed.DATA / speed.PRESET_FILES[speed.MAKE_RUN_BLOCK]).relative_to(REPO))


@pytest.fixture(scope="module")
def default_run():
    return default_run_module


@pytest.fixture(scope="module")
def suite() -> dict:
    return json.loads(SUITE.read_text())


@pytest.fixture(scope="module")
def make_run_record() -> dict:
    return json.loads((REPO / MAKE_RUN_RECORD).read_text())


@pytest.fixture(scope="module")
def default_record() -> dict:
    return json.loads((DEFAULT_RUN / "data" / "default_run.json").read_text())


def prose(path: str) -> str:
    """A doc's text with its line breaks and runs of spaces as single spaces, so a quote may wrap anywhere."""
    return " ".join((REPO / path).read_text().split())


def minutes_line(command: str) -> str:
    """The README's line for `make run` or `make test` in its list of the two commands."""
    lines = [line for line in (REPO / "README.md").read_text().splitlines() if line.strip().startswith(command + " ")]
    assert len(lines) == 1, f"the README should list `{command}` once among the two commands, found {lines}"
    return lines[0]


# A round time in the README ("about 10 minutes") may differ from the record by this share of it, and no more.
ROUND_TIME_TOLERANCE = 0.15


def round_minutes(line: str) -> int:
    found = re.findall(r"about (\d+) minutes", line)
    assert len(found) == 1, f"say the command's time once, as `about N minutes`: {line!r}"
    return int(found[0])


@pytest.mark.parametrize(
    ("line", "recorded_s", "agrees"),
    [
        ("make test    # about 10 minutes", 561, True),  # 9 min 21 s
        ("make test    # about 9 minutes", 561, True),
        ("make test    # about 11 minutes", 561, False),  # 18% over
        ("make run     # about 11 minutes", 649, True),  # 10 min 49 s
        ("make run     # about 15 minutes", 913, True),
        ("make run     # about 10 minutes", 913, False),
    ],
)
def test_a_round_time_agrees_with_a_record_within_the_tolerance(line, recorded_s, agrees):
    assert (abs(round_minutes(line) * 60 - recorded_s) <= ROUND_TIME_TOLERANCE * recorded_s) == agrees


def test_make_runs_record_timed_make_runs_command(make_run_record):
    assert make_run_record["train_command"].split() == ["verl-mas", *make_run_arguments()], (
        f"{MAKE_RUN_RECORD} timed `{make_run_record['train_command']}`, but make run is {make_run_arguments()}: "
        "time it again with benchmarks/time_preset.py"
    )


def make_run_config_today() -> dict:
    """The config `make run` trains with today, as its run's config.json holds it."""
    from verl_mas.local.config import config_json
    from verl_mas.local.presets import resolve_train_config
    from verl_mas.overrides import parse_overrides

    return json.loads(config_json(resolve_train_config(parse_overrides(make_run_arguments()[1:]))))


def test_make_runs_record_ran_the_config_make_run_has_today(default_run, make_run_record):
    today = make_run_config_today()
    changed, _ = default_run.config_changes(make_run_record["config"], today, today)
    assert changed == [], f"{MAKE_RUN_RECORD} ran another config than make run's today ({changed}): time it again"
    moved = today | {"update": today["update"] | {"lr": today["update"]["lr"] * 2}}
    assert default_run.config_changes(make_run_record["config"], moved, today)[0] == ["update.lr"]


def test_readme_round_times_agree_with_the_records(suite, make_run_record):
    make_run_s = make_run_record["conversion_s"] + make_run_record["train_s"]  # from an empty model cache
    for command, recorded_s, record in (
        ("make run", make_run_s, MAKE_RUN_RECORD),
        ("make test", suite["wall_s"], "docs/test_suite.json"),
    ):
        said = round_minutes(minutes_line(command))
        assert abs(said * 60 - recorded_s) <= ROUND_TIME_TOLERANCE * recorded_s, (
            f"README.md says `{command}` takes about {said} minutes, but {record} measured "
            f"{recorded_s / 60:.1f}: say about {round(recorded_s / 60)} minutes"
        )


def test_the_real_model_groups_record_counts_its_tests(suite):
    tests = sum(
        len(re.findall(r"^def test_", path.read_text(), re.MULTILINE))
        for path in (REPO / "tests" / "real_model").glob("test_*.py")
    )
    assert suite["real_model_group"]["tests_passed"] == tests, "docs/test_suite.json's real_model_group: measure again"


def test_readme_round_time_of_the_real_model_group_agrees_with_its_record(suite):
    found = re.findall(
        r"`make test-real-model`: the real pretrained model through both engines \(about (\d+) minutes",
        prose("README.md"),
    )
    assert len(found) == 1, "the README should say once how long `make test-real-model` takes, as `about N minutes`"
    recorded_s = suite["real_model_group"]["wall_s"]
    assert abs(int(found[0]) * 60 - recorded_s) <= ROUND_TIME_TOLERANCE * recorded_s, (
        f"README.md says the real-model group takes about {found[0]} minutes; docs/test_suite.json measured "
        f"{recorded_s / 60:.1f}"
    )


def test_readme_says_its_times_assume_an_idle_two_core_machine(suite, make_run_record):
    assert "The times assume an otherwise idle 2-core machine" in prose("README.md")
    assert make_run_record["cpus"] == 2
    assert "2-core" in suite["machine"]


def test_results_quote_the_test_suite_record(default_run, suite):
    text = prose("docs/results.md")
    quotes = [
        f"{default_run.minutes(suite['wall_s'])} on a clean clone",
        f"on {suite['date']}; {suite['tests_passed']} passed, {suite['tests_skipped']} skipped",
    ]
    missing = [quote for quote in quotes if quote not in text]
    assert not missing, f"docs/results.md does not say {missing} as docs/test_suite.json has it"


def test_test_suite_record_says_what_it_measured(suite):
    for key in ("date", "command", "machine", "tests_passed", "tests_skipped", "wall_s", "install_s", "notes"):
        assert key in suite, f"test_suite.json has no {key!r} (null where it was not measured)"
    assert isinstance(suite.get("install_included"), bool), "say whether wall_s includes the install"


def test_results_quote_the_default_runs_record(default_run, default_record):
    headline, took = default_run.headline(default_record), default_run.minutes(default_record["wall_s"])
    quotes = [f"**{headline}**", took, default_record["date"]]
    missing = [quote for quote in quotes if quote not in prose("docs/results.md")]
    assert not missing, f"docs/results.md does not say {missing} as research/default_run/data/default_run.json has it"


def test_default_run_page_holds_the_records_tables(default_run, default_record):
    page = (DEFAULT_RUN / "README.md").read_text()
    tables = default_run.curve_table(default_record).splitlines() + default_run.time_table(default_record).splitlines()
    missing = [row for row in tables if row not in page]
    assert not missing, (
        f"research/default_run/README.md lacks these rows of `python -m research.default_run show`: {missing}"
    )
    text = prose("research/default_run/README.md")
    assert f"**{default_run.headline(default_record)}**" in text
    assert default_run.minutes(default_record["wall_s"]) in text and default_record["date"] in text


def synthetic_run(folder: Path, greedy_after: float) -> dict:
    """A two-step run's config.json and metrics.jsonl; returns its config."""
    config = {"eval_tasks": 4, "eval_samples": 2, "steps": 2, "eval_every": 1}
    rollout = {"rollout/success": 0.5, "rollout/reward": 0.1, "rollout/invalid_move_share": 0.2}
    step = rollout | {"rollout/zero_variance_share": 0.5} | {"time/step_s": 1.0, "time/eval_s": 2.0}
    rows = [
        {"step": 0, "eval/success": 0.25, "eval_sampled/success": 0.5},
        {"step": 1, "eval/success": 0.5, "eval_sampled/success": 0.5} | step,
        {"step": 2, "eval/success": greedy_after, "eval_sampled/success": 0.625} | step,
    ]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return config


def test_check_passes_the_recorded_run_and_names_a_changed_figure(default_run, tmp_path, monkeypatch, capsys):
    run = tmp_path / "runs" / "default"
    config = synthetic_run(run, greedy_after=0.75)
    _, rows = default_run.read_run(run)
    figures = default_run.run_figures(config, rows)
    machine = {"cpus": 2, "torch": "2.13.0+cpu", "torch_threads": 2, "idle": True, "others_cpu_share": 0.02}
    times = default_run.step_times(rows) | {"setup_s": 6.0}
    recorded = figures | {"config": config, "times": times, "wall_s": 10.0, "date": "d", "machine": machine}
    monkeypatch.setattr(default_run, "RESULTS", tmp_path / "default_run.json")
    (tmp_path / "default_run.json").write_text(json.dumps(recorded))
    assert figures["greedy"]["after"] == {"success": 0.75, "solved": 3, "of": 4, "se": pytest.approx(0.2165, abs=1e-4)}
    default_run.check(argparse.Namespace(run_dir=run, log=None))
    assert "every success figure is identical" in capsys.readouterr().out
    default_run.show(argparse.Namespace())
    shown = capsys.readouterr().out
    assert "headline: greedy 0.250 -> 0.750, sampled 0.500 -> 0.625" in shown and "greedy after RL: 3 of 4" in shown
    assert "| greedy (4 boards) | 0.250 | 0.500 | 0.750 |" in shown and "| median step | 1.000 s |" in shown

    log = tmp_path / "make_run.log"
    log.write_text("held-out success (greedy): 0.250 before RL -> 0.750 after 2 steps; outputs in runs/default\n")
    with pytest.raises(SystemExit):  # the sampled line is missing from what it printed
        default_run.check(argparse.Namespace(run_dir=run, log=log))
    assert "not printed: 'held-out success (sampled)" in capsys.readouterr().out

    synthetic_run(run, greedy_after=0.5)
    with pytest.raises(SystemExit):
        default_run.check(argparse.Namespace(run_dir=run, log=None))
    out = capsys.readouterr().out
    assert "DIFFERS" in out and "- greedy:" in out and "- curve:" in out
    # other figures on another CPU may be rounding, not code: the check says where each was made
    assert f"the record was made on a CPU it did not name, this machine is {default_run.cpu_model()}" in out


def test_an_identical_default_run_matches_the_record_whatever_settings_were_added_since(default_run, default_record):
    today = default_run.default_config() | {"output_dir": "runs/default"}  # what `verl-mas train` writes today
    changed, _ = default_run.config_changes(default_record["config"], today, default_run.default_config())
    assert changed == []


def test_a_setting_the_record_predates_counts_only_away_from_its_default(default_run, tmp_path, monkeypatch, capsys):
    defaults = {"steps": 300, "sampler_seed": None, "warm_start": {"epochs": 6, "near_misses": 0.0}}
    recorded = {"steps": 300, "warm_start": {"epochs": 6}, "output_dir": "runs/default"}
    same = defaults | {"output_dir": "elsewhere"}
    assert default_run.config_changes(recorded, same, defaults) == ([], ["sampler_seed", "warm_start.near_misses"])
    moved = defaults | {"sampler_seed": 7, "warm_start": {"epochs": 5, "near_misses": 0.0}}
    assert default_run.config_changes(recorded, moved, defaults) == (
        ["sampler_seed", "warm_start.epochs"],
        ["warm_start.near_misses"],
    )
    dropped = {"warm_start": {"epochs": 6}}  # a setting the record has and the run lacks: a change, not news
    assert default_run.config_changes(recorded, dropped, defaults) == (["steps"], [])
    unknown = recorded | {"new_key": 1}  # not a setting the schema knows: never at a default
    assert default_run.config_changes(recorded, unknown, defaults) == (["new_key"], [])

    run = tmp_path / "runs" / "default"
    config = synthetic_run(run, greedy_after=0.75)
    _, rows = default_run.read_run(run)
    machine = {"cpus": 2, "torch": "2.13.0+cpu", "torch_threads": 2, "idle": True, "others_cpu_share": 0.02}
    old_config = {key: value for key, value in config.items() if key != "eval_every"}
    record = default_run.run_figures(config, rows) | {
        "config": old_config,
        "times": default_run.step_times(rows) | {"setup_s": 6.0},
        "wall_s": 10.0,
        "date": "d",
        "machine": machine,
    }
    monkeypatch.setattr(default_run, "RESULTS", tmp_path / "default_run.json")
    (tmp_path / "default_run.json").write_text(json.dumps(record))
    monkeypatch.setattr(default_run, "default_config", lambda: {"eval_every": config["eval_every"]})
    default_run.check(argparse.Namespace(run_dir=run, log=None))
    out = capsys.readouterr().out
    assert "settings newer than the record, at their defaults in this run: eval_every" in out
    assert "every success figure is identical" in out
    monkeypatch.setattr(default_run, "default_config", lambda: {"eval_every": config["eval_every"] + 1})
    with pytest.raises(SystemExit):
        default_run.check(argparse.Namespace(run_dir=run, log=None))
    assert "DIFFERS" in capsys.readouterr().out
