"""What an RBAC ClusterRole grants, as the tests compare it."""

from __future__ import annotations

from typing import Any


def granted(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    """Every (API group, resource, verb) the role's rules grant."""
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
