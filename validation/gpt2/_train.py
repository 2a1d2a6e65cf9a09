"""Train a small GPT-2 (GPT-2 BPE, GPT-2 architecture) on one text, on a CPU, in minutes.

Real GPT-2 weights cannot be downloaded everywhere; this gives a model with learned attention to
run the bound experiments on. Next-token cross-entropy, AdamW (written out here: a few lines, no
extra dependency), linear warm-up then cosine decay, global-norm clipping. Each step samples
random windows of `context + 1` tokens from the first `1 − val_fraction` of the text; the rest is
held out for the validation loss. The output head (`n_embd × 50257` per predicted token)
dominates the cost of such a small model, so each step predicts a random subset of
`predict_fraction` of the positions of every window: all positions still run through the
attention (gradients reach every query and key), only the loss is subsampled.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from headflow.dynamics import ConfigError, DivergenceError, check_stop

from ._config import GPT2Config
from ._model import GPT2, init_gpt2


class TrainConfig(eqx.Module):
    """Settings of [`train_gpt2`][] (all static)."""

    n_layer: int = eqx.field(static=True, default=3)
    n_head: int = eqx.field(static=True, default=4)
    n_embd: int = eqx.field(static=True, default=128)
    context: int = eqx.field(static=True, default=1024)
    steps: int = eqx.field(static=True, default=200)
    batch: int = eqx.field(static=True, default=2)
    lr: float = eqx.field(static=True, default=3e-3)
    warmup: int = eqx.field(static=True, default=20)
    weight_decay: float = eqx.field(static=True, default=0.01)
    clip: float = eqx.field(static=True, default=1.0)
    predict_fraction: float = eqx.field(static=True, default=0.125)
    val_fraction: float = eqx.field(static=True, default=0.05)
    max_minutes: float = eqx.field(static=True, default=0.0)  # 0: no time limit
    seed: int = eqx.field(static=True, default=0)

    def __check_init__(self):
        for key in ("n_layer", "n_head", "n_embd", "context", "steps", "batch"):
            v = getattr(self, key)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"train.{key}: must be a positive integer, got {v!r}")
        if self.n_embd % self.n_head:
            raise ConfigError(
                f"train.n_embd={self.n_embd} must be a multiple of n_head={self.n_head}"
            )
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ConfigError(f"train.lr: must be positive, got {self.lr!r}")
        if not 0 < self.predict_fraction <= 1:
            raise ConfigError(
                f"train.predict_fraction: must lie in (0, 1], got {self.predict_fraction!r}"
            )
        if not 0 < self.val_fraction < 0.5:
            raise ConfigError(
                f"train.val_fraction: must lie in (0, 0.5), got {self.val_fraction!r}"
            )
        if self.max_minutes < 0 or self.warmup < 0 or self.weight_decay < 0 or self.clip <= 0:
            raise ConfigError("train: max_minutes, warmup and weight_decay must be ≥ 0, clip > 0")


class AdamState(eqx.Module):
    step: jax.Array
    mu: Any
    nu: Any


def _is_decayed(path, leaf) -> bool:
    """Weight decay on matrices only (not biases, LayerNorm, embeddings' positions)."""
    names = [getattr(p, "name", "") for p in path]
    return leaf.ndim >= 2 and "wpe" not in names and "ln_1" not in names and "ln_2" not in names


def _loss(model: GPT2, windows, positions):
    """Mean next-token cross-entropy at `positions` of every window (inputs `w[:-1]`)."""
    inputs, targets = windows[:, :-1], windows[:, 1:]
    hidden = jax.vmap(model.final_hidden)(inputs)  # (batch, context, n_embd)
    h = jnp.take_along_axis(hidden, positions[..., None], axis=1)
    y = jnp.take_along_axis(targets, positions, axis=1)
    logits = model.unembed(h)
    logz = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, y[..., None], axis=-1)[..., 0]
    return jnp.mean(logz - picked)


def _schedule(cfg: TrainConfig, step):
    step = step.astype(jnp.float32)
    warm = jnp.minimum(1.0, (step + 1) / max(cfg.warmup, 1))
    progress = jnp.clip((step - cfg.warmup) / max(cfg.steps - cfg.warmup, 1), 0, 1)
    return cfg.lr * warm * (0.1 + 0.9 * 0.5 * (1 + jnp.cos(jnp.pi * progress)))


def _make_step(cfg: TrainConfig):
    b1, b2, eps = 0.9, 0.95, 1e-8

    @eqx.filter_jit
    def step(model, state: AdamState, windows, positions):
        loss, grads = eqx.filter_value_and_grad(_loss)(model, windows, positions)
        params = eqx.filter(model, eqx.is_inexact_array)
        leaves = jax.tree_util.tree_leaves(grads)
        gnorm = jnp.sqrt(sum(jnp.sum(g * g) for g in leaves))
        scale = jnp.minimum(1.0, cfg.clip / (gnorm + 1e-6))
        grads = jax.tree_util.tree_map(lambda g: g * scale, grads)
        t = state.step + 1
        mu = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, state.mu, grads)
        nu = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, state.nu, grads)
        lr = _schedule(cfg, state.step)
        c1 = 1 - b1 ** t.astype(jnp.float32)
        c2 = 1 - b2 ** t.astype(jnp.float32)

        def update(path, p, m, v):
            u = (m / c1) / (jnp.sqrt(v / c2) + eps)
            if _is_decayed(path, p):
                u = u + cfg.weight_decay * p
            return (p - lr * u).astype(p.dtype)

        new_params = jax.tree_util.tree_map_with_path(update, params, mu, nu)
        model = eqx.combine(new_params, model)
        return model, AdamState(step=t, mu=mu, nu=nu), loss, gnorm

    return step


def _windows(rng: np.random.Generator, tokens: np.ndarray, batch: int, length: int) -> np.ndarray:
    starts = rng.integers(0, len(tokens) - length, size=batch)
    return np.stack([tokens[s : s + length] for s in starts]).astype(np.int32)


def _positions(rng: np.random.Generator, batch: int, context: int, fraction: float) -> np.ndarray:
    count = max(1, int(round(fraction * context)))
    if count >= context:
        return np.broadcast_to(np.arange(context, dtype=np.int32), (batch, context)).copy()
    return np.sort(
        np.stack([rng.choice(context, count, replace=False) for _ in range(batch)]), axis=1
    ).astype(np.int32)


def evaluate(model: GPT2, tokens: np.ndarray, context: int, *, windows: int = 4) -> float:
    """Mean next-token loss on `windows` consecutive windows of `tokens` (all positions)."""
    length = context + 1
    count = min(windows, max(1, (len(tokens) - 1) // context))
    wins = np.stack(
        [
            tokens[i * context : i * context + length]
            for i in range(count)
            if i * context + length <= len(tokens)
        ]
    ).astype(np.int32)
    positions = np.broadcast_to(np.arange(context, dtype=np.int32), (len(wins), context))
    loss = eqx.filter_jit(_loss)(model, jnp.asarray(wins), jnp.asarray(positions))
    return float(loss)


def _split(n_tokens: int, cfg: TrainConfig) -> int:
    """Tokens `[:split]` train, the rest validates."""
    return int(n_tokens * (1 - cfg.val_fraction))


def check_train_length(n_tokens: int, cfg: TrainConfig) -> None:
    """Raise a one-line [`headflow.dynamics.ConfigError`][] when `n_tokens` is below
    [`min_tokens`][]."""
    need = min_tokens(cfg)
    if n_tokens < need:
        raise ConfigError(
            f"train: the text has {n_tokens} tokens, but --context {cfg.context} needs at least "
            f"{need} ({cfg.context + 2} in the training part, the first "
            f"{1 - cfg.val_fraction:.0%}, and {cfg.context + 1} in the validation part); use a "
            "longer text or a smaller --context"
        )


def min_tokens(cfg: TrainConfig) -> int:
    """The fewest tokens [`train_gpt2`][] accepts for `cfg`.

    Training windows of `context + 1` tokens start anywhere in the first `1 − val_fraction` of
    the text, so that part needs `context + 2` tokens (at least two possible starts); the
    validation loss needs one window of `context + 1` tokens in the rest. The split rounds
    down, so the smallest length satisfying both is found by a search (both parts grow
    monotonically with the length).

    **Arguments:**

    - `cfg`: a [`TrainConfig`][].

    **Returns:** the minimum number of tokens.
    """
    need_train, need_val = cfg.context + 2, cfg.context + 1
    n = need_train + need_val
    while _split(n, cfg) < need_train or n - _split(n, cfg) < need_val:
        n += 1
    return n


def train_gpt2(
    tokens: np.ndarray,
    cfg: TrainConfig | None = None,
    *,
    vocab_size: int = 50257,
    progress: bool | None = None,
) -> tuple[GPT2, dict[str, Any]]:
    """Train a GPT-2-architecture model on a token stream.

    **Arguments:**

    - `tokens`: the tokenized text (int array).
    - `cfg`: a [`TrainConfig`][] (default: `TrainConfig()`).
    - `vocab_size`: size of the vocabulary (50257 for the GPT-2 BPE).
    - `progress`: show a progress bar (default: when stderr is a terminal).

    **Returns:** `(model, log)` with the loss curve, validation losses and timings.
    """
    cfg = cfg if cfg is not None else TrainConfig()
    tokens = np.asarray(tokens, dtype=np.int32)
    check_train_length(len(tokens), cfg)
    split = _split(len(tokens), cfg)
    train, val = tokens[:split], tokens[split:]
    gcfg = GPT2Config(
        vocab_size=vocab_size,
        n_positions=cfg.context,
        n_embd=cfg.n_embd,
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
    )
    model = init_gpt2(gcfg, jr.key(cfg.seed))
    params = eqx.filter(model, eqx.is_inexact_array)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    state = AdamState(step=jnp.zeros((), jnp.int32), mu=zeros, nu=zeros)
    step = _make_step(cfg)
    rng = np.random.default_rng(cfg.seed)
    if progress is None:
        progress = sys.stderr.isatty()
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=cfg.steps, desc="gpt2 train", unit="step", file=sys.stderr)
    val_initial = evaluate(model, val, cfg.context)
    losses, t0 = [], time.perf_counter()
    compile_s = None
    done = 0
    for i in range(cfg.steps):
        check_stop()                     # SIGINT/SIGTERM: stop between steps
        windows = _windows(rng, train, cfg.batch, cfg.context + 1)
        positions = _positions(rng, cfg.batch, cfg.context, cfg.predict_fraction)
        t = time.perf_counter()
        model, state, loss, gnorm = step(model, state, jnp.asarray(windows), jnp.asarray(positions))
        loss = float(loss)
        if compile_s is None:
            compile_s = time.perf_counter() - t
        if not math.isfinite(loss):
            raise DivergenceError(f"train: loss became {loss} at step {i}; lower --lr")
        losses.append(loss)
        done = i + 1
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.3f}")
        if cfg.max_minutes and time.perf_counter() - t0 > 60 * cfg.max_minutes:
            break
    if bar is not None:
        bar.close()
    train_s = time.perf_counter() - t0
    val_final = evaluate(model, val, cfg.context)
    tokens_seen = done * cfg.batch * cfg.context
    log = {
        "steps": done,
        "tokens_seen": tokens_seen,
        "train_tokens": int(len(train)),
        "val_tokens": int(len(val)),
        "loss": losses,
        "loss_first": losses[0],
        "loss_last_10_mean": float(np.mean(losses[-10:])),
        "val_loss_initial": val_initial,
        "val_loss_final": val_final,
        "uniform_loss": math.log(vocab_size),
        "train_s": train_s,
        "first_step_s_incl_compile": compile_s,
        "tokens_per_s": tokens_seen / max(train_s, 1e-9),
        "parameters": gcfg.num_params(),
    }
    return model, log
