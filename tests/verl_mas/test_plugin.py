"""Tests that installing the package registers at_grpo into verl in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

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
        "verl_mas.plugin",
        "verl_mas.verl_engine",
        "verl_mas.verl_engine.cpu",
    ]
