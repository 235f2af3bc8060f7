"""The learning harness's settings: each env's board options and training keys, the methods (arms) a study runs, and
the config every run on an env shares."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from verl_mas.local.arms import Arm
from verl_mas.local.config import LocalTrainConfig
from verl_mas.local.presets import apply_train_overrides, resolve_train_config

# Small boards and compact tool mode (the tool agent proposes moves instead of writing programs); the grid envs also
# drop the rules' prose from their prompts, which tiny models learn from the warm start anyway.
ENV_OPTIONS: dict[str, dict[str, Any]] = {
    "plan_path": {"size": 5, "wall_ratio": 0.2, "tool_mode": "compact", "max_turns": 3, "brief_prompts": True},
    "sokoban": {"size": 5, "boxes": 1, "tool_mode": "compact", "max_turns": 3, "brief_prompts": True},
    "sudoku": {"size": 4, "tool_mode": "compact", "max_turns": 3, "brief_prompts": True},
    # two one-digit terms: the tool agent's program and the reasoner's box must agree
    "math": {
        "brief_prompts": True,
        "source_options": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
        "max_turns": 2,
    },
    # one operation on two integers: the coder's stdin program, the tester's cases; the generated tasks bring their
    # own known-wrong programs, so no mutant needs verifying in the sandbox
    "code": {
        "brief_prompts": True,
        "source_options": {"terms": 1, "variables": 2},
        "max_turns": 2,
        "wrong_programs": 0,
    },
}
# Training keys an env needs under every preset (presets and overrides still apply on top): a 4x4 grid in
# <answer></answer> is 29 tokens with eos, more than the default's 24.
ENV_KEYS: dict[str, dict[str, Any]] = {
    "sudoku": {"sampling": {"max_new_tokens": 32}},
    # a program printing the expression is up to about 30 tokens; the warm start corrupts only the reasoner's played
    # moves, so its data holds second turns where the reasoner copies the tool's printed answer
    "math": {
        "sampling": {"max_new_tokens": 40},
        "warm_start": {"tasks": 1024, "epochs": 8, "corrupt_roles": ["reasoner"]},
    },
    # a two-line stdin program in a fence is about 48 tokens; only the coder's played moves are corrupted
    "code": {
        "sampling": {"max_new_tokens": 72},
        "warm_start": {"tasks": 1024, "epochs": 8, "corrupt_roles": ["coder"]},
    },
}
# Keys each run's config gets from the script (its flags or the method), not from key=value overrides.
SCRIPT_KEYS = ("env", "seed", "steps", "output_dir", "router", "grouping", "rollout_mode", "resume", "preset")


@dataclass(frozen=True)
class Method:
    """One row of the table: which warm start it starts from and the training keys that define it."""

    description: str
    team: bool  # two agents; false: env_options.single_agent=true
    overrides: Mapping[str, Any]
    trains: bool = True  # false: no RL steps, only the evaluation of the warm-started model
    # env options of the RL run only (rewards): the warm start, which never reads a reward, stays the arms' shared one
    env_options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def agents(self) -> str:
        """Which of a seed's warm starts it starts from: the team's or the single agent's."""
        return "team" if self.team else "single"

    @property
    def arm(self) -> Arm:
        """The method as an arm: its run's keys, from its agents' warm start (`start_keys`)."""
        run = {**self.overrides} | ({"env_options": dict(self.env_options)} if self.env_options else {})
        run |= {} if self.trains else {"steps": 0}
        return Arm(run, start=f"warm_start_{self.agents}", start_overrides=start_keys(self.agents))


def start_keys(agents: str) -> dict[str, Any]:
    """The keys of a warm start of the team ("team": every role) or of one agent doing the whole task ("single")."""
    return {"env_options": {"single_agent": agents == "single"}}


# AT-GRPO as the paper runs it, one model shared by both roles: at_grpo_shared, and the arms that change one thing of it
AT_GRPO_SHARED: dict[str, Any] = {"router": "shared", "rollout_mode": "tree", "grouping": "task_role_turn"}

METHODS: dict[str, Method] = {
    "mas_no_rl": Method("two agents, the warm-started model without RL (steps 0)", True, {"router": "shared"}, False),
    "single_grpo": Method(
        "one agent, GRPO: K independent episodes per task, grouped per task",
        False,
        {"router": "shared", "rollout_mode": "independent", "grouping": "task"},
    ),
    "at_grpo_shared": Method(
        "two agents, AT-GRPO tree, groups per (task, role, turn), one model shared by both roles",
        True,
        AT_GRPO_SHARED,
    ),
    "at_grpo_per_role": Method(
        "two agents, AT-GRPO tree, groups per (task, role, turn), one model per role",
        True,
        {"router": "per_role", "rollout_mode": "tree", "grouping": "task_role_turn"},
    ),
    "mas_grpo_task": Method(
        "two agents, AT-GRPO tree, but one group per task, one shared model",
        True,
        {"router": "shared", "rollout_mode": "tree", "grouping": "task"},
    ),
    # the grouping ablation's other arms (research.grouping); not in the paper's table, so not run by default
    "at_grpo_task_role": Method(
        "two agents, AT-GRPO tree, groups per (task, role): per-agent normalisation, one shared model",
        True,
        {"router": "shared", "rollout_mode": "tree", "grouping": "task_role"},
    ),
    "mas_no_tree": Method(
        "two agents, K independent episodes per task (no tree), groups per (task, role, turn) across them, one "
        "shared model",
        True,
        {"router": "shared", "rollout_mode": "independent", "grouping": "task_role_turn"},
    ),
    # at_grpo_shared held near its starting model (the warm start) by verl's KL loss; the coefficient is the
    # command's update.kl_coef (the other methods leave use_kl_loss off, so it changes nothing else)
    "at_grpo_shared_kl": Method(
        "two agents, AT-GRPO tree, groups per (task, role, turn), one shared model, with a KL loss to the warm start "
        "(update.use_kl_loss=true; update.kl_coef from the command)",
        True,
        AT_GRPO_SHARED | {"update": {"use_kl_loss": True}},
    ),
    # the code tester's reward rules (docs/code.md; research.code_tester): at_grpo_shared with one or the other
    "at_grpo_credit_share": Method(
        "two agents, AT-GRPO tree, groups per (task, role, turn), one shared model; the code tester earns the share "
        "of its cases that a correct program passes and some known-wrong program fails (tester_reward=credit_share)",
        True,
        AT_GRPO_SHARED,
        env_options={"tester_reward": "credit_share"},
    ),
    "at_grpo_catch_share": Method(
        "two agents, AT-GRPO tree, groups per (task, role, turn), one shared model; the code tester earns the share "
        "of known-wrong programs its valid cases catch, minus 1 per case a correct program fails, never below -0.25 "
        "(tester_reward=catch_share)",
        True,
        AT_GRPO_SHARED,
        env_options={"tester_reward": "catch_share"},
    ),
    # at_grpo_catch_share with each group's rewards only centred (verl's norm_adv_by_std_in_grpo=false): a group whose
    # rewards differ by little (replies near the tester's floor) then moves the policy by little
    "at_grpo_catch_share_centred": Method(
        "at_grpo_catch_share with advantages centred on the group's mean, not divided by its std "
        "(norm_adv_by_std=false)",
        True,
        AT_GRPO_SHARED | {"norm_adv_by_std": False},
        env_options={"tester_reward": "catch_share"},
    ),
}
# The paper's table: what runs without --methods.
DEFAULT_METHODS = ("mas_no_rl", "single_grpo", "at_grpo_shared", "at_grpo_per_role", "mas_grpo_task")


def env_config(env: str, presets: list[str], overrides: Mapping[str, Any], steps: int | None) -> LocalTrainConfig:
    """The config every run on `env` shares: the script's env options, the presets, the overrides, the step budget."""
    base = dataclasses.replace(LocalTrainConfig(), env=env, env_options=ENV_OPTIONS.get(env, {}))
    base = apply_train_overrides(base, ENV_KEYS.get(env, {}))
    config = resolve_train_config({"preset": presets, **overrides}, base)
    return config if steps is None else apply_train_overrides(config, {"steps": steps})
