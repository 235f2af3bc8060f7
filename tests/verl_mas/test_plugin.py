"""Tests that installing the package registers at_grpo into verl in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from broken_install import MISSING, broken_env

PROBE = """
import sys
import verl
from verl.trainer.ppo.core_algos import get_adv_estimator_fn
try:
    fn = get_adv_estimator_fn("at_grpo")
except ValueError:
    print("MISSING")
    sys.exit(0)
from verl_mas.advantage import compute_at_grpo_advantage
print("OURS" if fn is compute_at_grpo_advantage else "OTHER")
"""


def run_probe(extra_env: dict[str, str]) -> str:
    env = {k: v for k, v in os.environ.items() if k != "VERL_USE_EXTERNAL_PLUGINS"} | extra_env
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


def test_bare_import_verl_registers_at_grpo():
    assert run_probe({}) == "OURS"


def test_plugins_off_leaves_at_grpo_out():
    assert run_probe({"VERL_USE_EXTERNAL_PLUGINS": "none"}) == "MISSING"


def test_entry_point_module_imports_nothing_heavy():
    # The plugin runs in every Ray actor: beyond verl's own core_algos it may add only the estimator, the CPU
    # platform's registration and standard-library modules (no pandas, Ray, vLLM, transformers, environments).
    code = (
        "import sys, json, verl.trainer.ppo.core_algos; before = set(sys.modules); import verl_mas.plugin; "
        "print(json.dumps(sorted(set(sys.modules) - before)))"
    )
    env = os.environ | {"VERL_USE_EXTERNAL_PLUGINS": "none", "VERL_PLATFORM": ""}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    added = json.loads(done.stdout.strip().splitlines()[-1])
    outside_stdlib = sorted(name for name in added if name.split(".")[0] not in sys.stdlib_module_names)
    assert outside_stdlib == [
        "verl_mas",
        "verl_mas.advantage",
        "verl_mas.cpu_platform",
        "verl_mas.plugin",
    ]


# A broken install, on purpose (tests/testkit/broken_install.py): verl swallows a plugin's exception at DEBUG, so the
# plugin must say itself, at ERROR, what failed to import; and each command must refuse to start naming it.


def test_a_plugin_that_fails_to_import_says_so_at_error_and_registers_the_rest(tmp_path):
    code = (
        "import verl\n"
        "from verl.plugin.platform import PlatformRegistry\n"
        "from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY\n"
        "print('at_grpo' in ADV_ESTIMATOR_REGISTRY, PlatformRegistry.get('cpu') is not None)\n"
    )
    env = broken_env(tmp_path / "site", modules=("verl_mas.advantage",))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]  # a broken plugin never breaks `import verl`
    assert done.stdout.strip().splitlines()[-1] == "False True"  # the cpu platform registered all the same
    [line] = [line for line in done.stderr.splitlines() if "verl-mas plugin" in line]
    assert line.startswith("ERROR")
    assert "could not register the estimator 'at_grpo' into verl: ModuleNotFoundError: " in line
    assert f"No module named '{MISSING}'" in line


def test_main_refuses_to_start_naming_what_the_plugin_failed_to_import(tmp_path):
    env = broken_env(tmp_path / "site", modules=("verl_mas.cpu_platform",), clash=True)
    command = [sys.executable, "-m", "verl_mas.main", "mas.env=sudoku", "trainer.device=cpu"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "verl_mas.main: the estimator 'at_grpo' is not registered in verl: the verl-mas plugin failed to register "
        "it: ValueError: Adv estimator at_grpo has already been registered"
    )
    assert (
        "; the platform 'cpu' is not registered in verl: the verl-mas plugin failed to register it: "
        f"ModuleNotFoundError: No module named '{MISSING}'" in last
    )
    assert "Traceback" not in done.stderr.split("verl_mas.main:")[-1]


def test_the_local_engine_refuses_to_start_without_its_estimator(tmp_path):
    env = broken_env(tmp_path / "site", clash=True)
    tiny = ["steps=1", "eval_tasks=2", "eval_samples=0", "warm_start.tasks=4", "warm_start.epochs=1", "model.layers=1"]
    command = [str(Path(sys.executable).parent / "verl-mas"), "train", f"output_dir={tmp_path / 'run'}", *tiny]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "verl-mas train: error: the estimator 'at_grpo' is not registered in verl: the verl-mas plugin failed to "
        "register it: ValueError: Adv estimator at_grpo has already been registered"
    )
    assert not (tmp_path / "run").exists()  # refused before anything was built or written


def test_registration_problems_name_a_plugin_that_did_not_run(monkeypatch):
    from verl_mas import plugin

    monkeypatch.setattr(plugin, "registered", lambda: {"at_grpo": False, "cpu": True})
    monkeypatch.setenv("VERL_USE_EXTERNAL_PLUGINS", "none")
    assert plugin.registration_problems() == [
        "the estimator 'at_grpo' is not registered in verl: the verl.plugins entry point verl_mas.plugin did not run "
        "(VERL_USE_EXTERNAL_PLUGINS='none'; is verl-mas installed in this environment? `pip install -e .`)"
    ]
    monkeypatch.setattr(plugin, "LOAD_ERRORS", {"at_grpo": "ImportError: no"})
    with pytest.raises(RuntimeError, match=r"failed to register it: ImportError: no$"):
        plugin.require_registered(("at_grpo",))
    plugin.require_registered(("cpu",))
