"""Test kit: the commands the docs show (`python -m verl_mas.main`, `verl-mas`, `bash recipes/...`, `pip install`,
and inline hydra overrides), found by file and line, and each one checked as far as it runs without Ray."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import os
import pickle
import re
import shlex
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.hydra import Hydra
from hydra._internal.utils import create_automatic_config_search_path, get_args_parser
from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict

import verl_mas.main
from verl_mas import cli
from verl_mas.dataset import write_dataset
from verl_mas.verl_engine.config import MasConfig, MasConfigError

PYTHONS = ("python", "python3")
# what `python -m verl_mas.main` composes when no --config-path/--config-name is given (its @hydra.main)
MAIN_CONFIG_PATH = "config"
MAIN_CONFIG_NAME = "mas_trainer"
# A token with one of these is part of a usage line (`1.7b|8b`, `<env>`, `run_qwen3_*.sh`), not of a command.
USAGE_MARKS = ("|", "<", ">", "*")
ELLIPSIS = "..."  # "and more overrides" as a token; "not shown" as a value (data files are then written here)
SHRUNK_COUNTS = {"--train": 1, "--eval": 1}  # `verl-mas data` writes this many rows per split here, at most
OVERRIDE = re.compile(r"^(\+{1,2}|~)?([A-Za-z_][\w-]*)(\.[\w-]+)*=(?!=)")
# An override in prose is checked when it is verl's or verl-mas's config for sure: a dotted key or a leading +
# (`single_agent=true` alone may be an environment option, `role=` a name in a sentence).
CONFIG_OVERRIDE = re.compile(r"^(\+{1,2}|~)?[A-Za-z_][\w-]*(\.[\w-]+)+=(?!=)|^\+")
PLACEHOLDER_WORD = re.compile(r"^[A-Z][A-Z_]*$")  # LEVEL, NAME: a usage line's argument, not a value
INLINE_CODE = re.compile(r"`([^`]+)`")
FENCE = re.compile(r"^\s*```")
SHOWN_FILE = re.compile(r"^# (\w[\w.-]*\.(?:yaml|yml|py))$")  # a code block's first line naming the file it shows
RECORDER = '#!/bin/sh\nprintf "%s\\n" "$@" > "$RECORD_DIR/$(basename "$0")"\n'


@dataclass(frozen=True)
class DocCommand:
    """One command a doc shows: where it starts, what kind it is and its words as the shell would split them."""

    path: Path
    line: int
    kind: str  # main | cli | script | pip | overrides
    words: tuple[str, ...]
    text: str

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def kind_of(words: list[str]) -> str | None:
    """The command kind of `words` (shell words, variable assignments in front removed), or None."""
    if not words:
        return None
    if tuple(words[:3]) in {(python, "-m", "verl_mas.main") for python in PYTHONS}:
        return "main"
    if words[0] == "verl-mas":
        return "cli"
    if words[0] in ("pip", "pip3") or tuple(words[1:3]) == ("-m", "pip"):
        return "pip"
    if words[0] == "bash" and len(words) > 1 and words[1].startswith("recipes/") and words[1].endswith(".sh"):
        return "script"
    if all(OVERRIDE.match(word) for word in words) and any(CONFIG_OVERRIDE.match(word) for word in words):
        return "overrides"
    return None


def _command(path: Path, line: int, text: str, inline: bool) -> DocCommand | None:
    try:
        words = shlex.split(text, comments=True)
    except ValueError:  # not shell (an unbalanced quote in prose)
        return None
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        words = words[1:]
    kind = kind_of(words)
    if kind is None or (kind == "overrides" and not inline):
        return None
    if any(mark in word for word in words for mark in USAGE_MARKS) or any(map(PLACEHOLDER_WORD.match, words)):
        return None
    return DocCommand(path, line, kind, tuple(words), " ".join(text.split()))


def extract(path: Path, root: Path) -> list[DocCommand]:
    """The commands in `path` (shown relative to `root`), in file order.

    Markdown: every code-block line (fenced, or indented by 4 spaces) that starts a command, joined with its `\\`
    continuation lines, and every inline code span that is a command or a list of hydra overrides. Shell and yaml
    files: the inline code spans of their comments.
    """
    shown = path.relative_to(root) if path.is_relative_to(root) else path
    lines = path.read_text(encoding="utf-8").splitlines()
    commands: list[DocCommand] = []
    prose: list[tuple[int, str]] = []  # (line number, text) outside code blocks: where inline spans are
    if path.suffix == ".md":
        in_fence = False
        number = 0
        while number < len(lines):
            text = lines[number]
            if FENCE.match(text):
                in_fence = not in_fence
                number += 1
                continue
            if in_fence or text.startswith("    "):
                start = number
                while text.rstrip().endswith("\\") and number + 1 < len(lines):
                    number += 1
                    text = text.rstrip()[:-1] + " " + lines[number]
                found = _command(shown, start + 1, text, inline=False)
                if found is not None:
                    commands.append(found)
            else:
                prose.append((number + 1, text))
            number += 1
    else:
        prose = [(n + 1, re.sub(r"^\s*# ?", "", t)) for n, t in enumerate(lines) if t.lstrip().startswith("#")]
    commands += _inline_commands(shown, prose)
    return sorted(commands, key=lambda command: command.line)


def _inline_commands(path: Path, prose: list[tuple[int, str]]) -> list[DocCommand]:
    """Inline code spans, which may run over the next line of prose."""
    text = "\n".join(line for _, line in prose)
    starts = []
    offset = 0
    for _, line in prose:
        starts.append(offset)
        offset += len(line) + 1
    found = []
    for match in INLINE_CODE.finditer(text):
        index = max(i for i, start in enumerate(starts) if start <= match.start())
        command = _command(path, prose[index][0], match.group(1).replace("\n", " "), inline=True)
        if command is not None:
            found.append(command)
    return found


# ------------------------------------------------------------------ checking


class CommandFailed(Exception):
    """A documented command that would fail; the message says what its program would say."""


@dataclass
class DocSession:
    """Where the commands of one doc run, in order: `checkout` is the working directory (the repository's
    `recipes/` linked in, so that relative paths resolve as in a clone and nothing is written into the repository),
    `home` is $HOME. The words in `stand_ins` are replaced in each command: what a doc names but this machine lacks
    (a public data set's path, the reader's own environment) by what stands in for it here."""

    repo: Path
    checkout: Path
    home: Path
    stand_ins: Mapping[str, str]
    written: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # (env, options) -> its data files

    def check(self, command: DocCommand) -> None:
        """Raises CommandFailed when `command` fails."""
        words = [self._expanded(word) for word in command.words if word != ELLIPSIS]
        try:
            if command.kind == "main":
                self.check_main(words[3:])
            elif command.kind == "cli":
                self.check_cli(words[1:])
            elif command.kind == "script":
                self.check_script(words[1:])
            elif command.kind == "pip":
                check_pip(words)
            else:
                self.check_overrides(words, command.path)
        except CommandFailed:
            raise
        except SystemExit as error:
            raise CommandFailed(f"exit status {error.code}") from None
        except Exception as error:  # noqa: BLE001  (whatever the program would raise is the finding)
            raise CommandFailed(f"{type(error).__name__}: {error}") from None

    def _expanded(self, word: str) -> str:
        """`word` after the shell's tilde and variable expansion (HOME and PWD are the session's)."""
        if word.startswith("~/"):
            word = f"{self.home}{word[1:]}"
        word = word.replace("=~/", f"={self.home}/")
        values = {**os.environ, "HOME": str(self.home), "PWD": str(self.checkout)}
        word = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: values.get(m.group(1) or m.group(2), ""), word)
        for named, local in self.stand_ins.items():
            word = word.replace(named, local)
        return word

    # -------------------------------------------------------------- python -m verl_mas.main

    def compose_main(self, argv: list[str]) -> DictConfig:
        """The config `python -m verl_mas.main ARGV` runs with: a relative --config-path read from the current folder
        (`verl_mas.main.launch`), hydra's own argument parser and search path, its composition, `hydra:` removed as
        hydra does before calling main. See `compose`."""
        try:
            argv = verl_mas.main.config_path_from_cwd(argv, Path.cwd())
        except MasConfigError as error:
            raise CommandFailed(str(error)) from None
        with contextlib.redirect_stderr(io.StringIO()) as stderr:
            try:
                args = get_args_parser().parse_args(argv)
            except SystemExit:
                raise CommandFailed(f"hydra's arguments: {stderr.getvalue().strip()}") from None
        search_path = create_automatic_config_search_path(
            verl_mas.main.__file__, None, args.config_path or MAIN_CONFIG_PATH
        )
        if args.config_dir is not None:
            search_path.prepend("command-line", f"file://{os.path.abspath(args.config_dir)}")
        config = compose(search_path, args.config_name or MAIN_CONFIG_NAME, args.overrides)
        with open_dict(config):
            del config["hydra"]
        return config

    def check_main(self, argv: list[str]) -> None:
        """Composes, then runs main's checks before Ray (`check_config`); data files a doc leaves out (`...`) or that
        are not there are written here first, for the config's environment and options."""
        config = self.compose_main(argv)
        files = [OmegaConf.select(config, key) for key in ("data.train_files", "data.val_files")]
        local = [str(f) for f in files if isinstance(f, str) and "://" not in f]
        if len(local) < 2 or any(f == ELLIPSIS or not Path(f).exists() for f in local):
            mas = MasConfig.from_mapping(OmegaConf.to_container(config.mas, resolve=True))
            train, val = self.data_for(mas.env, dict(mas.env_options))
            OmegaConf.update(config, "data.train_files", train)
            OmegaConf.update(config, "data.val_files", val)
        verl_mas.main.check_config(config)

    def data_for(self, env: str, options: dict[str, Any]) -> list[str]:
        """[train file, eval file] of a few rows of `env` with `options`, written once per session."""
        key = json.dumps([env, options], sort_keys=True, default=str)
        if key not in self.written:
            out = self.home / "doc_data" / str(len(self.written))
            paths = write_dataset(env, out, SHRUNK_COUNTS["--train"], SHRUNK_COUNTS["--eval"], 0, options)
            self.written[key] = [str(paths["train"]), str(paths["eval"])]
        return self.written[key]

    # -------------------------------------------------------------- verl-mas

    def check_cli(self, argv: list[str]) -> None:
        """Parsed by verl-mas's own parser; then `data` and `envs` run (data with at most SHRUNK_COUNTS rows),
        `train`, `eval`, `demo` and `ablate` build their configs (nothing trains), and `doctor` checks what it is
        given (`check_doctor`)."""
        captured: list[argparse.Namespace] = []
        with contextlib.redirect_stderr(io.StringIO()) as stderr, contextlib.redirect_stdout(io.StringIO()):
            with mock.patch.object(cli, "_dispatch", lambda args: captured.append(args) or 0):
                try:
                    cli.main(argv)
                except SystemExit as error:
                    if error.code == 0:  # --help: printed, nothing else runs
                        return
                    raise CommandFailed(f"exit status {error.code}: {stderr.getvalue().strip()}") from None
        args = captured[0]
        if args.command == "data":
            args.train = min(args.train, SHRUNK_COUNTS["--train"])
            args.eval = min(args.eval, SHRUNK_COUNTS["--eval"])
        if args.command in ("data", "envs"):
            with contextlib.redirect_stdout(io.StringIO()):
                cli._dispatch(args)
        elif args.command in ("train", "eval", "export"):
            check_train_keys(args.command, args.overrides)
        elif args.command == "demo":
            from verl_mas.demo import demo_config
            from verl_mas.overrides import parse_overrides

            demo_config(parse_overrides(args.overrides))
        elif args.command == "ablate":
            from verl_mas.local.ablate import plan_ablation
            from verl_mas.overrides import parse_overrides

            plan_ablation(args.name, parse_overrides(args.overrides))
        elif args.command == "doctor":
            self.check_doctor(args)

    @staticmethod
    def check_doctor(args: argparse.Namespace) -> None:
        """`--recipe` checked as doctor does (without probing the install: a sandbox that runs, no GPU); the
        overrides composed over it (or verl-mas's config) for the target, and planned with `--gpu-memory` (a plan
        that overflows is doctor's finding, a plan that cannot be made is the command's failure)."""
        from verl_mas import doctor
        from verl_mas.verl_engine.memory_plan import DEFAULT_MEAN_SAMPLE_TOKENS, plan_memory

        target = args.target or "gpu"
        if args.recipe is not None:
            facts = doctor.Facts("", {}, {}, {}, cuda={}, sandbox={"layers": {}, "ran": True})
            problems, _ = doctor.recipe_problems(facts, args.recipe, target)
            if problems:
                raise CommandFailed("; ".join(problems))
        if args.overrides or args.gpu_memory is not None:
            config = doctor.composed(args.recipe, target, tuple(args.overrides))
            if args.gpu_memory is not None:
                plan_memory(config, args.gpu_memory, args.mean_sample_tokens or DEFAULT_MEAN_SAMPLE_TOKENS)

    # -------------------------------------------------------------- bash recipes/...

    def check_script(self, argv: list[str]) -> None:
        """Runs the script with `verl-mas` and `python` replaced by recorders, then checks what it would have run:
        the data step first (it writes the data the launch reads), then the launch."""
        bin_dir = self.home / "doc_bin"
        record = self.home / "doc_record"
        for folder in (bin_dir, record):
            folder.mkdir(exist_ok=True)
        for name in ("python", "verl-mas"):
            (bin_dir / name).write_text(RECORDER)
            (bin_dir / name).chmod(0o755)
            (record / name).unlink(missing_ok=True)
        env = {k: v for k, v in os.environ.items() if k not in ("DATA_DIR", "MODEL", "N_GPUS")}
        env.update(PATH=f"{bin_dir}:{os.environ['PATH']}", HOME=str(self.home), RECORD_DIR=str(record))
        result = subprocess.run(
            ["bash", *argv], cwd=self.checkout, env=env, capture_output=True, text=True, timeout=60, check=False
        )
        if result.returncode != 0:
            raise CommandFailed(f"exit status {result.returncode}: {result.stderr.strip()}")
        for name, check in (("verl-mas", self.check_cli), ("python", self.check_main)):
            recorded = (record / name).read_text().splitlines() if (record / name).exists() else []
            if name == "python":
                if recorded[:2] != ["-m", "verl_mas.main"]:
                    raise CommandFailed(f"the script ran python {' '.join(recorded)}, not -m verl_mas.main")
                recorded = recorded[2:]
            check(recorded)

    # -------------------------------------------------------------- inline overrides

    def check_overrides(self, overrides: list[str], doc: Path) -> None:
        """Inline overrides: verl's config when one of them is (a leading + or ~, which only hydra reads, or a
        top-level key of verl-mas's config), else `verl-mas train` keys (the local engine's `update.lr=...`).

        In a recipe folder they compose over its recipe; elsewhere over verl-mas's config or, failing that, over one
        of the recipes (prose such as "`single`: `mas.env_options.single_agent=true`" speaks of the recipes).
        """
        matches = [OVERRIDE.match(override) for override in overrides]
        if not any(match.group(1) or match.group(2) in top_level_keys() for match in matches):
            check_train_keys("train", overrides)
            return
        recipe = self.repo / doc.parent / f"{doc.parent.name}.yaml"
        if recipe.is_file():
            self.compose_main(["--config-path", str(recipe.parent), "--config-name", recipe.stem, *overrides])
            return
        try:
            self.compose_main(overrides)
        except Exception:
            for other in sorted((self.repo / "recipes").glob("*/*.yaml")):
                with contextlib.suppress(Exception):
                    self.compose_main(["--config-path", str(other.parent), "--config-name", other.stem, *overrides])
                    return
            raise


_BASES: dict[str, bytes] = {}  # pickled: a copy by pickle takes a twentieth of deepcopy's time


def compose(search_path: ConfigSearchPath, config_name: str, overrides: list[str]) -> DictConfig:
    """hydra's composition of `config_name` with `overrides`, as `python -m verl_mas.main` does it, from a cache.

    hydra composes the defaults (with the overrides that choose config groups, such as `+platform=cpu`), sets the
    config to struct mode, then applies the overrides of values (`ConfigLoaderImpl._apply_overrides_to_config`: its
    struct check refuses `key=...` for a key the config lacks, without `+`). The first part, slow, is cached per
    search path, config name and group overrides (keys without a dot); the second runs on a copy each time.
    """
    values = [o for o in overrides if "." in o.split("=", 1)[0]]
    groups = [o for o in overrides if o not in values]
    places = [_place(element.path) for element in search_path.get_path()]
    key = json.dumps([places, config_name, groups])
    if key not in _BASES:
        GlobalHydra.instance().clear()
        try:
            hydra = Hydra.create_main_hydra2(task_name="main", config_search_path=search_path)
            _BASES[key] = pickle.dumps(hydra.compose_config(config_name, groups, run_mode=RunMode.RUN))
        finally:
            GlobalHydra.instance().clear()
    config = pickle.loads(_BASES[key])
    ConfigLoaderImpl._apply_overrides_to_config(OverridesParser.create().parse_overrides(values), config)
    return config


def _place(path: str) -> str:
    """A search-path entry with a folder's links resolved: a recipe linked into two checkouts is one recipe."""
    folder = path.removeprefix("file://")
    return path if "://" in folder else os.path.realpath(folder)


def top_level_keys() -> list[str]:
    """The top-level keys of the config `python -m verl_mas.main` composes by default (verl's and `mas:`)."""
    search_path = create_automatic_config_search_path(verl_mas.main.__file__, None, MAIN_CONFIG_PATH)
    return [key for key in compose(search_path, MAIN_CONFIG_NAME, []) if key != "hydra"]


DISTRIBUTION = "verl-mas"
INDEX_REQUIREMENT = re.compile(r"^verl[-_]mas(\[[^\]]*\])?([<>=!~;@ ].*)?$", re.IGNORECASE)
LOCAL_REQUIREMENT = re.compile(r"^(?P<path>\.|\S*\.whl)(\[(?P<extras>[^\]]*)\])?$")  # the checkout, or a wheel


def check_pip(words: list[str]) -> None:
    """A pip command installs verl-mas from where it is: the checkout (`-e ".[gpu]"`) or a wheel built from it, with
    extras the package declares and the wheel's version the package's; verl-mas is not on the package index."""
    from importlib import metadata

    declared = metadata.metadata(DISTRIBUTION)
    extras = set(declared.get_all("Provides-Extra") or [])
    if "install" not in words:  # pip wheel, pip uninstall, pip show: nothing fetched from the index by name
        return
    for word in words:
        if INDEX_REQUIREMENT.match(word):
            raise CommandFailed(f"{word}: {DISTRIBUTION} is not on the package index; install from the checkout")
        local = LOCAL_REQUIREMENT.match(word)
        if local is None:
            continue
        path = local.group("path")
        if path.endswith(".whl") and not Path(path).name.startswith(f"verl_mas-{declared['Version']}-"):
            raise CommandFailed(
                f"{path}: the wheel of verl-mas {declared['Version']} is named verl_mas-{declared['Version']}-..."
            )
        unknown = {e.strip() for e in (local.group("extras") or "").split(",") if e.strip()} - extras
        if unknown:
            raise CommandFailed(f"{word}: verl-mas has no extra {sorted(unknown)}; its extras: {sorted(extras)}")


def check_train_keys(command: str, overrides: list[str]) -> None:
    """`verl-mas train`/`eval`/`export` keys build a training config as the command does (eval's and export's own
    keys taken out first), without reading a checkpoint or training."""
    from verl_mas.local.evaluate import EvalConfig
    from verl_mas.local.presets import resolve_train_config
    from verl_mas.overrides import apply_overrides, parse_overrides

    parsed = parse_overrides(overrides)
    eval_keys: tuple[str, ...] = ()
    if command == "eval":
        eval_keys = tuple(f.name for f in dataclasses.fields(EvalConfig))
        apply_overrides(EvalConfig(), {k: parsed.pop(k) for k in eval_keys if k in parsed})
    if command == "export":
        cli.take_export_keys(parsed)
        eval_keys = cli.EXPORT_KEYS
    resolve_train_config(parsed, other_keys=eval_keys)


def shown_files(path: Path) -> dict[str, str]:
    """The files a Markdown doc shows whole: each fenced block whose first line is a comment naming a file
    (`# my_run.yaml`), by that name, so that the doc's commands that read it find it."""
    found: dict[str, str] = {}
    for block in re.findall(r"^```\w*\n(.*?)^```", path.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL):
        named = SHOWN_FILE.match(block.splitlines()[0]) if block.strip() else None
        if named is not None:
            found[named.group(1)] = block
    return found


@contextlib.contextmanager
def doc_session(
    repo: Path, root: Path, stand_ins: Mapping[str, str], files: Mapping[str, str] | None = None
) -> Iterator[DocSession]:
    """A session under `root` (a fresh folder): a checkout folder with the repository's recipes linked in and
    `files` (name -> text) written, and a home; the working directory and $HOME are set to them for the session."""
    checkout, home = root / "checkout", root / "home"
    checkout.mkdir()
    home.mkdir()
    (checkout / "recipes").symlink_to(repo / "recipes")
    for name, text in (files or {}).items():
        (checkout / name).write_text(text, encoding="utf-8")
    previous = Path.cwd(), os.environ.get("HOME")
    os.chdir(checkout)
    os.environ["HOME"] = str(home)
    try:
        yield DocSession(repo, checkout, home, stand_ins)
    finally:
        os.chdir(previous[0])
        if previous[1] is None:
            os.environ.pop("HOME", None)
        else:
            os.environ["HOME"] = previous[1]


def failures(commands: list[DocCommand], session: DocSession) -> list[str]:
    """`path:line: command: what failed` for each command that fails, checked in order in one session."""
    found = []
    for command in commands:
        try:
            session.check(command)
        except CommandFailed as error:
            found.append(f"{command.where}: `{command.text}`: {error}")
    return found
