"""Tests of the registries: conflicts rejected, unknown names listed, entry-point failures loud."""

from __future__ import annotations

import sys

import pytest

import verl_mas.env.registry as env_registry
from verl_mas.env import ENVS, MultiAgentEnv, make_env, register_env
from verl_mas.registry import Registry


def test_same_object_twice_is_a_no_op_and_a_different_one_fails():
    reg: Registry[object] = Registry("thing")
    first, second = object(), object()
    reg.add("x", first)
    reg.add("x", first)
    with pytest.raises(ValueError, match="'x' is already registered"):
        reg.add("x", second)
    assert reg.get("x") is first


def test_unknown_name_lists_the_known_ones():
    reg: Registry[int] = Registry("widget")
    reg.add("beta", 2)
    reg.add("alpha", 1)
    with pytest.raises(KeyError, match="unknown widget 'gamma'; known: alpha, beta"):
        reg.get("gamma")


def test_register_env_rejects_non_env_and_second_class():
    with pytest.raises(TypeError):
        register_env("not_an_env")(int)

    class Other(ENVS.get("counter")):
        pass

    with pytest.raises(ValueError, match="already registered"):
        register_env("counter")(Other)


def test_make_env_unknown_name_lists_known_envs():
    with pytest.raises(KeyError, match="known: .*counter"):
        make_env("no_such_env")


def test_make_env_bad_options_name_the_env():
    with pytest.raises(ValueError, match="bad options for environment 'counter'"):
        make_env("counter", no_such_option=1)


class _BrokenEntryPoint:
    name = "broken_env"
    value = "some_pkg.missing:Env"

    def load(self):
        raise ModuleNotFoundError("No module named 'some_pkg'")


def test_entry_point_import_error_is_raised_not_swallowed(monkeypatch):
    # Reference defect 4: registry import errors were swallowed and another env silently used.
    monkeypatch.setattr(env_registry, "_entry_points_loaded", False)
    monkeypatch.setattr(env_registry, "entry_points", lambda group: [_BrokenEntryPoint()])
    with pytest.raises(ImportError, match="'broken_env'.*some_pkg"):
        make_env("broken_env")


def test_entry_point_class_is_registered_under_its_name(monkeypatch):
    class PluginEnv(ENVS.get("counter")):
        pass

    class _EntryPoint:
        name = "from_plugin_pkg"
        value = "user_pkg:PluginEnv"

        def load(self):
            return PluginEnv

    monkeypatch.setattr(env_registry, "_entry_points_loaded", False)
    monkeypatch.setattr(env_registry, "entry_points", lambda group: [_EntryPoint()])
    monkeypatch.setattr(ENVS, "_entries", dict(ENVS._entries))
    env = make_env("from_plugin_pkg")
    assert isinstance(env, PluginEnv) and isinstance(env, MultiAgentEnv)


USER_MODULE = '''
from verl_mas.env import ENVS

Counter = ENVS.get("counter")


class ThreeRoles(Counter):
    """A user's environment no register_env names: the counter with three roles by default."""

    def __init__(self, roles=("x", "y", "z"), **options):
        super().__init__(roles=roles, **options)


NOT_AN_ENV = 3
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """A module only an import path reaches: written to a folder on sys.path, the registry restored afterwards."""
    (tmp_path / "user_envs_for_test.py").write_text(USER_MODULE)
    (tmp_path / "broken_user_envs_for_test.py").write_text('raise RuntimeError("boom")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(ENVS, "_entries", dict(ENVS._entries))
    return "user_envs_for_test"


def test_an_import_path_names_an_environment_no_registry_holds(user_module):
    path = f"{user_module}:ThreeRoles"
    assert path not in ENVS
    env = make_env(path, max_turns=3)
    assert type(env).__name__ == "ThreeRoles" and type(env).__module__ == user_module
    assert env.workflow().roles == ("x", "y", "z") and env.workflow().max_turns == 3  # the user's default and option
    assert ENVS.get(path) is type(env)  # registered under its path: the next lookup imports nothing
    assert make_env(path, roles=("solo",)).workflow().roles == ("solo",)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("user_envs_for_test:Missing", r"module 'user_envs_for_test' has no attribute 'Missing'"),
        ("user_envs_for_test:NOT_AN_ENV", r"user_envs_for_test\.NOT_AN_ENV is 3, not a concrete MultiAgentEnv"),
        ("verl_mas.env:MultiAgentEnv", r"verl_mas\.env\.MultiAgentEnv is .*, not a concrete MultiAgentEnv"),
        ("no_such_user_module:Env", r"cannot import module 'no_such_user_module' \(ModuleNotFoundError"),
        (".user_envs_for_test:ThreeRoles", r"cannot import module '\.user_envs_for_test' \(TypeError"),
        ("broken_user_envs_for_test:Env", r"cannot import module 'broken_user_envs_for_test' \(RuntimeError: boom"),
        (":Env", "an import path is module:Class"),
        ("user_envs_for_test:", "an import path is module:Class"),
    ],
)
def test_a_bad_import_path_is_an_unknown_environment_naming_what_is_wrong(user_module, path, message):
    with pytest.raises(KeyError, match=message):
        make_env(path)
    assert path not in ENVS


@pytest.fixture
def in_a_folder_off_the_import_path(tmp_path, monkeypatch):
    """The current folder is `tmp_path`, which the import path does not hold, as for the `verl-mas` console script;
    the import path, the modules written here and the registry are restored afterwards."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [entry for entry in sys.path if entry not in ("", ".")])
    monkeypatch.setattr(ENVS, "_entries", dict(ENVS._entries))
    yield tmp_path
    for name in [name for name in sys.modules if name.startswith("here_")]:
        del sys.modules[name]


def test_an_import_path_finds_a_module_in_the_current_folder(in_a_folder_off_the_import_path):
    (in_a_folder_off_the_import_path / "here_game.py").write_text(USER_MODULE)
    env = make_env("here_game:ThreeRoles")
    assert env.workflow().roles == ("x", "y", "z")
    assert sys.path[-1] == str(in_a_folder_off_the_import_path)  # appended last: installed modules still come first


def test_a_module_in_the_current_folder_never_shadows_an_installed_one(in_a_folder_off_the_import_path):
    (in_a_folder_off_the_import_path / "yaml.py").write_text(USER_MODULE)
    with pytest.raises(KeyError, match=r"module 'yaml' has no attribute 'ThreeRoles'"):
        make_env("yaml:ThreeRoles")  # PyYAML, installed, is the module found; the folder is not even added
    assert str(in_a_folder_off_the_import_path) not in sys.path


def test_a_module_in_the_current_folder_that_fails_to_import_names_its_own_missing_import(
    in_a_folder_off_the_import_path,
):
    (in_a_folder_off_the_import_path / "here_needs_more.py").write_text("import no_such_dependency_for_test\n")
    with pytest.raises(KeyError, match=r"\(ModuleNotFoundError: No module named 'no_such_dependency_for_test'\)"):
        make_env("here_needs_more:Game")


def test_a_module_found_nowhere_says_where_a_module_of_ones_own_may_be(in_a_folder_off_the_import_path):
    (in_a_folder_off_the_import_path / "elsewhere").mkdir()
    (in_a_folder_off_the_import_path / "elsewhere" / "here_far_away.py").write_text(USER_MODULE)
    with pytest.raises(KeyError) as raised:
        make_env("here_far_away:ThreeRoles")
    assert "No module named 'here_far_away'" in raised.value.args[0]
    assert "installed, in the current folder, or on PYTHONPATH" in raised.value.args[0]
    assert str(in_a_folder_off_the_import_path) not in sys.path
