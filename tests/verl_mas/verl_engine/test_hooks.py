"""Trainer hooks: `trainer_hooks:` entries built in order with their options, bad entries refused naming the key,
the command-line overrides that switch one on, the paths each hook declares it writes, and the phase check's choice
of the step it checks."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from verl_mas.main import CONFIG_DIR
from verl_mas.verl_engine.config import MasConfigError
from verl_mas.verl_engine.hooks import EVENTS, TrainerHook, WrittenPath, hook_overrides, load_trainer_hooks
from verl_mas.verl_engine.hooks.phase_check import PhaseCheck
from verl_mas.verl_engine.hooks.update_record import UpdateRecorder

RECORDER = "verl_mas.verl_engine.hooks.update_record.UpdateRecorder"
PHASE_CHECK = "verl_mas.verl_engine.hooks.phase_check.PhaseCheck"


def hooks_of(entries) -> dict[str, TrainerHook]:
    return load_trainer_hooks(OmegaConf.create({"mas": {"env": "counter"}, "trainer_hooks": entries}))


def test_entries_are_built_in_order_with_their_options():
    hooks = hooks_of(
        {
            "check": {"_target_": PHASE_CHECK, "folder": "/tmp/check"},
            "audit": {"_target_": RECORDER, "audit": "/tmp/a.jsonl"},
        }
    )
    assert [(name, type(hook)) for name, hook in hooks.items()] == [("check", PhaseCheck), ("audit", UpdateRecorder)]
    assert hooks["check"].folder == Path("/tmp/check")
    assert (hooks["audit"].audit, hooks["audit"].capture) == ("/tmp/a.jsonl", None)
    assert hooks_of({}) == {} and hooks_of(None) == {}
    assert load_trainer_hooks(OmegaConf.create({"mas": {"env": "counter"}})) == {}


def test_each_hook_declares_the_paths_it_writes_as_given():
    assert TrainerHook().written_paths() == []  # a hook that writes nothing, as the base class
    assert UpdateRecorder(audit="runs/a.jsonl").written_paths() == [WrittenPath("audit", "runs/a.jsonl", is_file=True)]
    assert UpdateRecorder(capture="~/cap").written_paths() == [WrittenPath("capture", "~/cap", is_file=False)]
    both = UpdateRecorder(audit="/r/a.jsonl", capture="/r/cap").written_paths()
    assert both == [WrittenPath("audit", "/r/a.jsonl", is_file=True), WrittenPath("capture", "/r/cap", is_file=False)]
    # relative as given (the shared-folder check refuses it on several nodes), though the hook writes it resolved
    check = PhaseCheck("check")
    assert check.written_paths() == [WrittenPath("folder", "check", is_file=False)]
    assert check.folder == Path.cwd() / "check"


def test_the_base_hook_has_every_event_and_does_nothing():
    hook, trainer = TrainerHook(), SimpleNamespace()
    assert all(getattr(hook, event)(trainer, {}) is None for event in EVENTS)


@pytest.mark.parametrize(
    "entries, message",
    [
        (["audit"], r"^trainer_hooks must be a mapping of name -> \{_target_: module\.Class"),
        ({"audit": RECORDER}, r"^trainer_hooks\.audit must be a mapping with _target_"),
        ({"audit": {"audit": "/tmp/a"}}, r"^trainer_hooks\.audit must be a mapping with _target_"),
        ({"audit": {"_target_": 3}}, r"^trainer_hooks\.audit must be a mapping with _target_"),
        (
            {"audit": {"_target_": "verl_mas.nowhere.UpdateRecorder"}},
            r"^trainer_hooks\.audit\._target_: cannot import 'verl_mas\.nowhere\.UpdateRecorder': No module named",
        ),
        (
            {"audit": {"_target_": "verl_mas.verl_engine.hooks.update_record.UpdateRecord"}},
            r"^trainer_hooks\.audit\._target_: cannot import '.*hooks\.update_record\.UpdateRecord'",
        ),
        ({"audit": {"_target_": "UpdateRecorder"}}, r"^trainer_hooks\.audit\._target_: 'UpdateRecorder' is not a"),
        (
            {"audit": {"_target_": "verl_mas.verl_engine.hooks.update_record.fetch_update_batch"}},
            r"^trainer_hooks\.audit\._target_: '.*fetch_update_batch' is not a TrainerHook subclass",
        ),
        (
            {"audit": {"_target_": "verl_mas.verl_engine.config.MasConfig"}},
            r"^trainer_hooks\.audit\._target_: '.*MasConfig' is not a TrainerHook subclass",
        ),
        (
            {"audit": {"_target_": RECORDER, "path": "/tmp/a"}},
            r"^trainer_hooks\.audit: UpdateRecorder\(\{'path': '/tmp/a'\}\) failed: .*unexpected keyword .*'path'",
        ),
        ({"audit": {"_target_": RECORDER}}, r"^trainer_hooks\.audit: UpdateRecorder\(\{\}\) failed: set audit"),
        (
            {"audit": {"_target_": RECORDER, "audit": 7}},
            r"^trainer_hooks\.audit: .* failed: audit must be a path or null, got 7",
        ),
        (
            {"check": {"_target_": PHASE_CHECK, "folder": ""}},
            r"^trainer_hooks\.check: PhaseCheck\(\{'folder': ''\}\) failed: folder must be a path, got ''",
        ),
    ],
)
def test_a_bad_entry_fails_naming_its_key(entries, message):
    with pytest.raises(MasConfigError, match=message):
        hooks_of(entries)


def test_hook_overrides_switch_a_hook_on_from_the_command_line(tmp_path):
    audit, capture = tmp_path / "run one" / "audit.jsonl", tmp_path / "capture"
    overrides = [
        *hook_overrides("record", UpdateRecorder, audit=audit),
        f"+trainer_hooks.record.capture={capture}",
        *hook_overrides("check", PhaseCheck, folder=tmp_path / "check"),
    ]
    assert overrides[0] == f"+trainer_hooks.record._target_={RECORDER}"
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        config = compose("mas_trainer", overrides=overrides)
    record, check = load_trainer_hooks(config).values()
    assert (record.audit, record.capture) == (str(audit), str(capture))
    assert check.folder == tmp_path / "check"


class Recorded(PhaseCheck):
    """A phase check whose file and worker work is only written down, to follow which step it checks."""

    def __init__(self):
        super().__init__("/tmp/unused")
        self.calls: list[tuple] = []

    def _keep_old_log_probs(self, parts, mode):
        self.calls.append(("keep", mode))

    def _checkpoints(self, trainer, name, *, save):
        self.calls.append(("save" if save else "load", name))

    def _write_summary(self, step, policies):
        self.calls.append(("summary", step, tuple(policies)))


def phase_check_trainer(policies: tuple[str, ...], calls: list[tuple]) -> SimpleNamespace:
    return SimpleNamespace(
        policies=dict.fromkeys(policies),
        global_steps=0,
        compute_old_log_probs=lambda parts, metrics, *, sequential: calls.append(("old", sequential, metrics)),
        update_actors=lambda parts, metrics, *, sequential: calls.append(("update", sequential, metrics)),
    )


def run_step(hook: TrainerHook, trainer, step: int, parts: dict, *, update: bool = True) -> None:
    trainer.global_steps = step
    for event in EVENTS if update else EVENTS[:2]:
        getattr(hook, event)(trainer, parts)


def test_the_phase_check_checks_the_first_step_a_launch_trains_and_no_other():
    hook = Recorded()
    trainer = phase_check_trainer(("tool", "plan"), hook.calls)
    parts = {"tool": None, "plan": None}
    run_step(hook, trainer, 5, parts)
    assert hook.calls == [
        ("old", True, {}),  # the sequential reference, its metrics dropped
        ("keep", "sequential"),
        ("keep", "concurrent"),  # after the trainer's own (concurrent) old log-probs
        ("save", "before"),
        ("update", True, {}),
        ("save", "sequential"),
        ("load", "before"),  # training goes on from the concurrent update, from the same state
        ("save", "concurrent"),
        ("summary", 5, ("tool", "plan")),
    ]
    hook.calls.clear()
    run_step(hook, trainer, 6, parts)
    assert hook.calls == []


def test_the_phase_check_ends_with_a_step_that_does_not_update_and_skips_one_policy():
    hook = Recorded()
    trainer = phase_check_trainer(("tool", "plan"), hook.calls)
    run_step(hook, trainer, 1, {"tool": None, "plan": None}, update=False)
    assert [call[0] for call in hook.calls] == ["old", "keep", "keep"]
    hook.calls.clear()
    run_step(hook, trainer, 2, {"tool": None, "plan": None})
    assert hook.calls == []
    single = Recorded()
    run_step(single, phase_check_trainer(("shared",), single.calls), 1, {"shared": None})
    assert single.calls == []
