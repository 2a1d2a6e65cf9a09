"""GPT-2 hyperparameters, read from and written to a Hugging Face `config.json`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import equinox as eqx

from headflow.dynamics import HeadflowError

# Activations of the Hugging Face GPT-2 family that we implement (`config.activation_function`).
ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh", "gelu", "relu", "silu", "swish", "tanh")


class GPT2Config(eqx.Module):
    """The shape and the few numerical options of a GPT-2 model.

    Field names follow the Hugging Face `GPT2Config` (`n_layer`, `n_head`, `n_embd`, ...). The
    default is GPT-2 small (124M parameters).
    """

    vocab_size: int = eqx.field(static=True, default=50257)
    n_positions: int = eqx.field(static=True, default=1024)
    n_embd: int = eqx.field(static=True, default=768)
    n_layer: int = eqx.field(static=True, default=12)
    n_head: int = eqx.field(static=True, default=12)
    n_inner: int | None = eqx.field(static=True, default=None)
    activation_function: str = eqx.field(static=True, default="gelu_new")
    layer_norm_epsilon: float = eqx.field(static=True, default=1e-5)
    scale_attn_weights: bool = eqx.field(static=True, default=True)
    scale_attn_by_inverse_layer_idx: bool = eqx.field(static=True, default=False)
    tie_word_embeddings: bool = eqx.field(static=True, default=True)
    bos_token_id: int = eqx.field(static=True, default=50256)
    eos_token_id: int = eqx.field(static=True, default=50256)

    def __check_init__(self):
        for name in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise HeadflowError(
                    f"GPT-2 config: {name} must be a positive integer, got {value!r}"
                )
        if self.n_embd % self.n_head:
            raise HeadflowError(
                f"GPT-2 config: n_embd={self.n_embd} is not divisible by "
                f"n_head={self.n_head}; choose a width that is a multiple of the heads"
            )
        if self.activation_function not in ACTIVATIONS:
            raise HeadflowError(
                f"GPT-2 config: activation_function {self.activation_function!r} "
                f"is not supported (use one of {', '.join(ACTIVATIONS)})"
            )

    @property
    def d_head(self) -> int:
        """Per-head dimension `n_embd // n_head`."""
        return self.n_embd // self.n_head

    @property
    def d_inner(self) -> int:
        """Width of the MLP (`n_inner`, default `4 n_embd`)."""
        return self.n_inner if self.n_inner is not None else 4 * self.n_embd

    def num_params(self) -> int:
        """Number of parameters (tied embeddings counted once)."""
        d, f, n = self.n_embd, self.d_inner, self.n_layer
        per_layer = 4 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * f + f) + (f * d + d)
        head = 0 if self.tie_word_embeddings else self.vocab_size * d
        return self.vocab_size * d + self.n_positions * d + n * per_layer + 2 * d + head

    def to_hf_dict(self) -> dict[str, Any]:
        """The `config.json` content that `transformers` reads as a `GPT2Config`."""
        return {
            "architectures": ["GPT2LMHeadModel"],
            "model_type": "gpt2",
            "vocab_size": self.vocab_size,
            "n_positions": self.n_positions,
            "n_ctx": self.n_positions,
            "n_embd": self.n_embd,
            "n_layer": self.n_layer,
            "n_head": self.n_head,
            "n_inner": self.n_inner,
            "activation_function": self.activation_function,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "scale_attn_weights": self.scale_attn_weights,
            "scale_attn_by_inverse_layer_idx": self.scale_attn_by_inverse_layer_idx,
            "reorder_and_upcast_attn": False,
            "tie_word_embeddings": self.tie_word_embeddings,
            # transformers warns about special tokens outside a (small) vocabulary.
            "bos_token_id": min(self.bos_token_id, self.vocab_size - 1),
            "eos_token_id": min(self.eos_token_id, self.vocab_size - 1),
            "resid_pdrop": 0.1,
            "embd_pdrop": 0.1,
            "attn_pdrop": 0.1,
            "initializer_range": 0.02,
            "use_cache": True,
            "torch_dtype": "float32",
        }

    @classmethod
    def from_hf_dict(cls, data: dict[str, Any], *, source: str = "config.json") -> GPT2Config:
        """Read a Hugging Face GPT-2 `config.json` dictionary (extra keys are ignored)."""
        if not isinstance(data, dict):
            raise HeadflowError(f"{source}: expected a JSON object")
        model_type = data.get("model_type", "gpt2")
        if model_type != "gpt2":
            raise HeadflowError(
                f"{source}: model_type is {model_type!r}, only 'gpt2' checkpoints are supported"
            )
        # `reorder_and_upcast_attn` only changes the arithmetic order of a float16 model's
        # attention; everything here is float32, so it is accepted and ignored.
        aliases = {
            "hidden_size": "n_embd",
            "num_hidden_layers": "n_layer",
            "num_attention_heads": "n_head",
            "max_position_embeddings": "n_positions",
        }
        data = {aliases.get(k, k): v for k, v in data.items()}
        missing = [
            k for k in ("vocab_size", "n_embd", "n_layer", "n_head", "n_positions") if k not in data
        ]
        if missing:
            raise HeadflowError(f"{source}: missing key(s) {', '.join(missing)}")
        kwargs = {}
        for name in cls.__dataclass_fields__:
            if name in data and data[name] is not None:
                kwargs[name] = data[name]
            elif name == "n_inner" and name in data:
                kwargs[name] = None
        eos = kwargs.get("eos_token_id")
        if isinstance(eos, list):
            kwargs["eos_token_id"] = eos[0] if eos else 50256
        return cls(**kwargs)

    @classmethod
    def from_json(cls, path: str | Path) -> GPT2Config:
        """Read `config.json` (a file, or a checkpoint folder holding one)."""
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise HeadflowError(f"{path}: not found; a GPT-2 checkpoint folder needs config.json")
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise HeadflowError(f"{path}: not valid JSON ({err})") from None
        return cls.from_hf_dict(data, source=str(path))

    def write_json(self, path: str | Path) -> None:
        """Write the Hugging Face `config.json` to `path`."""
        Path(path).write_text(json.dumps(self.to_hf_dict(), indent=2) + "\n")
