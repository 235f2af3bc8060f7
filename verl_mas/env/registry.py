"""The environment registry: the `register_env` decorator, the `verl_mas.envs` entry points and `module:Class`
import paths."""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, TypeVar

from verl_mas.env.base import MultiAgentEnv
from verl_mas.registry import Registry

ENTRY_POINT_GROUP = "verl_mas.envs"
IMPORT_PATH_SEPARATOR = ":"  # `my_pkg.my_game:MyGame`: an environment named by where its class lives
ENVS: Registry[type[MultiAgentEnv]] = Registry("environment")
_entry_points_loaded = False

E = TypeVar("E", bound=type[MultiAgentEnv])


def register_env(name: str) -> Callable[[E], E]:
    """Class decorator: register a `MultiAgentEnv` subclass under `name`."""

    def decorator(cls: E) -> E:
        if not (isinstance(cls, type) and issubclass(cls, MultiAgentEnv)):
            raise TypeError(f"register_env({name!r}) expects a MultiAgentEnv subclass, got {cls!r}")
        ENVS.add(name, cls)
        cls.name = name
        return cls

    return decorator


def load_entry_point_envs() -> None:
    """Import every module advertised under the `verl_mas.envs` entry-point group, once.

    An entry point that fails to import is an error naming it: a silently missing environment
    would let training fall back to something else.
    """
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded = ep.load()
        except Exception as exc:
            raise ImportError(f"environment entry point {ep.name!r} ({ep.value}) failed to load: {exc}") from exc
        if isinstance(loaded, type) and issubclass(loaded, MultiAgentEnv) and ep.name not in ENVS:
            register_env(ep.name)(loaded)
    _entry_points_loaded = True


def get_env_class(name: str) -> type[MultiAgentEnv]:
    """The class registered as `name`, found among the entry points on first use; or, for an import path
    `module:Class`, that class, imported and registered under the path (in every process that asks: Ray's workers
    too, which import the module from the driver's working directory or PYTHONPATH).

    Raises:
        KeyError: an unknown name, or an import path that does not lead to a `MultiAgentEnv` subclass.
    """
    if name not in ENVS:
        if IMPORT_PATH_SEPARATOR in name:
            return ENVS.add(name, _imported_env(name))
        load_entry_point_envs()
    return ENVS.get(name)


def _imported_env(path: str) -> type[MultiAgentEnv]:
    module_name, _, class_name = path.partition(IMPORT_PATH_SEPARATOR)
    if not module_name or not class_name:
        raise KeyError(f"environment {path!r}: an import path is module:Class")
    try:
        module = _import_from_here_too(module_name)
    except Exception as exc:  # noqa: BLE001  (a missing module, a relative name, the module's own error: all named)
        failure = f"{type(exc).__name__}: {exc}"
        raise KeyError(
            f"environment {path!r}: cannot import module {module_name!r} ({failure}); a module of your own must be "
            "installed, in the current folder, or on PYTHONPATH (e.g. PYTHONPATH=/its/folder)"
        ) from None
    if not hasattr(module, class_name):
        raise KeyError(f"environment {path!r}: module {module_name!r} has no attribute {class_name!r}")
    cls = getattr(module, class_name)
    if not (isinstance(cls, type) and issubclass(cls, MultiAgentEnv)) or inspect.isabstract(cls):
        raise KeyError(f"environment {path!r}: {module_name}.{class_name} is {cls!r}, not a concrete MultiAgentEnv")
    return cls


def _import_from_here_too(module_name: str) -> Any:
    """The module, found on the import path or else in the current folder.

    `python -m verl_mas.main` and Ray's workers search the current folder, but a console script such as `verl-mas`
    does not. So a module that lies in the current folder is imported from there, the folder appended to the import
    path (last: it never shadows an installed module)."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        top = module_name.split(".")[0]
        here = Path.cwd()
        searched = {Path(entry or ".").resolve() for entry in sys.path}
        if exc.name != top or here in searched or not ((here / f"{top}.py").is_file() or (here / top).is_dir()):
            raise
        sys.path.append(str(here))
        return importlib.import_module(module_name)


def make_env(name: str, **options: Any) -> MultiAgentEnv:
    """Instantiate the environment registered as `name` with its constructor options."""
    cls = get_env_class(name)
    try:
        return cls(**options)
    except TypeError as exc:
        raise ValueError(f"bad options for environment {name!r}: {exc}") from exc


def env_names() -> list[str]:
    load_entry_point_envs()
    return ENVS.names()
