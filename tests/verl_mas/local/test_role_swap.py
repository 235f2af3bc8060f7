"""The role-swap probe of `verl-mas eval`: `swap_roles` and `serve` serve roles with other trained policies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from verl_mas.cli import main
from verl_mas.local import evaluate as evaluate_module
from verl_mas.local.config import CONFIG_FILE, read_config
from verl_mas.local.evaluate import EVAL_FILE, SWAPPED_EVAL_FILE, EvalConfig, evaluate, serving_router
from verl_mas.local.generator import BatchingGenerator
from verl_mas.local.presets import resolve_train_config
from verl_mas.local.train import find_checkpoint, train
from verl_mas.router import PolicyRouter

ROLES = ("tool", "plan")


@pytest.fixture(scope="module")
def per_role_checkpoint(tmp_path_factory) -> Path:
    """A 2-step `preset=[smoke,per_role]` run's final checkpoint: a tool model and a plan model."""
    out = tmp_path_factory.mktemp("per_role")
    overrides = {"preset": ["smoke", "per_role"], "output_dir": str(out), "checkpoint_every": 2, "progress": False}
    train(resolve_train_config(overrides), log=lambda _: None)
    return find_checkpoint(str(out))


def checkpoint_config(checkpoint: Path):
    return read_config(checkpoint / CONFIG_FILE)


class RecordingGenerator(BatchingGenerator):
    """A BatchingGenerator that records, for every request it serves, the role and the model that answered it."""

    served: list[tuple[str, torch.nn.Module]] = []

    def _serve(self, items) -> None:
        model = self.policies[items[0].request.policy].model
        RecordingGenerator.served.extend((item.request.role, model) for item in items)
        super()._serve(items)


def saved_policy_of(model: torch.nn.Module, checkpoint: Path) -> str:
    """The trained policy whose saved weights `model` holds, compared tensor by tensor with the checkpoint's files."""
    state = model.state_dict()
    matches = []
    for policy in ROLES:
        saved = torch.load(checkpoint / f"model_{policy}.pt", weights_only=True)
        if saved.keys() == state.keys() and all(torch.equal(saved[k], state[k]) for k in saved):
            matches.append(policy)
    assert len(matches) == 1, f"the model holds the weights of {matches}, not of exactly one saved policy"
    return matches[0]


def served_weights(monkeypatch, checkpoint: Path, eval_config: EvalConfig) -> dict[str, set[str]]:
    """Per role, the saved policies whose weights answered its requests in this evaluation."""
    RecordingGenerator.served = []
    monkeypatch.setattr(evaluate_module, "BatchingGenerator", RecordingGenerator)
    evaluate(checkpoint_config(checkpoint), eval_config, checkpoint, log=lambda _: None)
    by_role: dict[str, set[str]] = {}
    for role, model in RecordingGenerator.served:
        by_role.setdefault(role, set()).add(saved_policy_of(model, checkpoint))
    return by_role


def test_the_two_saved_policies_differ(per_role_checkpoint):
    tool, plan = (torch.load(per_role_checkpoint / f"model_{p}.pt", weights_only=True) for p in ROLES)
    assert any(not torch.equal(tool[k], plan[k]) for k in tool)  # else no test below could tell them apart


def test_swapped_evaluation_serves_each_role_with_the_other_roles_weights(per_role_checkpoint, monkeypatch, tmp_path):
    checkpoint = per_role_checkpoint
    as_trained = served_weights(monkeypatch, checkpoint, EvalConfig(json=str(tmp_path / "a.json")))
    swapped = served_weights(monkeypatch, checkpoint, EvalConfig(swap_roles=True, json=str(tmp_path / "b.json")))
    assert as_trained == {"tool": {"tool"}, "plan": {"plan"}}
    assert swapped == {"tool": {"plan"}, "plan": {"tool"}}
    both_plan = EvalConfig(serve={"tool": "plan", "plan": "plan"}, json=str(tmp_path / "c.json"))
    assert served_weights(monkeypatch, checkpoint, both_plan) == {"tool": {"plan"}, "plan": {"plan"}}


def test_the_report_says_which_policy_served_which_role(per_role_checkpoint, tmp_path, capsys):
    checkpoint = per_role_checkpoint
    assert main(["eval", f"checkpoint={checkpoint}", "swap_roles=true", "progress=false"]) == 0
    report = json.loads((checkpoint / SWAPPED_EVAL_FILE).read_text())
    assert report["served_by"] == {"tool": "plan", "plan": "tool"} and report["as_trained"] is False
    assert "roles served by other policies than in training: tool by plan, plan by tool" in capsys.readouterr().out
    assert main(["eval", f"checkpoint={checkpoint}", "progress=false"]) == 0
    report = json.loads((checkpoint / EVAL_FILE).read_text())  # the as-trained report beside the swapped one
    assert report["served_by"] == {"tool": "tool", "plan": "plan"} and report["as_trained"] is True
    assert "other policies" not in capsys.readouterr().out


def test_unswapped_evaluation_is_the_runs_own_final_evaluation(per_role_checkpoint, tmp_path):
    checkpoint = per_role_checkpoint
    config = checkpoint_config(checkpoint)
    report = evaluate(config, EvalConfig(json=str(tmp_path / "a.json")), checkpoint, log=lambda _: None)
    final = [json.loads(line) for line in (checkpoint.parent.parent / "metrics.jsonl").read_text().splitlines()][-1]
    assert report.success == {"plan_path": final["eval/success"]}
    assert report.metrics == {key: value for key, value in final.items() if key.startswith("eval/")}
    # Naming every role's own policy is the same evaluation.
    named = EvalConfig(serve={"plan": "plan", "tool": "tool"}, json=str(tmp_path / "b.json"))
    same = evaluate(config, named, checkpoint, log=lambda _: None)
    assert same == report
    assert json.loads((tmp_path / "a.json").read_text()) == json.loads((tmp_path / "b.json").read_text())


@pytest.mark.parametrize(
    "args, message",
    [
        (["serve.tool=plan"], "serve: role(s) ['plan'] unserved; name a policy for every role of ['tool', 'plan']"),
        (["serve.judge=plan", "serve.tool=plan", "serve.plan=tool"], "serve.judge: no such role"),
        (["serve.tool=critic", "serve.plan=tool"], "serve.tool: no policy 'critic' was trained"),
        (["serve.tool=3", "serve.plan=tool"], "serve.tool must name a policy, got 3"),
        (["serve=plan"], "serve must be a {role: policy} mapping"),
        (["swap_roles=true", "serve.tool=plan", "serve.plan=tool"], "swap_roles and serve: give one"),
        (["swap_roles=maybe"], "config key 'swap_roles' expects true/false, got 'maybe'"),
    ],
)
def test_hostile_options_on_a_per_role_checkpoint_fail_naming_the_key(per_role_checkpoint, args, message, capsys):
    before = sorted(per_role_checkpoint.iterdir())
    assert main(["eval", f"checkpoint={per_role_checkpoint}", *args]) == 2
    assert message in capsys.readouterr().err
    assert sorted(per_role_checkpoint.iterdir()) == before  # no report written


def test_a_swap_of_one_shared_policy_fails_before_anything_is_built(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(evaluate_module, "LocalRun", None)  # building a run would fail with a TypeError
    assert main(["eval", "preset=smoke", "swap_roles=true", f"output_dir={tmp_path}"]) == 2
    assert "swap_roles: every role is served by the one policy 'shared'; a swap changes nothing" in (
        capsys.readouterr().err
    )
    assert main(["eval", "preset=smoke", "serve.tool=shared", "serve.plan=shared", f"output_dir={tmp_path}"]) == 2
    assert "serve: every role is served by the one policy 'shared'" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def router(mapping: dict[str, str]) -> PolicyRouter:
    return PolicyRouter.from_spec(mapping, mapping)


def test_swap_roles_exchanges_two_named_policies_whatever_their_names():
    trained = router({"tool": "small", "plan": "large"})
    assert serving_router(trained, EvalConfig(swap_roles=True)) == router({"tool": "large", "plan": "small"})
    assert serving_router(trained, EvalConfig()) is trained


def test_swap_roles_refuses_three_roles_on_two_policies_and_points_to_serve():
    trained = router({"tool": "a", "plan": "b", "critic": "b"})
    with pytest.raises(
        ValueError,
        match=r"swap_roles exchanges two roles on two policies; this run serves "
        r"\{tool: a, plan: b, critic: b\}: name each role's policy with serve",
    ):
        serving_router(trained, EvalConfig(swap_roles=True))
    served = serving_router(trained, EvalConfig(serve={"tool": "b", "plan": "a", "critic": "a"}))
    assert served.role_to_policy == (("tool", "b"), ("plan", "a"), ("critic", "a"))


def test_eval_help_documents_both_options(capsys):
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    out = capsys.readouterr().out
    assert "  swap_roles   true: serve each of two roles with the other role's trained policy" in out
    assert "  serve        {role: policy}: which trained policy serves each role" in out
