"""The policy router: which policy (model or adapter) acts for each role."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

SHARED_POLICY = "shared"


@dataclass(frozen=True)
class PolicyRouter:
    """An immutable role -> policy id mapping, validated against the environment's roles.

    Build it with `PolicyRouter.from_spec`: "shared" (all roles on one model), "per_role" (one model
    per role, named after the role) or an explicit {role: policy} mapping (e.g. three roles on two
    models).
    """

    role_to_policy: tuple[tuple[str, str], ...]

    @classmethod
    def from_spec(
        cls,
        spec: str | Mapping[str, str],
        roles: Iterable[str],
        policies: Iterable[str] | None = None,
    ) -> PolicyRouter:
        """Validate `spec` against `roles` (and, if given, the declared `policies`).

        Raises:
            ValueError: naming the unknown role, the role without a policy, or the policy without a role.
        """
        roles = tuple(roles)
        if not roles:
            raise ValueError("router: the environment has no roles")
        if isinstance(spec, str):
            if spec == "shared":
                mapping = {role: SHARED_POLICY for role in roles}
            elif spec == "per_role":
                mapping = {role: role for role in roles}
            else:
                raise ValueError(
                    f"router: unknown spec {spec!r}; use 'shared', 'per_role' or a {{role: policy}} mapping"
                )
        elif isinstance(spec, Mapping):
            mapping = {str(role): str(policy) for role, policy in spec.items()}
            unknown = [role for role in mapping if role not in roles]
            if unknown:
                raise ValueError(
                    f"router: unknown role(s) {unknown} in mapping; the environment's roles are {list(roles)}"
                )
            missing = [role for role in roles if role not in mapping]
            if missing:
                raise ValueError(f"router: role(s) {missing} have no policy; map every role of {list(roles)}")
            empty = [role for role, policy in mapping.items() if not policy]
            if empty:
                raise ValueError(f"router: role(s) {empty} map to an empty policy id")
        else:
            raise ValueError(f"router: spec must be a string or a mapping, got {type(spec).__name__}")
        if policies is not None:
            declared = list(policies)
            undeclared = sorted({p for p in mapping.values() if p not in declared})
            if undeclared:
                raise ValueError(f"router: policy(ies) {undeclared} are used by roles but not declared in {declared}")
            idle = [p for p in declared if p not in mapping.values()]
            if idle:
                raise ValueError(f"router: policy(ies) {idle} have no role; every declared policy must serve a role")
        return cls(tuple((role, mapping[role]) for role in roles))

    @property
    def roles(self) -> tuple[str, ...]:
        return tuple(role for role, _ in self.role_to_policy)

    @property
    def policies(self) -> tuple[str, ...]:
        """Distinct policy ids in order of first use."""
        return tuple(dict.fromkeys(policy for _, policy in self.role_to_policy))

    def policy_of(self, role: str) -> str:
        for known_role, policy in self.role_to_policy:
            if known_role == role:
                return policy
        raise KeyError(f"router: role {role!r} has no policy; known roles: {list(self.roles)}")

    def roles_of(self, policy: str) -> tuple[str, ...]:
        roles = tuple(role for role, p in self.role_to_policy if p == policy)
        if not roles:
            raise KeyError(f"router: unknown policy {policy!r}; known: {list(self.policies)}")
        return roles
