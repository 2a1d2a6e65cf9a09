"""Hugging Face GPT-2 checkpoints: `config.json` + `model.safetensors`.

Tensor names follow the official `openai-community/gpt2` files (`wte.weight`,
`h.0.attn.c_attn.weight`, ..., optionally prefixed by `transformer.` as `save_pretrained` writes
them). Attention and MLP projections are `Conv1D` weights stored input×output; the output
embedding is tied to `wte` unless the file holds an `lm_head.weight` that differs from it."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from headflow.dynamics import HeadflowError

from ._config import GPT2Config
from ._data import bpe_files
from ._model import GPT2, Blocks, Conv1D, LayerNorm

WEIGHTS = "model.safetensors"
INDEX = "model.safetensors.index.json"
# Copied beside the weights when present (the BPE pair under its Hugging Face names, see
# `bpe_files`).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")

# (our block field, tensor suffix in the checkpoint, shape from config); l = layer.
_LAYER_TENSORS = (
    ("ln_1.weight", "ln_1.weight", lambda c: (c.n_embd,)),
    ("ln_1.bias", "ln_1.bias", lambda c: (c.n_embd,)),
    ("c_attn.weight", "attn.c_attn.weight", lambda c: (c.n_embd, 3 * c.n_embd)),
    ("c_attn.bias", "attn.c_attn.bias", lambda c: (3 * c.n_embd,)),
    ("attn_proj.weight", "attn.c_proj.weight", lambda c: (c.n_embd, c.n_embd)),
    ("attn_proj.bias", "attn.c_proj.bias", lambda c: (c.n_embd,)),
    ("ln_2.weight", "ln_2.weight", lambda c: (c.n_embd,)),
    ("ln_2.bias", "ln_2.bias", lambda c: (c.n_embd,)),
    ("c_fc.weight", "mlp.c_fc.weight", lambda c: (c.n_embd, c.d_inner)),
    ("c_fc.bias", "mlp.c_fc.bias", lambda c: (c.d_inner,)),
    ("mlp_proj.weight", "mlp.c_proj.weight", lambda c: (c.d_inner, c.n_embd)),
    ("mlp_proj.bias", "mlp.c_proj.bias", lambda c: (c.n_embd,)),
)


def _safetensor_files(folder: Path) -> list[Path]:
    single = folder / WEIGHTS
    if single.is_file():
        return [single]
    index = folder / INDEX
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            raise HeadflowError(f"{index}: unreadable shard index ({err})") from None
        files = [folder / s for s in shards]
        for f in files:
            if not f.is_file():
                raise HeadflowError(f"{f}: shard listed in {INDEX} is missing")
        return files
    if (folder / "pytorch_model.bin").is_file():
        raise HeadflowError(
            f"{folder}: only pytorch_model.bin found; headflow reads "
            f"{WEIGHTS} (download it with allow_patterns=['*.safetensors'])"
        )
    raise HeadflowError(
        f"{folder}: no {WEIGHTS}; a GPT-2 checkpoint folder needs config.json and {WEIGHTS}"
    )


def _read_tensors(files: list[Path]) -> dict[str, np.ndarray]:
    from safetensors import safe_open

    tensors: dict[str, np.ndarray] = {}
    for path in files:
        try:
            with safe_open(str(path), framework="numpy") as f:
                for name in f.keys():
                    tensors[name] = f.get_tensor(name)
        except Exception as err:  # safetensors raises several types for a damaged file
            msg = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise HeadflowError(
                f"{path}: corrupt or unreadable safetensors file ({msg}); "
                "re-download or re-create the checkpoint"
            ) from None
    return tensors


def _strip_prefix(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = {}
    for name, value in tensors.items():
        if name.startswith("transformer."):
            name = name[len("transformer.") :]
        out[name] = value
    return out


def check_checkpoint(path: str | os.PathLike) -> GPT2Config:
    """The cheap checks of a checkpoint folder, without reading any tensor: the folder exists,
    `config.json` is a valid GPT-2 config and the weight files are present.

    **Arguments:**

    - `path`: the checkpoint folder.

    **Returns:** its [`GPT2Config`][]. Raises [`headflow.dynamics.HeadflowError`][] (one line)
    otherwise.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise HeadflowError(
            f"checkpoint {folder}: not a folder; pass a folder with config.json "
            f"and {WEIGHTS} (e.g. from `headflow gpt2 random-checkpoint`)"
        )
    config = GPT2Config.from_json(folder / "config.json")
    _safetensor_files(folder)
    return config


def load_checkpoint(path: str | os.PathLike) -> GPT2:
    """Load a Hugging Face GPT-2 checkpoint folder.

    **Arguments:**

    - `path`: a folder with `config.json` and `model.safetensors` (or a sharded
      `model.safetensors.index.json`).

    **Returns:** a [`GPT2`][] with float32 parameters.

    Raises [`headflow.dynamics.HeadflowError`][] (one line) for a missing folder or file, a corrupt
    file, a missing tensor or a tensor whose shape disagrees with `config.json`.
    """
    folder = Path(path)
    config = check_checkpoint(folder)
    tensors = _strip_prefix(_read_tensors(_safetensor_files(folder)))
    source = folder / WEIGHTS

    def get(name: str, shape: tuple[int, ...]) -> np.ndarray:
        if name not in tensors:
            raise HeadflowError(
                f"{source}: missing tensor '{name}'; the checkpoint is incomplete "
                "or not a GPT-2 model"
            )
        value = tensors[name]
        if tuple(value.shape) != tuple(shape):
            raise HeadflowError(
                f"{source}: tensor '{name}' has shape {tuple(value.shape)} but "
                f"config.json implies {tuple(shape)}"
            )
        if not np.issubdtype(value.dtype, np.floating):
            raise HeadflowError(
                f"{source}: tensor '{name}' has dtype {value.dtype}, expected floats"
            )
        return np.asarray(value, dtype=np.float32)

    c = config
    wte = get("wte.weight", (c.vocab_size, c.n_embd))
    wpe = get("wpe.weight", (c.n_positions, c.n_embd))
    stacked = {}
    for field, suffix, shape in _LAYER_TENSORS:
        stacked[field] = np.stack([get(f"h.{i}.{suffix}", shape(c)) for i in range(c.n_layer)])

    def ln(prefix, eps):
        return LayerNorm(
            jnp.asarray(stacked[f"{prefix}.weight"]), jnp.asarray(stacked[f"{prefix}.bias"]), eps
        )

    def conv(prefix):
        return Conv1D(
            jnp.asarray(stacked[f"{prefix}.weight"]), jnp.asarray(stacked[f"{prefix}.bias"])
        )

    eps = c.layer_norm_epsilon
    blocks = Blocks(
        ln_1=ln("ln_1", eps),
        c_attn=conv("c_attn"),
        attn_proj=conv("attn_proj"),
        ln_2=ln("ln_2", eps),
        c_fc=conv("c_fc"),
        mlp_proj=conv("mlp_proj"),
    )
    ln_f = LayerNorm(
        jnp.asarray(get("ln_f.weight", (c.n_embd,))),
        jnp.asarray(get("ln_f.bias", (c.n_embd,))),
        eps,
    )
    lm_head = None
    if "lm_head.weight" in tensors:
        head = get("lm_head.weight", (c.vocab_size, c.n_embd))
        if not np.array_equal(head, wte):
            lm_head = jnp.asarray(head)
    elif not c.tie_word_embeddings:
        raise HeadflowError(
            f"{source}: missing tensor 'lm_head.weight' (config.json says the "
            "embeddings are not tied)"
        )
    return GPT2(
        config=c,
        wte=jnp.asarray(wte),
        wpe=jnp.asarray(wpe),
        blocks=blocks,
        ln_f=ln_f,
        lm_head=lm_head,
    )


def checkpoint_tensors(model: GPT2) -> dict[str, np.ndarray]:
    """The tensors of `model` under their Hugging Face names (float32, C-contiguous)."""
    out = {
        "wte.weight": model.wte,
        "wpe.weight": model.wpe,
        "ln_f.weight": model.ln_f.weight,
        "ln_f.bias": model.ln_f.bias,
    }
    for field, suffix, _ in _LAYER_TENSORS:
        module, attr = field.split(".")
        stacked = np.asarray(getattr(getattr(model.blocks, module), attr))
        for i in range(model.config.n_layer):
            out[f"h.{i}.{suffix}"] = stacked[i]
    if model.lm_head is not None:
        out["lm_head.weight"] = model.lm_head
    return {k: np.ascontiguousarray(np.asarray(v, dtype=np.float32)) for k, v in out.items()}


def save_checkpoint(
    model: GPT2, path: str | os.PathLike, *, tokenizer: str | os.PathLike | None = None
) -> Path:
    """Write `model` as a Hugging Face GPT-2 folder that `transformers` loads too.

    The folder is written next to its destination and moved into place at the end, so a failure
    leaves nothing behind.

    **Arguments:**

    - `model`: the [`GPT2`][] to save.
    - `path`: destination folder (created; `config.json`, `model.safetensors` and tokenizer files
      of the same names are replaced).
    - `tokenizer`: optional folder whose tokenizer files (`vocab.json` and `merges.txt`, also
      from OpenAI's `encoder.json` and `vocab.bpe`; `tokenizer.json`, ...) are copied alongside,
      under the Hugging Face names.

    **Returns:** the folder.
    """
    from safetensors.numpy import save_file

    out = Path(path)
    if out.exists() and not out.is_dir():
        raise HeadflowError(f"{out}: exists and is not a folder")
    sources: dict[str, Path] = {}
    if tokenizer is not None:
        tok = Path(tokenizer)
        sources = {name: tok / name for name in TOKENIZER_FILES if (tok / name).is_file()}
        sources.update(bpe_files(tok) or {})
        if not sources:
            raise HeadflowError(
                f"tokenizer {tok}: no vocab.json/merges.txt or tokenizer.json there"
            )
    parent = out.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=parent))
    except OSError as err:
        raise HeadflowError(f"{out}: cannot create ({err.strerror})") from None
    try:
        model.config.write_json(tmp / "config.json")
        save_file(checkpoint_tensors(model), str(tmp / WEIGHTS), metadata={"format": "pt"})
        for name, src in sources.items():
            shutil.copyfile(src, tmp / name)
        for item in tmp.iterdir():
            item.chmod(0o644)
        out.mkdir(parents=True, exist_ok=True)
        for item in tmp.iterdir():
            os.replace(item, out / item.name)
    except OSError as err:
        raise HeadflowError(f"{out}: cannot write checkpoint ({err.strerror})") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
