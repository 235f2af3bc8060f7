"""Every recipe composes, validates (ours and verl's) and runs the reference settings; main's start-up checks."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import hydra
import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
from verl.trainer.main_ppo import TaskRunnerV1
from verl.utils.config import omega_conf_to_dataclass

from verl_mas import cli
from verl_mas.advantage import GroupingError
from verl_mas.env.registry import ENTRY_POINT_GROUP
from verl_mas.install_commands import FLASH_ATTN_STEPS
from verl_mas.main import AGENT_LOOPS_FILE, CONFIG_DIR, MasTaskRunner, check_config, main
from verl_mas.rollout import RolloutConfig
from verl_mas.verl_engine.config import MasConfig, MasConfigError

REPO = Path(__file__).resolve().parents[3]
RECIPES = REPO / "recipes"
LAUNCHER = RECIPES / "launch.sh"  # the one launcher; each recipes/<env>/run_qwen3_<size>.sh execs it
MODELS = {"run_qwen3_1.7b.sh": "Qwen/Qwen3-1.7B", "run_qwen3_8b.sh": "Qwen/Qwen3-8B"}
SIZES = {"run_qwen3_1.7b.sh": "1.7b", "run_qwen3_8b.sh": "8b"}  # the launcher's SIZE argument for each wrapper
GPU_MEMORY_UTILIZATION = {"run_qwen3_1.7b.sh": "0.6", "run_qwen3_8b.sh": "0.5"}
LEVELS = ("single", "shared", "per_role")
SCRIPTS = sorted(RECIPES.glob("*/run_*.sh"))
# what the fake `python` and `verl-mas` do: write their arguments, one per line, to $RECORD_DIR/<command>
WITHOUT_RECIPE: set[str] = set()  # every built-in environment has a recipe
RECORDER = '#!/bin/sh\nprintf "%s\\n" "$@" > "$RECORD_DIR/$(basename "$0")"\n'


def composed(config_dir: Path, config_name: str, overrides: list[str]):
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return compose(config_name, overrides=overrides)


def write_data(tmp_path: Path, env: str, options: list[str]) -> list[str]:
    out = tmp_path / "data"
    assert cli.main(["data", "--env", env, "--out", str(out), "--train", "3", "--eval", "2", *options]) == 0
    return [f"data.train_files={out / 'train.parquet'}", f"data.val_files={out / 'eval.parquet'}"]


@pytest.fixture(scope="module")
def fake_bin(tmp_path_factory) -> Path:
    bin_dir = tmp_path_factory.mktemp("bin")
    for name in ("python", "verl-mas"):
        (bin_dir / name).write_text(RECORDER)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def run_script(
    script: Path, args: list[str], fake_bin: Path, home: Path, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{fake_bin}:{os.environ['PATH']}", "HOME": str(home), "RECORD_DIR": str(home)}
    env.pop("DATA_DIR", None)
    env.pop("MODEL", None)
    env.pop("N_GPUS", None)
    env.update(extra_env or {})
    return subprocess.run(["bash", str(script), *args], env=env, capture_output=True, text=True, timeout=30)


def test_every_environment_has_a_complete_recipe():
    built_in = sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name not in WITHOUT_RECIPE)
    assert (
        sorted(p.name for p in RECIPES.iterdir() if p.is_dir())
        == built_in
        == ["code", "math", "plan_path", "sokoban", "sudoku"]
    )
    for env in built_in:
        files = sorted(p.name for p in (RECIPES / env).iterdir())
        assert files == sorted(["README.md", f"{env}.yaml", "run_qwen3_1.7b.sh", "run_qwen3_8b.sh"]), env
    assert sorted(p.name for p in RECIPES.iterdir() if not p.is_dir()) == ["launch.sh"]
    assert len(SCRIPTS) == 10
    for script in [LAUNCHER, *SCRIPTS]:
        lines = script.read_text().splitlines()
        assert lines[0] == "#!/usr/bin/env bash" and "set -euo pipefail" in lines, script


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_run_script_is_a_wrapper_that_execs_the_launcher(script):
    """A wrapper checks for the level (so the usage names the wrapper) and execs recipes/launch.sh ENV SIZE."""
    commands = [line for line in script.read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert commands == [
        "set -euo pipefail",
        ': "${1:?usage: $0 single|shared|per_role [extra hydra overrides ...]}"',
        f'exec "$BASH" "$(dirname "${{BASH_SOURCE[0]}}")/../launch.sh" {script.parent.name} {SIZES[script.name]} "$@"',
    ]


LEVEL_OVERRIDES = {
    "single": ["mas.env_options.single_agent=true", "mas.router=shared"],
    "shared": ["mas.env_options.single_agent=false", "mas.router=shared"],
    "per_role": ["mas.env_options.single_agent=false", "mas.router=per_role"],
}
# (roles, the single agent's role) where not tool and plan
TEAMS = {"code": (("coder", "tester"), ("coder",)), "math": (("reasoner", "tool"), ("reasoner",))}
# each script composed with one level, each level twice, the 8B per-role offload once
COMPOSED_CASES = [
    ("plan_path", "run_qwen3_1.7b.sh", "single"),
    ("plan_path", "run_qwen3_8b.sh", "per_role"),
    ("sokoban", "run_qwen3_1.7b.sh", "shared"),
    ("sokoban", "run_qwen3_8b.sh", "single"),
    ("sudoku", "run_qwen3_1.7b.sh", "per_role"),
    ("sudoku", "run_qwen3_8b.sh", "shared"),
    ("code", "run_qwen3_1.7b.sh", "shared"),
    ("code", "run_qwen3_8b.sh", "single"),
    ("math", "run_qwen3_1.7b.sh", "per_role"),
    ("math", "run_qwen3_8b.sh", "shared"),
]


def launch_recorded(
    script: Path, level: str, fake_bin: Path, home: Path, launcher_args: tuple[str, ...] = ()
) -> tuple[list[str], Path, str, list[str]]:
    """Run `script` with fake commands: the data step's arguments and the launch's config dir, name, overrides."""
    result = run_script(script, [*launcher_args, level, "trainer.logger=[console]"], fake_bin, home)
    assert result.returncode == 0, result.stderr
    main_args = (home / "python").read_text().splitlines()
    assert main_args[:2] == ["-m", "verl_mas.main"]
    assert main_args[2] == "--config-path" and main_args[4] == "--config-name"
    return (home / "verl-mas").read_text().splitlines(), Path(main_args[3]), main_args[5], main_args[6:]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_run_script_writes_the_data_then_launches_its_recipe(script, level, fake_bin, tmp_path):
    env = script.parent.name
    data_args, config_dir, config_name, overrides = launch_recorded(script, level, fake_bin, tmp_path)
    data_dir = tmp_path / "data" / "verl_mas" / env / level
    single_agent = "true" if level == "single" else "false"
    assert data_args == ["data", "--env", env, "--out", str(data_dir)] + [
        *("--train", str(200 * 32), "--eval", "100", "--seed", "0"),
        *("--options-from", str(RECIPES / env / f"{env}.yaml"), f"single_agent={single_agent}"),
    ]
    assert config_dir == RECIPES / env and config_name == env
    offload = ["actor_rollout_ref.actor.fsdp_config.optimizer_offload=true"]
    assert overrides == [
        *LEVEL_OVERRIDES[level],
        f"data.train_files={data_dir / 'train.parquet'}",
        f"data.val_files={data_dir / 'eval.parquet'}",
        f"actor_rollout_ref.model.path={MODELS[script.name]}",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        f"actor_rollout_ref.rollout.gpu_memory_utilization={GPU_MEMORY_UTILIZATION[script.name]}",
        "trainer.n_gpus_per_node=8",
        "trainer.nnodes=1",
        f"trainer.experiment_name={env}_qwen3_{SIZES[script.name]}_{level}",
        *(offload if script.name == "run_qwen3_8b.sh" and level == "per_role" else []),
        "trainer.logger=[console]",  # extra arguments reach hydra, last
    ]
    # the wrapper is exactly the launcher given its environment and size
    (tmp_path / "direct").mkdir()
    direct = launch_recorded(LAUNCHER, level, fake_bin, tmp_path / "direct", (env, SIZES[script.name]))
    assert direct == (
        [arg.replace(str(tmp_path), str(tmp_path / "direct")) for arg in data_args],
        config_dir,
        config_name,
        [arg.replace(str(tmp_path), str(tmp_path / "direct")) for arg in overrides],
    )


def test_run_script_reads_n_gpus_model_and_data_dir_from_the_environment(fake_bin, tmp_path):
    extra_env = {"N_GPUS": "4", "MODEL": "/models/qwen3", "DATA_DIR": str(tmp_path / "mine")}
    result = run_script(RECIPES / "sokoban" / "run_qwen3_8b.sh", ["shared"], fake_bin, tmp_path, extra_env)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "verl-mas").read_text().splitlines()[3:5] == ["--out", str(tmp_path / "mine")]
    overrides = (tmp_path / "python").read_text().splitlines()[6:]
    for expected in [
        f"data.train_files={tmp_path / 'mine' / 'train.parquet'}",
        "actor_rollout_ref.model.path=/models/qwen3",
        "trainer.n_gpus_per_node=4",
    ]:
        assert expected in overrides


@pytest.mark.parametrize("env, script_name, level", COMPOSED_CASES)
def test_run_script_launch_composes_checks_and_has_the_reference_settings(env, script_name, level, fake_bin, tmp_path):
    data_args, config_dir, config_name, overrides = launch_recorded(
        RECIPES / env / script_name, level, fake_bin, tmp_path
    )
    assert cli.main([*data_args[:5], "--train", "3", "--eval", "2", *data_args[9:]]) == 0  # the data step, shrunk
    config = composed(config_dir, config_name, overrides)
    mas = check_config(config)  # also: the data's env and options match mas.env and mas.env_options

    assert config.actor_rollout_ref.model.path == MODELS[script_name]
    assert mas.env == env
    assert mas.rollout.k == (4 if env == "sokoban" else 8)
    assert mas.rollout.max_turns == (4 if env == "math" else 5)
    assert mas.rollout.alpha == 1.0 and mas.grouping == "task_role_turn"
    assert config.data.train_batch_size == 32
    assert config.trainer.total_training_steps == 200
    assert config.actor_rollout_ref.actor.optim.lr == 1e-6
    assert config.actor_rollout_ref.actor.clip_ratio == 0.2
    assert config.actor_rollout_ref.actor.use_kl_loss is False and config.algorithm.use_kl_in_reward is False
    assert config.actor_rollout_ref.actor.ppo_epochs == 1
    assert config.data.apply_chat_template_kwargs.enable_thinking is False
    assert config.algorithm.adv_estimator == "at_grpo" and config.trainer.v1.trainer_mode == "sync"
    assert config.trainer.n_gpus_per_node == 8
    assert config.reward.num_workers == 0  # mas_agent's environment scores: no idle reward-loop worker processes
    offloaded = script_name == "run_qwen3_8b.sh" and level == "per_role"
    assert config.actor_rollout_ref.actor.fsdp_config.optimizer_offload is offloaded
    team, alone = TEAMS.get(env, (("tool", "plan"), ("plan",)))
    expected_policies = {"single": ("shared",), "shared": ("shared",), "per_role": team}[level]
    assert mas.roles == (alone if level == "single" else team)
    assert mas.policy_router().policies == expected_policies
    assert mas.gpus_per_policy(8) == {p: 8 // len(expected_policies) for p in expected_policies}
    # verl's dataclass nodes accept everything set in them (the actor is converted by check_config)
    omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    omega_conf_to_dataclass(config.algorithm)
    if env in ("code", "math"):  # the reference evaluates both by sampling 5 answers per problem at temperature 0.6
        val = config.actor_rollout_ref.rollout.val_kwargs
        assert (val.n, val.temperature, val.do_sample) == (5, 0.6, True)
        turns = {"code": 5, "math": 4}[env]
        assert mas.env_options["max_turns"] == mas.rollout.max_turns == turns


UNKNOWN_LEVEL = "unknown level 'per_agent': use single, shared or per_role"


@pytest.mark.parametrize(
    "script, args, message",
    [
        (RECIPES / "sudoku" / "run_qwen3_8b.sh", ["per_agent"], UNKNOWN_LEVEL),
        (LAUNCHER, ["sudoku", "8b", "per_agent"], UNKNOWN_LEVEL),
        (LAUNCHER, ["sudoku", "4b", "shared"], "unknown model size '4b': use 1.7b or 8b"),
        (LAUNCHER, ["chess", "8b", "shared"], "unknown environment 'chess'"),
    ],
    ids=["wrapper-level", "launcher-level", "launcher-size", "launcher-env"],
)
def test_run_script_rejects_an_unknown_level_size_or_environment(script, args, message, fake_bin, tmp_path):
    result = run_script(script, args, fake_bin, tmp_path)
    assert result.returncode == 2
    assert message in result.stderr
    assert not (tmp_path / "verl-mas").exists() and not (tmp_path / "python").exists()


@pytest.mark.parametrize("script", [RECIPES / "plan_path" / "run_qwen3_1.7b.sh", LAUNCHER], ids=lambda p: p.name)
def test_run_script_without_a_level_prints_its_usage(script, fake_bin, tmp_path):
    result = run_script(script, [], fake_bin, tmp_path)
    assert result.returncode != 0
    assert f"usage: {script} " in result.stderr and "single|shared|per_role" in result.stderr
    assert not (tmp_path / "verl-mas").exists() and not (tmp_path / "python").exists()


def test_agent_loop_file_names_the_registered_mas_agent():
    entries = yaml.safe_load(AGENT_LOOPS_FILE.read_text())
    assert [entry["name"] for entry in entries] == ["mas_agent"]
    loop_class = hydra.utils.get_class(entries[0]["_target_"])  # imports the module, which registers the loop
    assert _agent_loop_registry["mas_agent"] == {"_target_": f"{loop_class.__module__}.{loop_class.__qualname__}"}


@pytest.fixture(scope="module")
def sudoku_data(tmp_path_factory) -> dict[str, list[str]]:
    """Sudoku data files written without options and with single_agent=true, as hydra overrides."""
    root = tmp_path_factory.mktemp("data")
    return {
        "plain": write_data(root / "plain", "sudoku", []),
        "single": write_data(root / "single", "sudoku", ["single_agent=true"]),
    }


@pytest.fixture(scope="module")
def base_config(sudoku_data):
    return composed(CONFIG_DIR, "mas_trainer", ["mas.env=sudoku", *sudoku_data["plain"]])


def test_base_config_checks_and_fills_in_the_agent_loop_file(base_config):
    config = copy.deepcopy(base_config)
    assert config.actor_rollout_ref.rollout.agent.agent_loop_config_path is None
    assert check_config(config) == MasConfig(env="sudoku", rollout=RolloutConfig(k=8, max_turns=5))
    assert config.actor_rollout_ref.rollout.agent.agent_loop_config_path == str(AGENT_LOOPS_FILE)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"mas.router": {"tool": "a", "coder": "b"}}, r"^mas\.router: unknown role\(s\) \['coder'\]"),
        ({"mas.rollout.k": 0}, r"^mas\.rollout\.k must be >= 1, got 0"),
        ({"algorithm.adv_estimator": "grpo"}, r"^algorithm\.adv_estimator must be at_grpo"),
        ({"trainer.use_v1": False}, r"^trainer\.use_v1 must be true"),
        ({"trainer.n_gpus_per_node": 7, "mas.router": "per_role"}, r"^mas\.policies\.\*\.n_gpus_per_node: 7 GPU"),
        (
            {"mas.env_options": {"single_agent": True}},
            r"^data\.train_files: .*train\.parquet: row 0 was written with options \{\}",
        ),
        (
            {"mas.env": "sokoban"},
            r"^data\.train_files: .*train\.parquet: row 0 is a 'sudoku' task, but mas\.env is 'sokoban'",
        ),
        (
            {"data.val_files": "/nowhere/eval.parquet"},
            r"^data\.val_files: /nowhere/eval\.parquet: no such dataset file",
        ),
        (
            {"trainer_hooks": {"audit": {"_target_": "verl_mas.verl_engine.hooks.update_record.Auditor", "audit": ""}}},
            r"^trainer_hooks\.audit\._target_: cannot import 'verl_mas\.verl_engine\.hooks\.update_record\.Auditor'",
        ),
    ],
)
def test_check_config_fails_at_start_naming_the_key(base_config, changes, message):
    config = copy.deepcopy(base_config)
    for key, value in changes.items():
        OmegaConf.update(config, key, value, merge=False)
    with pytest.raises(MasConfigError, match=message):
        check_config(config)


def test_check_config_accepts_data_written_with_the_same_options(base_config, sudoku_data):
    config = copy.deepcopy(base_config)
    OmegaConf.update(config, "mas.env_options", {"single_agent": True}, merge=False)
    for key, value in (override.split("=", 1) for override in sudoku_data["single"]):
        OmegaConf.update(config, key, value)
    assert check_config(config).roles == ("plan",)


def test_check_config_leaves_remote_data_files_to_verl(base_config):
    config = copy.deepcopy(base_config)
    OmegaConf.update(config, "data.val_files", ["hdfs://cluster/verl_mas/sudoku/eval.parquet"], merge=False)
    assert check_config(config).env == "sudoku"


def test_train_and_eval_rows_may_play_different_problem_sets_but_nothing_else(tmp_path):
    """Rows may differ from mas.env_options in the env's problem-source options only (train on one file, evaluate
    on another); any other difference (here max_turns) is still refused."""
    problems = tmp_path / "problems.jsonl"
    problems.write_text("".join(f'{{"problem": "What is {n} + {n}?", "answer": "{2 * n}"}}\n' for n in range(12)))
    train = write_data(tmp_path / "train", "math", ["source=basic_arithmetic"])
    evaluation = write_data(tmp_path / "eval", "math", [f"data_file={problems}", "file_split=all"])
    files = [train[0], evaluation[1]]  # the generator's train rows, the file's eval rows
    config = composed(CONFIG_DIR, "mas_trainer", ["mas.env=math", *files])
    assert check_config(config).env == "math"
    other = write_data(tmp_path / "other", "math", [f"data_file={problems}", "file_split=all", "max_turns=2"])
    config = composed(CONFIG_DIR, "mas_trainer", ["mas.env=math", train[0], other[1]])
    with pytest.raises(MasConfigError, match=r"data\.val_files: .* row 0 was written with options"):
        check_config(config)


def test_a_bad_grouping_stops_check_config_and_main_with_the_one_grouping_error(base_config, monkeypatch, capsys):
    monkeypatch.setattr("verl_mas.main.run_ppo", lambda config, task_runner_class: pytest.fail("ray was started"))
    bad = copy.deepcopy(base_config)
    OmegaConf.update(bad, "mas.grouping", "turn")
    with pytest.raises(GroupingError, match=r"^mas\.grouping: unknown grouping 'turn'; use one of "):
        check_config(copy.deepcopy(bad))
    with pytest.raises(SystemExit) as exited:
        main.__wrapped__(bad)
    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith("verl_mas.main: mas.grouping: unknown grouping 'turn'")


def test_main_checks_before_it_hands_the_config_to_ray(base_config, monkeypatch, capsys):
    launched = []
    monkeypatch.setattr("verl_mas.main.run_ppo", lambda config, task_runner_class: launched.append(task_runner_class))
    bad = copy.deepcopy(base_config)
    OmegaConf.update(bad, "mas.router", "per_agent")
    with pytest.raises(SystemExit) as exited:
        main.__wrapped__(bad)
    assert exited.value.code == 2
    # the message alone, naming the key: no traceback
    assert capsys.readouterr().err.startswith("verl_mas.main: mas.router: unknown router 'per_agent'")
    assert launched == []
    main.__wrapped__(copy.deepcopy(base_config))
    assert launched == [MasTaskRunner]
    assert issubclass(MasTaskRunner.__ray_actor_class__, TaskRunnerV1.__ray_actor_class__)


def test_cfg_job_prints_the_composed_recipe_without_ray(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "verl_mas.main", "--config-path", str(RECIPES / "sokoban"), "--config-name", "sokoban"]
        + ["--cfg", "job", "mas.router=per_role", "mas.rollout.alpha=0.5"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    printed = OmegaConf.create(result.stdout[result.stdout.index("actor_rollout_ref:") :])
    assert OmegaConf.to_container(printed.mas) == {
        "env": "sokoban",
        "env_options": {"single_agent": False},
        "router": "per_role",
        "rollout": {"k": 4, "alpha": 0.5, "max_turns": 5, "select": "reward"},
        "grouping": "task_role_turn",
        "policies": {},
        "max_infra_failure_share": 0.1,
        "lora_per_role": False,
        "max_logprob_gap": 0.1,
    }
    assert OmegaConf.to_container(printed.trainer_hooks) == {}
    assert printed.algorithm.adv_estimator == "at_grpo"
    assert not (tmp_path / "outputs").exists()  # --cfg job starts nothing and writes nothing


@pytest.mark.parametrize("env", sorted(p.name for p in RECIPES.iterdir() if (p / f"{p.name}.yaml").exists()))
def test_every_recipe_composes_with_the_cpu_platform(env, tmp_path):
    data = write_data(tmp_path, env, ["--options-from", str(RECIPES / env / f"{env}.yaml"), "single_agent=false"])
    config = composed(RECIPES / env, env, ["+platform=cpu", *data])
    check_config(config)
    model = config.actor_rollout_ref.model
    assert model.override_config.attn_implementation == "sdpa" and model.use_remove_padding is False
    assert config.actor_rollout_ref.actor.strategy == "fsdp2" and config.actor_rollout_ref.ref.strategy == "fsdp2"
    rollout = omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    assert rollout.name == "vllm" and rollout.tensor_model_parallel_size == 1
    assert rollout.free_cache_engine is False and rollout.enable_sleep_mode is False and rollout.enforce_eager
    assert config.transfer_queue.backend.SimpleStorage.num_data_storage_units == 1
    assert config.actor_rollout_ref.rollout.agent.num_workers == 1 and config.reward.num_workers == 0
    assert config.trainer.device == "cpu" and config.trainer.n_gpus_per_node == 1
    assert config.ray_kwargs.ray_init.num_gpus == 1
    assert config.ray_kwargs.ray_init.runtime_env.env_vars.VERL_PLATFORM == "cpu"
    # a recipe's own settings survive the profile (the profile touches no mas: key)
    assert config.mas.env == env and config.data.train_batch_size == 32


def test_gpu_defaults_need_no_flash_attn_and_asking_for_it_without_it_fails_at_start(base_config):
    from verl_mas.main import check_attention, fill_attention

    model = base_config.actor_rollout_ref.model  # left null: chosen at start by what is installed
    assert model.override_config.attn_implementation is None and model.use_remove_padding is None
    without = copy.deepcopy(base_config)
    assert fill_attention(without, flash_attn_installed=False) == "padded"
    check_attention(without, flash_attn_installed=False)
    for key, value in (
        ("actor_rollout_ref.model.override_config.attn_implementation", "flash_attention_2"),
        ("actor_rollout_ref.model.use_remove_padding", True),
    ):
        config = copy.deepcopy(without)
        OmegaConf.update(config, key, value)
        with pytest.raises(MasConfigError, match=rf"^{key}=.* need flash-attn, which is not installed") as refused:
            check_attention(config, flash_attn_installed=False)
        assert FLASH_ATTN_STEPS in str(refused.value)  # the pinned build docs/gpu.md's install block shows
        check_attention(config, flash_attn_installed=True)


def test_an_empty_data_file_fails_at_start(base_config, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from verl_mas.dataset import task_rows

    empty = tmp_path / "empty.parquet"
    pq.write_table(pa.Table.from_pylist(task_rows("sudoku", "train", 1, 0, {})).slice(0, 0), empty)
    config = copy.deepcopy(base_config)
    OmegaConf.update(config, "data.train_files", str(empty))
    with pytest.raises(MasConfigError, match=r"^data\.train_files: .*empty\.parquet: the file holds no rows"):
        check_config(config)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("mas.rollout.k=0", "verl_mas.main: mas.rollout.k must be >= 1, got 0"),
        (
            "+trainer_hooks.check._target_=verl_mas.verl_engine.PhaseCheck",
            "verl_mas.main: trainer_hooks.check._target_: cannot import 'verl_mas.verl_engine.PhaseCheck'",
        ),
    ],
    ids=["bad_mas_key", "bad_trainer_hook_path"],
)
def test_a_bad_key_fails_at_start_in_one_line_naming_it(tmp_path, override, message):
    result = subprocess.run(
        [sys.executable, "-m", "verl_mas.main", override], capture_output=True, text=True, timeout=180, cwd=tmp_path
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "Error executing job" not in result.stderr
    assert message in result.stderr
