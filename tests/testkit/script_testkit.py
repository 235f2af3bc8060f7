"""A script of benchmarks/ or experiments/ loaded as a module, for the tests of its functions."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def loaded_script(relative_path: str, name: str) -> Iterator[ModuleType]:
    """The script at REPO/`relative_path`, imported as module `name`. While in use the module is in `sys.modules`
    (its dataclasses look their module up there) and the script's folder is on `sys.path` (for its siblings)."""
    script = REPO / relative_path
    spec = importlib.util.spec_from_file_location(name, script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(script.parent))
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(script.parent))
        del sys.modules[name]
