"""Which rollout backend runs with several policies: vLLM only, the others refused at start naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import verl
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from verl_mas.main import CONFIG_DIR
from verl_mas.verl_engine.config import MasConfig, MasConfigError, check_supported

ROLLOUT = Path(verl.__file__).parent / "workers" / "rollout"


def checked(overrides: list[str]) -> MasConfig:
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        config = compose("mas_trainer", overrides=overrides)
    mas = MasConfig.from_mapping(OmegaConf.to_container(config.mas, resolve=True))
    check_supported(config, mas)
    return mas


SGLANG = "actor_rollout_ref.rollout.name=sglang"


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["mas.router=per_role", SGLANG],
            r"^actor_rollout_ref\.rollout\.name=sglang: not supported with several policies; verl 0\.9\.1 names each "
            r"sglang server sglang_server_<replica>_<node> \(verl/workers/rollout/sglang_rollout/async_sglang_server"
            r"\.py\), the same for every policy",
        ),
        (["mas.router={tool: coder, plan: planner}", SGLANG], r"^actor_rollout_ref\.rollout\.name=sglang: not"),
        (
            ["mas.router=per_role", "actor_rollout_ref.rollout.name=trtllm"],
            r"^actor_rollout_ref\.rollout\.name=trtllm: .* trtllm_server_<replica> ",
        ),
        (
            ["mas.router=per_role", "actor_rollout_ref.rollout.disaggregation.enabled=true"],
            r"^actor_rollout_ref\.rollout\.disaggregation\.enabled=true: not supported with several policies",
        ),
    ],
    ids=["sglang-per_role", "sglang-mapping", "trtllm", "vllm-prefill-decode"],
)
def test_a_backend_without_per_policy_server_names_is_refused_with_several_policies(overrides, message):
    with pytest.raises(MasConfigError, match=message):
        checked(overrides)


@pytest.mark.parametrize(
    "overrides, policies",
    [
        (["mas.router=shared", SGLANG], ("shared",)),
        (["mas.router=per_role", "+mas.env_options.single_agent=true", SGLANG], ("plan",)),  # one role, one policy
        (["mas.router=per_role"], ("tool", "plan")),  # vllm, verl-mas's default
    ],
    ids=["sglang-shared", "sglang-single-agent", "vllm-per_role"],
)
def test_one_policy_runs_any_backend_and_several_run_vllm(overrides, policies):
    assert checked(overrides).policy_router().policies == policies


def test_verl_names_sglang_servers_without_a_hook_and_vllm_servers_with_one():
    """The refusal holds while verl's sglang server and its workers use the fixed name and vLLM's asks the replica
    for a prefix (the hook `PolicyLLMServerManager` overrides); a verl that adds the hook to sglang fails here."""
    sglang = ROLLOUT / "sglang_rollout"
    server = (sglang / "async_sglang_server.py").read_text()
    assert 'name = f"sglang_server_{self.replica_rank}_{node_rank}{self.name_suffix}"' in server
    worker = (sglang / "sglang_rollout.py").read_text()
    assert 'actor_name = f"sglang_server_{self.replica_rank}_{self.node_rank}"' in worker
    assert not [p.name for p in sglang.glob("*.py") if "_get_server_name_prefix" in p.read_text()]
    vllm_server = (ROLLOUT / "vllm_rollout" / "vllm_async_server.py").read_text()
    assert "prefix = self._get_server_name_prefix()" in vllm_server
