"""Bad input through `verl-mas`, as a careless or hostile user gives it: malformed commands and overrides, configs
out of range, broken output paths, checkpoints and their files missing, empty, truncated or of the wrong type.

Every case must end in a one-paragraph error (exit 2, no traceback) that names the input, and leave the disk as it
was. Cases run in-process through `verl_mas.cli.main` (fast); a few run as subprocesses to prove no traceback escapes.
The count tried and handled is printed per group and in total (`pytest -s` shows it).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from verl_mas.cli import main
from verl_mas.local.presets import resolve_train_config
from verl_mas.local.train import train
from verl_mas.overrides import parse_overrides

# A run small enough to build in well under a second: every command below fails before or right after building it.
TINY = [
    "env_options={size: 4, wall_ratio: 0.1, tool_mode: compact, max_turns: 2}",
    "k=2",
    "tasks_per_step=2",
    "steps=1",
    "eval_tasks=2",
    "eval_samples=0",
    "warm_start.tasks=4",
    "warm_start.epochs=1",
    "model.hidden=32",
    "model.layers=1",
    "model.vocab_size=300",
    "sampling.max_new_tokens=8",
    "progress=false",
]
TALLY = {"tried": 0, "handled": 0}


@dataclass(frozen=True)
class Case:
    """One bad command: its arguments, and what the error must say (the input it names)."""

    name: str
    argv: list[str]
    says: str
    prepare: Callable[[Path], None] | None = field(default=None, compare=False)


def snapshot(root: Path) -> dict[str, str]:
    """Every path under `root` with its content hash (folders as 'dir'): the state a failed command must keep."""
    state = {}
    for path in sorted(root.rglob("*")):
        state[str(path.relative_to(root))] = "dir" if path.is_dir() else hashlib.sha1(path.read_bytes()).hexdigest()
    return state


def problems_with(case: Case, workspace: Path, capsys) -> list[str]:
    """What is wrong with how `verl-mas` handled `case` (empty: a clean one-paragraph error, nothing changed)."""
    before = snapshot(workspace)
    try:
        code = main(case.argv)
    except SystemExit as exit_:  # argparse's own errors: usage and one error line, exit 2
        code = exit_.code
    except BaseException as error:  # noqa: BLE001  (an escaped exception is the failure this suite counts)
        return [f"raised {type(error).__name__}: {error}"]
    err = capsys.readouterr().err.strip()
    found = []
    if code != 2:
        found.append(f"exit {code}")
    if "Traceback" in err or "\n\n" in err:
        found.append(f"not one paragraph: {err[:300]!r}")
    if case.says not in err:
        found.append(f"error does not say {case.says!r}: {err[-300:]!r}")
    if snapshot(workspace) != before:
        found.append("the disk changed")
    return found


def run_cases(cases: list[Case], workspace: Path, capsys, group: str) -> None:
    failures = {}
    for case in cases:
        if case.prepare is not None:
            case.prepare(workspace)
        found = problems_with(case, workspace, capsys)
        TALLY["tried"] += 1
        if found:
            failures[case.name] = found
        else:
            TALLY["handled"] += 1
    with capsys.disabled():
        print(f"\nhostile inputs, {group}: {len(cases) - len(failures)} of {len(cases)} handled")
    assert not failures, failures


def train_case(name: str, overrides: list[str], says: str, workspace: Path) -> Case:
    return Case(name, ["train", *TINY, f"output_dir={workspace / 'run'}", *overrides], says)


CONFIG_CASES = [
    ("nan lr", ["update.lr=nan"], "update.lr must be a finite number > 0, got nan"),
    ("negative lr", ["update.lr=-1"], "update.lr must be a finite number > 0, got -1.0"),
    ("nan warm-start lr", ["warm_start.lr=nan"], "warm_start.lr must be a finite number > 0"),
    ("inf warm-start lr", ["warm_start.lr=.inf"], "warm_start.lr must be a finite number > 0 or null, got inf"),
    ("nan alpha", ["alpha=nan"], "alpha must be a finite number >= 0, got nan"),
    ("negative alpha", ["alpha=-0.5"], "alpha must be a finite number >= 0"),
    ("zero k", ["k=0"], "k must be an integer >= 1, got 0"),
    ("fractional k", ["k=1.5"], "'k' expects an integer, got 1.5"),
    ("word k", ["k=four"], "'k' expects an integer, got 'four'"),
    ("list k", ["k=[1, 2]"], "'k' expects an integer"),
    ("mapping k", ["k={a: 1}"], "'k' expects an integer"),
    ("bool k", ["k=true"], "'k' expects an integer, got True"),
    ("negative steps", ["steps=-1"], "steps must be an integer >= 0, got -1"),
    ("negative seed", ["seed=-1"], "seed must be an integer in [0, 4294967295], got -1"),
    ("huge seed", ["seed=99999999999999999999"], "seed must be an integer in [0, 4294967295]"),
    ("zero eval_every", ["eval_every=0"], "eval_every must be an integer >= 1"),
    ("negative checkpoint_every", ["checkpoint_every=-2"], "checkpoint_every must be an integer >= 0"),
    ("beta of 1", ["update.betas=[0.9, 1.0]"], "update.betas[1] must be a finite number in [0, 1)"),
    ("betas as a word", ["update.betas=fast"], "update.betas"),
    ("nan eps", ["update.eps=nan"], "update.eps must be a finite number > 0"),
    ("dual clip below 1", ["update.clip_ratio_c=0.5"], "update.clip_ratio_c must be a finite number > 1"),
    ("negative grad clip", ["update.grad_clip=-1"], "update.grad_clip must be a finite number > 0 or null"),
    ("nan kl", ["update.kl_coef=nan"], "update.kl_coef must be a finite number >= 0"),
    ("zero ppo epochs", ["update.ppo_epochs=0"], "update.ppo_epochs must be >= 1"),
    ("zero mini-batch", ["update.mini_batch_size=0"], "update.mini_batch_size must be >= 1"),
    ("nan weight decay", ["update.weight_decay=nan"], "update.weight_decay must be a finite number >= 0"),
    ("zero top_p", ["sampling.top_p=0"], "sampling.top_p must be in (0, 1]"),
    ("negative top_k", ["sampling.top_k=-1"], "sampling.top_k must be >= 0"),
    ("zero temperature", ["sampling.temperature=0"], "sampling.temperature must be > 0"),
    ("inf temperatures", ["sampling.temperature=inf", "update.temperature=inf"], "temperature must be a finite"),
    ("temperature mismatch", ["update.temperature=2"], "must equal sampling.temperature"),
    ("zero role limit", ["sampling.role_max_new_tokens.plan=0"], "sampling.role_max_new_tokens.plan must be"),
    ("unknown role limit", ["sampling.role_max_new_tokens.critic=4"], "names unknown role 'critic'"),
    ("heads not dividing hidden", ["model.heads=3"], "model.hidden (32) must be a multiple of model.heads (3)"),
    ("zero hidden", ["model.hidden=0"], "model.hidden must be an integer >= 1, got 0"),
    ("negative lora rank", ["lora.rank=-1"], "lora.rank must be an integer >= 0"),
    ("nan lora alpha", ["lora.alpha=nan"], "lora.alpha must be a finite number > 0"),
    ("play skill above 1", ["warm_start.play_skill=2"], "warm_start.play_skill must be in [0, 1]"),
    ("near misses above 1", ["warm_start.near_misses=1.5"], "warm_start.near_misses must be in [0, 1]"),
    ("zero warm-start batch", ["warm_start.batch_size=0"], "warm_start.batch_size must be an integer >= 1"),
    ("corrupt roles as a word", ["warm_start.corrupt_roles=plan"], "corrupt_roles must be a list of role names"),
    ("negative policy lr", ["policy_lr.shared=-1"], "policy_lr.shared must be a finite number > 0"),
    ("unknown policy lr", ["policy_lr.nobody=0.001"], "policy_lr names unknown policy 'nobody'"),
    ("unknown grouping", ["grouping=episode"], "grouping: unknown grouping 'episode'; use one of"),
    ("unknown rollout mode", ["rollout_mode=forest"], "rollout_mode must be 'tree' or 'independent'"),
    ("unknown device", ["device=gpu0"], "device must be 'cpu', 'cuda', 'cuda:N' or 'auto'"),
    ("unknown env", ["env=chess"], "chess"),
    ("unicode env", ["env=迷路"], "迷路"),
    ("huge env name", ["env=" + "x" * 100_000], "xxxx"),
    ("unknown preset", ["preset=fastest"], "fastest"),
    ("unknown router", ["router=everyone"], "everyone"),
    ("unknown key", ["learning_rate=0.1"], "unknown config key 'learning_rate'"),
    ("unknown nested key", ["update.learning_rate=0.1"], "unknown config key 'update.learning_rate'"),
    ("unicode key", ["ключ=1"], "unknown config key 'ключ'"),
    ("no value", ["k"], "override 'k' is not of the form key=value"),
    ("no key", ["=4"], "override '=4' is not of the form key=value"),
    ("broken yaml", ["env_options={size: [4"], "cannot parse value"),
    ("yaml object tag", ["k=!!python/object/apply:os.system [ls]"], "cannot parse value"),
    ("key set twice as value and table", ["update=1", "update.lr=0.1"], "'update' is already set to a value"),
    ("empty resume", ["resume="], "resume must be true, false or a checkpoint path"),
    ("resume from nowhere", ["resume=/nonexistent/run"], "no checkpoint at /nonexistent/run"),
    ("sokoban too small", ["env=sokoban", "env_options={size: 4}"], "sokoban size must be"),
    ("nan board size", ["env_options.size=.nan"], "size"),
    ("unknown env option", ["env_options.colour=red"], "colour"),
]


def test_bad_configs_and_overrides_fail_at_start_and_create_nothing(tmp_path, capsys):
    cases = [train_case(name, overrides, says, tmp_path) for name, overrides, says in CONFIG_CASES]
    run_cases(cases, tmp_path, capsys, "configs and overrides")
    assert not (tmp_path / "run").exists()


def test_bad_commands_fail_in_one_paragraph(tmp_path, capsys):
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder")
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = [
        Case("no command", [], "the following arguments are required: command"),
        Case("unknown command", ["fly"], "invalid choice: 'fly'"),
        Case("unknown flag", ["train", "--fast"], "unrecognized arguments: --fast"),
        Case("eval: zero samples", ["eval", "samples=0"], "samples must be an integer >= 1, got 0"),
        Case("eval: nan temperature", ["eval", "temperature=nan"], "temperature (0: greedy) must be a finite number"),
        Case("eval: word samples", ["eval", "samples=many"], "'samples' expects an integer"),
        Case(
            "eval: no checkpoint there",
            ["eval", f"checkpoint={tmp_path / 'none'}"],
            f"checkpoint={tmp_path / 'none'}: no checkpoint at {tmp_path / 'none'} (neither a step_* checkpoint nor "
            "a folder holding one); a run writes checkpoints only with checkpoint_every=N",
        ),
        Case("eval: empty folder", ["eval", f"checkpoint={empty}"], f"no checkpoint at {empty}"),
        Case("eval: json is a folder", ["eval", *TINY, f"json={empty}"], f"json {empty} is a folder"),
        Case("eval: json under a file", ["eval", *TINY, f"json={a_file}/r.json"], str(a_file)),
        Case("eval: json in /proc", ["eval", *TINY, "json=/proc/r.json"], "/proc"),
        Case("train: output_dir is a file", ["train", *TINY, f"output_dir={a_file}"], f"{a_file} exists and is not"),
        Case("train: output_dir under a file", ["train", *TINY, f"output_dir={a_file}/run"], f"{a_file} is not a"),
        Case("train: output_dir read-only", ["train", *TINY, "output_dir=/sys/verl_mas_run"], "is not writable"),
        Case("data: unknown env", ["data", "--env", "chess", "--out", str(tmp_path / "d")], "chess"),
        Case("data: word count", ["data", "--env", "plan_path", "--out", "d", "--train", "x"], "invalid int value"),
        Case("data: out is a file", ["data", "--env", "plan_path", "--out", str(a_file)], str(a_file)),
        Case("data: bad option", ["data", "--env", "plan_path", "--out", str(tmp_path / "d"), "size=-3"], "size"),
    ]
    run_cases(cases, tmp_path, capsys, "commands and paths")


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    """A finished one-step run with its checkpoint: the pristine copy each checkpoint case corrupts a copy of."""
    out = tmp_path_factory.mktemp("pristine") / "run"
    overrides = [*TINY, f"output_dir={out}", "checkpoint_every=1"]
    train(resolve_train_config(parse_overrides(overrides)), log=lambda _: None)
    return out


STEP = Path("checkpoints") / "step_00000001"


def truncate(name: str, keep: float = 0.5) -> Callable[[Path], None]:
    def corrupt(run: Path) -> None:
        file = run / STEP / name
        file.write_bytes(file.read_bytes()[: int(file.stat().st_size * keep)])

    return corrupt


def replace(name: str, content: bytes) -> Callable[[Path], None]:
    def corrupt(run: Path) -> None:
        (run / STEP / name).write_bytes(content)

    return corrupt


def remove(name: str) -> Callable[[Path], None]:
    def corrupt(run: Path) -> None:
        target = run / STEP / name
        shutil.rmtree(target) if target.is_dir() else target.unlink()

    return corrupt


CHECKPOINT_CORRUPTIONS = [
    ("model file empty", replace("model_shared.pt", b""), "model_shared.pt cannot be loaded (empty)"),
    ("model file truncated", truncate("model_shared.pt"), "model_shared.pt cannot be loaded"),
    ("model file is text", replace("model_shared.pt", "ünïcode".encode()), "model_shared.pt cannot be loaded"),
    ("model file missing", remove("model_shared.pt"), "model_shared.pt is missing"),
    ("trainer file empty", replace("trainer_shared.pt", b""), "trainer_shared.pt cannot be loaded (empty)"),
    ("trainer file truncated", truncate("trainer_shared.pt", 0.9), "trainer_shared.pt cannot be loaded"),
    ("rng file empty", replace("rng.pt", b""), "rng.pt cannot be loaded (empty)"),
    ("rng file truncated", truncate("rng.pt"), "rng.pt cannot be loaded"),
    ("generators file truncated", truncate("generators.pt"), "generators.pt cannot be loaded"),
    ("meta empty", replace("meta.json", b""), "meta.json is not valid JSON (empty)"),
    ("meta truncated", truncate("meta.json"), "meta.json is not valid JSON"),
    ("meta a list", replace("meta.json", b"[1, 2]"), "meta.json is not a checkpoint's meta file"),
    ("meta not utf-8", replace("meta.json", b"\xff\xfe{"), "meta.json is not text"),
    ("config missing", remove("config.json"), "config.json is missing"),
    ("config empty", replace("config.json", b""), "config.json is not valid JSON (empty)"),
    ("config truncated", truncate("config.json"), "config.json is not valid JSON"),
    ("config a string", replace("config.json", b'"shared"'), "config.json holds no config"),
    ("tokenizer missing", remove("tokenizer"), "has no tokenizer/ folder"),
    ("tokenizer truncated", truncate("tokenizer/tokenizer.json"), "the tokenizer in"),
]


def copy_of(run: Path, workspace: Path) -> Path:
    copy = workspace / "run"
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(run, copy)
    return copy


def checkpoint_cases(trained_run: Path, workspace: Path, command: str) -> list[Case]:
    run = workspace / "run"
    if command == "train":
        argv = ["train", *TINY, f"output_dir={run}", "resume=true", "steps=2"]
    else:
        argv = ["eval", f"checkpoint={run}"]
    cases = []
    for name, corrupt, says in CHECKPOINT_CORRUPTIONS:
        if command == "train" and name == "config missing":
            says = "config.json is missing"

        def prepare(workspace: Path, corrupt=corrupt) -> None:
            corrupt(copy_of(trained_run, workspace))

        cases.append(Case(f"{command}: {name}", argv, says, prepare))
    return cases


def test_broken_checkpoints_fail_naming_the_file_and_leave_the_run_as_it_was(trained_run, tmp_path, capsys):
    cases = checkpoint_cases(trained_run, tmp_path, "train") + checkpoint_cases(trained_run, tmp_path, "eval")
    run_cases(cases, tmp_path, capsys, "checkpoints")


def test_resume_with_another_model_or_router_leaves_the_run_as_it_was(trained_run, tmp_path, capsys):
    resume = ["train", *TINY, f"output_dir={tmp_path / 'run'}", "resume=true", "steps=2"]

    def fresh(workspace: Path) -> None:
        copy_of(trained_run, workspace)

    evaluate = ["eval", f"checkpoint={tmp_path / 'run'}"]
    # The run's config.json knows the saved values: the error names the key and both values, not the tensors.
    does_not_fit = "model_shared.pt does not fit the run this config builds: "
    cases = [
        Case(
            "changed router",
            [*resume, "router=per_role"],
            """holds models ['shared'], this config builds ['plan', 'tool'] (router: saved "shared", now "per_role")""",
            fresh,
        ),
        Case(
            "changed model size", [*resume, "model.hidden=64"], does_not_fit + "model.hidden: saved 32, now 64", fresh
        ),
        Case("changed layers", [*resume, "model.layers=2"], does_not_fit + "model.layers: saved 1, now 2", fresh),
        Case(
            "changed width and heads",
            [*resume, "model.hidden=48", "model.heads=2"],
            does_not_fit + "model.heads: saved 4, now 2; model.hidden: saved 32, now 48",
            fresh,
        ),
        Case(
            "lora added",
            [*resume, "lora.rank=2"],
            "holds models ['shared'], this config builds ['base'] (lora.rank: saved 0, now 2)",
            fresh,
        ),
        Case(
            "eval, changed model size",
            [*evaluate, "model.hidden=48"],
            does_not_fit + "model.hidden: saved 32, now 48",
            fresh,
        ),
    ]
    run_cases(cases, tmp_path, capsys, "resume with another config")


def test_a_changed_model_is_named_by_its_key_not_by_a_state_dict_dump(trained_run, tmp_path, capsys):
    copy_of(trained_run, tmp_path)
    argv = ["train", *TINY, f"output_dir={tmp_path / 'run'}", "resume=true", "steps=2", "model.hidden=48"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "model.hidden: saved 32, now 48" in err
    assert "size mismatch" not in err and "embed_tokens" not in err and "torch.Size" not in err, err


# Slow (a fresh interpreter imports torch and verl): the installed script, once.
SUBPROCESS_CASES = [
    ([str(Path(sys.executable).parent / "verl-mas"), "train", "update.lr=nan"], "update.lr must be a finite number"),
]


@pytest.mark.parametrize("command, says", SUBPROCESS_CASES)
def test_no_traceback_reaches_the_terminal(command, says, tmp_path):
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    result = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    TALLY["tried"] += 1
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and says in lines[0], result.stderr
    assert list(tmp_path.iterdir()) == []
    TALLY["handled"] += 1


def test_zz_report_the_tally(capsys):
    """Printed last: how many bad inputs this suite tried, and how many were handled cleanly."""
    with capsys.disabled():
        print(f"\nhostile inputs through verl-mas: {TALLY['handled']} of {TALLY['tried']} handled")
    assert TALLY["handled"] == TALLY["tried"]
