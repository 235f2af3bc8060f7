"""pyproject.toml ships every package folder and names only modules that exist (a non-editable install has nothing
else: a folder missing from `packages` imports in the checkout and fails after `pip install verl-mas`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
SETUPTOOLS = PROJECT["tool"]["setuptools"]


def package_folders() -> set[str]:
    """Every folder holding an __init__.py, named as it imports (through the package-dir mapping)."""
    found = set()
    for name, folder in SETUPTOOLS["package-dir"].items():
        for init in (REPO / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(REPO / folder).parts
            found.add(".".join((name, *parts)))
    return found


def test_every_package_folder_is_shipped() -> None:
    listed = set(SETUPTOOLS["packages"])
    assert listed == package_folders(), (
        f"missing from packages: {sorted(package_folders() - listed)}; listed but absent: "
        f"{sorted(listed - package_folders())}"
    )


def test_entry_points_name_modules_that_exist() -> None:
    for group in ("verl.plugins", "verl_mas.envs"):
        for name, target in PROJECT["project"]["entry-points"][group].items():
            module = target.split(":")[0]
            assert importlib.util.find_spec(module) is not None, f"entry point {group}/{name} names {module}"
