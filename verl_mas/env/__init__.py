"""The environment API and registry."""

from verl_mas.env.base import INFRA_FAILURE, Message, MultiAgentEnv, StepResult, Task, Workflow
from verl_mas.env.check import RULES, CheckReport, CheckSettings, EnvCheckError, check_env
from verl_mas.env.registry import ENVS, env_names, get_env_class, make_env, register_env
from verl_mas.env.splits import split_of

__all__ = [
    "ENVS",
    "INFRA_FAILURE",
    "RULES",
    "CheckReport",
    "CheckSettings",
    "EnvCheckError",
    "Message",
    "MultiAgentEnv",
    "StepResult",
    "Task",
    "Workflow",
    "check_env",
    "env_names",
    "get_env_class",
    "make_env",
    "register_env",
    "split_of",
]
