"""Tests of the policy router: shared, per role, explicit mappings and their validation."""

from __future__ import annotations

import pytest

from verl_mas.router import PolicyRouter

ROLES = ("tool", "plan", "check")


def test_shared_maps_every_role_to_one_policy():
    router = PolicyRouter.from_spec("shared", ROLES)
    assert router.policies == ("shared",)
    assert [router.policy_of(r) for r in ROLES] == ["shared"] * 3
    assert router.roles_of("shared") == ROLES


def test_per_role_gives_each_role_its_own_policy():
    router = PolicyRouter.from_spec("per_role", ROLES)
    assert router.policies == ROLES
    assert router.policy_of("plan") == "plan"


def test_three_roles_on_two_models():
    router = PolicyRouter.from_spec({"tool": "coder", "plan": "thinker", "check": "coder"}, ROLES)
    assert router.policies == ("coder", "thinker")
    assert router.roles_of("coder") == ("tool", "check")


@pytest.mark.parametrize(
    "spec, policies, message",
    [
        ({"tool": "m", "plan": "m", "check": "m", "judge": "m"}, None, r"unknown role\(s\) \['judge'\]"),
        ({"tool": "m", "plan": "m"}, None, r"role\(s\) \['check'\] have no policy"),
        ({"tool": "m", "plan": "m", "check": ""}, None, r"\['check'\] map to an empty policy"),
        ("shared", ["shared", "spare"], r"\['spare'\] have no role"),
        ("per_role", ["tool", "plan"], r"\['check'\] are used by roles but not declared"),
        ("everyone", None, "unknown spec 'everyone'"),
        (["tool"], None, "must be a string or a mapping"),
    ],
)
def test_validation_errors_name_the_culprit(spec, policies, message):
    with pytest.raises(ValueError, match=message):
        PolicyRouter.from_spec(spec, ROLES, policies)


def test_unknown_role_lookup_names_known_roles():
    router = PolicyRouter.from_spec("shared", ROLES)
    with pytest.raises(KeyError, match="'judge' has no policy"):
        router.policy_of("judge")
