"""Trainer hooks: the extension point (`base`) and the hooks that check the engine (`update_record`, `phase_check`)."""

from verl_mas.verl_engine.hooks.base import (
    EVENTS,
    HOOKS_KEY,
    TARGET_KEY,
    HookedTrainer,
    TrainerHook,
    WrittenPath,
    hook_overrides,
    load_trainer_hooks,
)

__all__ = [
    "EVENTS",
    "HOOKS_KEY",
    "TARGET_KEY",
    "HookedTrainer",
    "TrainerHook",
    "WrittenPath",
    "hook_overrides",
    "load_trainer_hooks",
]
