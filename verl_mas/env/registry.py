"""The environment registry: the `register_env` decorator and the `verl_mas.envs` entry points."""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any, TypeVar

from verl_mas.env.base import MultiAgentEnv
from verl_mas.registry import Registry

ENTRY_POINT_GROUP = "verl_mas.envs"
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
    if name not in ENVS:
        load_entry_point_envs()
    return ENVS.get(name)


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
