"""verl plugin entry point: registers the `at_grpo` estimator and the `cpu` platform into verl (kept light).

verl imports this module in every process that imports verl (its `verl.plugins` entry point), and logs a plugin
that raises only at DEBUG: a broken install would then show up much later as an unknown `at_grpo` estimator or an
unknown platform `cpu`. So nothing here raises: each registration that fails is logged at ERROR with its exception,
recorded in `LOAD_ERRORS`, and `registration_problems` / `require_registered` name it again where a command starts.
"""

from __future__ import annotations

import logging
import os
import traceback

from verl_mas import ESTIMATOR, PLATFORM

#: what could not be registered in this process -> the exception that stopped it (`Type: message`, where it rose)
LOAD_ERRORS: dict[str, str] = {}

_logger = logging.getLogger(__name__)


def _register_estimator() -> None:
    from verl.trainer.ppo.core_algos import register_adv_est

    from verl_mas.advantage import compute_at_grpo_advantage

    register_adv_est(ESTIMATOR)(compute_at_grpo_advantage)


def _register_platform() -> None:
    from verl_mas import cpu_platform

    cpu_platform.register()


def _described(error: BaseException) -> str:
    """`Type: message (file:line)` of where `error` rose: enough to find a broken import without the traceback."""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if not frame.filename.startswith("<")]
    where = f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(error).__name__}: {error}{where}"


def register() -> None:
    """Register what this package adds to verl; a piece that fails is logged at ERROR and kept in LOAD_ERRORS."""
    for name, add in ((ESTIMATOR, _register_estimator), (PLATFORM, _register_platform)):
        try:
            add()
        except Exception as error:  # noqa: BLE001  (verl would swallow it at DEBUG: report it here, loudly)
            LOAD_ERRORS[name] = _described(error)
            _logger.error(
                "verl-mas plugin (verl_mas.plugin, pid %d) could not register %s %r into verl: %s; "
                "`verl-mas doctor` checks the install",
                os.getpid(),
                "the estimator" if name == ESTIMATOR else "the platform",
                name,
                LOAD_ERRORS[name],
                exc_info=error,
            )
        else:
            LOAD_ERRORS.pop(name, None)


def registered() -> dict[str, bool]:
    """Whether verl's registries in this process hold verl-mas's `at_grpo` and `cpu` platform (not another's)."""
    found = {ESTIMATOR: False, PLATFORM: False}
    try:
        from verl.trainer.ppo.core_algos import get_adv_estimator_fn

        from verl_mas.advantage import compute_at_grpo_advantage

        found[ESTIMATOR] = get_adv_estimator_fn(ESTIMATOR) is compute_at_grpo_advantage
    except Exception:  # noqa: BLE001  (ValueError when missing; an import error is what LOAD_ERRORS reports)
        pass
    try:
        from verl.plugin.platform import PlatformRegistry

        platform = PlatformRegistry.get(PLATFORM)
        found[PLATFORM] = platform is not None and platform.__module__.startswith("verl_mas.")
    except Exception:  # noqa: BLE001
        pass
    return found


def registration_problems(names: tuple[str, ...] = (ESTIMATOR, PLATFORM)) -> list[str]:
    """One sentence per name in `names` that verl's registries lack in this process, naming why (the import error
    when this plugin failed; else that verl did not load it); [] when everything is registered."""
    found = registered()
    problems = []
    for name in names:
        if found[name]:
            continue
        what = f"the {'estimator' if name == ESTIMATOR else 'platform'} {name!r} is not registered in verl"
        if name in LOAD_ERRORS:
            problems.append(f"{what}: the verl-mas plugin failed to register it: {LOAD_ERRORS[name]}")
        else:
            policy = os.environ.get("VERL_USE_EXTERNAL_PLUGINS", "auto")
            problems.append(
                f"{what}: the verl.plugins entry point verl_mas.plugin did not run (VERL_USE_EXTERNAL_PLUGINS="
                f"{policy!r}; is verl-mas installed in this environment? `pip install -e .`)"
            )
    return problems


def require_registered(names: tuple[str, ...] = (ESTIMATOR, PLATFORM)) -> None:
    """Raise RuntimeError naming every missing registration of `names` and its cause."""
    problems = registration_problems(names)
    if problems:
        raise RuntimeError("; ".join(problems))


register()
