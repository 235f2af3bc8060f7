"""A broken install, on purpose, in a child interpreter: the environment for `subprocess.run` that makes named modules
fail to import (as a missing extra does), or has another plugin take the name `at_grpo` first.

The child gets a `sitecustomize.py` (Python imports it at start) from a folder put first on PYTHONPATH; nothing in
this process changes.
"""

from __future__ import annotations

import os
from pathlib import Path

MISSING = "simulated_missing_extra"  # the module the broken imports say is missing

SITECUSTOMIZE = '''
import importlib.abc, importlib.util, os, sys

MISSING = "simulated_missing_extra"
BROKEN = set(filter(None, os.environ.get("VERL_MAS_TEST_BROKEN_MODULES", "").split(",")))
CLASH = os.environ.get("VERL_MAS_TEST_AT_GRPO_CLASH") == "1"


class Broken(importlib.abc.MetaPathFinder):
    """`import X` for X in BROKEN fails as an import of a missing dependency would."""

    def find_spec(self, name, path=None, target=None):
        if name in BROKEN:
            raise ModuleNotFoundError(f"No module named {MISSING!r}", name=MISSING)
        return None


class Clash(importlib.abc.MetaPathFinder):
    """Another plugin's `at_grpo` is in verl's registry as soon as verl's core_algos is."""

    def find_spec(self, name, path=None, target=None):
        if name != "verl.trainer.ppo.core_algos":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)

            def other_at_grpo(*args, **kwargs):
                raise AssertionError("another plugin's at_grpo ran")

            module.ADV_ESTIMATOR_REGISTRY["at_grpo"] = other_at_grpo

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, Broken())
if CLASH:
    sys.meta_path.insert(0, Clash())
'''


def broken_env(folder: Path, modules: tuple[str, ...] = (), clash: bool = False) -> dict[str, str]:
    """os.environ for a child in which `modules` fail to import and, with `clash`, `at_grpo` is taken."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    path = os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH", "")]))
    env = {k: v for k, v in os.environ.items() if k not in ("VERL_USE_EXTERNAL_PLUGINS", "VERL_PLATFORM")}
    return env | {
        "PYTHONPATH": path,
        "VERL_MAS_TEST_BROKEN_MODULES": ",".join(modules),
        "VERL_MAS_TEST_AT_GRPO_CLASH": "1" if clash else "0",
    }
