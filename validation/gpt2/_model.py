"""GPT-2 in equinox with explicit float32 attention.

The attention of every head is computed in the open, `softmax(q kᵀ / √d_head)` with the causal
mask applied before the softmax (docs/gpt2.md, "Notation"), so that q, k, v and the attention
matrix of every layer and head can be returned. Arrays are float32 throughout, independently of
`jax_enable_x64`, and every matrix product asks for `Precision.HIGHEST` so that accelerators do
not silently use reduced-precision (TF32/bf16) arithmetic."""

from __future__ import annotations

import math
from collections.abc import Iterable

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jax import lax
from jaxtyping import Array, Float, Int, PRNGKeyArray

from ._config import GPT2Config

_HI = lax.Precision.HIGHEST
F32 = jnp.float32

#: Names that [`GPT2.__call__`][] can capture per layer.
CAPTURABLE = ("q", "k", "v", "attn", "hidden")


def _mm(a, b):
    return jnp.matmul(a, b, precision=_HI, preferred_element_type=F32)


class LayerNorm(eqx.Module):
    """LayerNorm over the last axis (biased variance, as in PyTorch)."""

    weight: Float[Array, "*layers dim"]
    bias: Float[Array, "*layers dim"]
    eps: float = eqx.field(static=True, default=1e-5)

    def __call__(self, x: Float[Array, "tokens dim"]) -> Float[Array, "tokens dim"]:
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
        weight, bias = (
            p.reshape((1,) * (x.ndim - p.ndim) + p.shape) for p in (self.weight, self.bias)
        )
        return (x - mean) * lax.rsqrt(var + jnp.asarray(self.eps, F32)) * weight + bias


class Conv1D(eqx.Module):
    """Hugging Face's `Conv1D`: an affine map whose weight is stored input×output."""

    weight: Float[Array, "*layers fan_in fan_out"]
    bias: Float[Array, "*layers fan_out"]

    def __call__(self, x: Float[Array, "tokens fan_in"]) -> Float[Array, "tokens fan_out"]:
        out = _mm(x, self.weight)
        return out + self.bias.reshape((1,) * (out.ndim - self.bias.ndim) + self.bias.shape)


def _activation(name: str):
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return lambda x: jax.nn.gelu(x, approximate=True)
    if name == "gelu":
        return lambda x: jax.nn.gelu(x, approximate=False)
    if name == "relu":
        return jax.nn.relu
    if name in ("silu", "swish"):
        return jax.nn.silu
    if name == "tanh":
        return jnp.tanh
    raise ValueError(name)  # GPT2Config already rejects unknown names


class Blocks(eqx.Module):
    """The transformer blocks of all layers, stacked along a leading layer axis (for `lax.scan`)."""

    ln_1: LayerNorm
    c_attn: Conv1D
    attn_proj: Conv1D
    ln_2: LayerNorm
    c_fc: Conv1D
    mlp_proj: Conv1D


def causal_attention(
    q: Float[Array, "heads tokens d_head"],
    k: Float[Array, "heads tokens d_head"],
    *,
    scale: float | Float[Array, ""],
) -> Float[Array, "heads tokens tokens"]:
    """Explicit causal softmax attention, `softmax(scale · q kᵀ)` masked before the softmax.

    **Arguments:**

    - `q`, `k`: queries and keys of each head.
    - `scale`: multiplies the logits (`1/√d_head` in GPT-2).

    **Returns:** the attention matrix; row `t` is supported on the keys `0..t` and sums to one.
    """
    n = q.shape[-2]
    logits = jnp.einsum(
        "hqd,hkd->hqk", q, k, precision=_HI, preferred_element_type=F32
    ) * jnp.asarray(scale, F32)
    mask = jnp.broadcast_to(jnp.tril(jnp.ones((n, n), dtype=bool)), logits.shape)
    logits = jnp.where(mask, logits, -jnp.inf)
    peak = lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True))
    weights = jnp.where(mask, jnp.exp(logits - peak), jnp.zeros((), F32))
    return weights / jnp.sum(weights, axis=-1, keepdims=True)


class GPT2Output(eqx.Module):
    """What one forward pass returns; entries that were not asked for are `None`.

    - `logits`: next-token logits `(tokens, vocab)`.
    - `q`, `k`, `v`: per layer and head, `(layers, heads, tokens, d_head)`.
    - `attn`: attention matrices `(layers, heads, tokens, tokens)` (row = query).
    - `hidden`: the residual stream entering each layer, `(layers, tokens, n_embd)`.
    """

    logits: Float[Array, "tokens vocab"] | None = None
    q: Float[Array, "layers heads tokens d_head"] | None = None
    k: Float[Array, "layers heads tokens d_head"] | None = None
    v: Float[Array, "layers heads tokens d_head"] | None = None
    attn: Float[Array, "layers heads tokens tokens"] | None = None
    hidden: Float[Array, "layers tokens n_embd"] | None = None


class GPT2(eqx.Module):
    """A GPT-2 language model (Hugging Face `GPT2LMHeadModel` semantics, inference only)."""

    config: GPT2Config = eqx.field(static=True)
    wte: Float[Array, "vocab n_embd"]
    wpe: Float[Array, "positions n_embd"]
    blocks: Blocks
    ln_f: LayerNorm
    lm_head: Float[Array, "vocab n_embd"] | None = None  # None: tied to `wte`

    def __call__(
        self, tokens: Int[Array, " tokens"], *, capture: Iterable[str] = (), logits: bool = True
    ) -> GPT2Output:
        """Run the model on one sequence.

        **Arguments:**

        - `tokens`: token ids, at most `n_positions` of them.
        - `capture`: any of `"q"`, `"k"`, `"v"`, `"attn"`, `"hidden"`; only these are stacked and
          returned (under `jit`, what is not returned is never kept).
        - `logits`: whether to compute the next-token logits (the `tokens × vocab` product
          dominates the cost of a small model; extraction does not need it).

        **Returns:** a [`GPT2Output`][].
        """
        capture = frozenset(capture)
        unknown = capture - set(CAPTURABLE)
        if unknown:
            raise ValueError(f"cannot capture {sorted(unknown)}; choose from {CAPTURABLE}")
        x, out = self._trunk(tokens, capture)
        if logits:
            out["logits"] = self.unembed(self.ln_f(x))
        return GPT2Output(**out)

    def _trunk(self, tokens, capture):
        cfg = self.config
        n = tokens.shape[0]
        if n > cfg.n_positions:
            raise ValueError(f"{n} tokens exceed the model's context n_positions={cfg.n_positions}")
        act = _activation(cfg.activation_function)
        h_, dh = cfg.n_head, cfg.d_head
        x = (jnp.take(self.wte, tokens, axis=0) + self.wpe[:n]).astype(F32)
        base_scale = dh**-0.5 if cfg.scale_attn_weights else 1.0

        def layer(x, inputs):
            blk, idx = inputs
            scale = base_scale
            if cfg.scale_attn_by_inverse_layer_idx:
                scale = base_scale / (idx.astype(F32) + 1)
            qkv = blk.c_attn(blk.ln_1(x))
            q, k, v = (
                jnp.transpose(t.reshape(n, h_, dh), (1, 0, 2)) for t in jnp.split(qkv, 3, axis=-1)
            )
            attn = causal_attention(q, k, scale=scale)
            heads = jnp.einsum(
                "hqk,hkd->qhd", attn, v, precision=_HI, preferred_element_type=F32
            ).reshape(n, cfg.n_embd)
            out = {"q": q, "k": k, "v": v, "attn": attn, "hidden": x}
            x = x + blk.attn_proj(heads)
            x = x + blk.mlp_proj(act(blk.c_fc(blk.ln_2(x))))
            return x, {name: out[name] for name in capture}

        x, saved = lax.scan(layer, x, (self.blocks, jnp.arange(cfg.n_layer, dtype=jnp.int32)))
        return x, dict(saved)

    def final_hidden(self, tokens: Int[Array, " tokens"]) -> Float[Array, "tokens n_embd"]:
        """The last hidden states, after the final LayerNorm (what the output head reads)."""
        return self.ln_f(self._trunk(tokens, frozenset())[0])

    def unembed(self, h: Float[Array, "*tokens n_embd"]) -> Float[Array, "*tokens vocab"]:
        """Next-token logits from final hidden states (tied to `wte` unless `lm_head` is set)."""
        head = self.wte if self.lm_head is None else self.lm_head
        return jnp.matmul(h, head.T, precision=_HI, preferred_element_type=F32)


def init_gpt2(config: GPT2Config, key: PRNGKeyArray, *, std: float = 0.02) -> GPT2:
    """A randomly initialized GPT-2 (the Hugging Face / OpenAI initialization).

    Weights are `N(0, std²)`, the residual output projections `N(0, std²/(2 n_layer))`, biases zero,
    LayerNorm gains one.

    **Arguments:**

    - `config`: the model shape.
    - `key`: a JAX PRNG key.
    - `std`: standard deviation of the weights (`initializer_range`, 0.02 in GPT-2).

    **Returns:** a [`GPT2`][] with float32 parameters.
    """
    c, d, f, n = config, config.n_embd, config.d_inner, config.n_layer
    keys = jr.split(key, 6)
    proj_std = std / math.sqrt(2 * n)

    def normal(k, shape, s):
        return (s * jr.normal(k, shape, dtype=F32)).astype(F32)

    def ln(*shape):
        return LayerNorm(jnp.ones(shape, F32), jnp.zeros(shape, F32), c.layer_norm_epsilon)

    blocks = Blocks(
        ln_1=ln(n, d),
        c_attn=Conv1D(normal(keys[2], (n, d, 3 * d), std), jnp.zeros((n, 3 * d), F32)),
        attn_proj=Conv1D(normal(keys[3], (n, d, d), proj_std), jnp.zeros((n, d), F32)),
        ln_2=ln(n, d),
        c_fc=Conv1D(normal(keys[4], (n, d, f), std), jnp.zeros((n, f), F32)),
        mlp_proj=Conv1D(normal(keys[5], (n, f, d), proj_std), jnp.zeros((n, d), F32)),
    )
    return GPT2(
        config=c,
        wte=normal(keys[0], (c.vocab_size, d), std),
        wpe=normal(keys[1], (c.n_positions, d), std),
        blocks=blocks,
        ln_f=ln(d),
        lm_head=None,
    )
