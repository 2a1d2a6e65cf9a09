"""Online SGD of the single-location model at finite D (`docs/model.md#training-online-sgd`):
one step ([`sgd_step`][]) and the map the simulators' driver runs over seeds
([`AttentionWeightSGD`][])."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from ..._model import AttentionBase
from ..._steps import StepSizes
from ..._teacher import Teacher, sample_data
from ..._errors import DivergenceError
from ..._overlaps import Overlaps
from ..._teacher import make_teacher
from ..._weights import Weights, init_weights
from ...ode._integrate import BLOWUP, bounded
from ...sharding import gather
from .._sgd import AbstractSGD


def field_gradients(model: AttentionBase, w: Weights, X: Float[Array, "B L D"],
                    y: Float[Array, " B"]):
    """Fields of a batch and the loss gradients with respect to them (local-field chain rule):
    `G^χ = ∂ℓ/∂χ`, `G^z = ∂ℓ/∂z` (each `B×H×L`) and `∂ℓ/∂b`, for the batch-mean loss.
    The loss is [`headflow.dynamics.Model.loss`][], the same code the ODEs differentiate."""
    sqrt_d = jnp.sqrt(jnp.asarray(w.D, X.dtype))
    chi = jnp.einsum("hd,bld->bhl", w.K, X) / sqrt_d
    z = jnp.einsum("hd,bld->bhl", w.V, X) / sqrt_d

    def batch_loss(chi, z, b):
        return jnp.mean(jax.vmap(model.loss, in_axes=(0, 0, None, 0))(chi, z, b, y))

    return jax.grad(batch_loss, argnums=(0, 1, 2))(chi, z, w.b)


def sgd_step(model: AttentionBase, hp: StepSizes, teacher: Teacher, w: Weights,
             key: PRNGKeyArray) -> Weights:
    """One online SGD step on a fresh batch: `k_h ← (1 − ηλ/D) k_h − η ∂ℓ/∂k_h` (same for
    `v_h` unless values are frozen), `b_h ← b_h − (η_b/D) ∂ℓ/∂b_h`."""
    D = w.D
    X, y = sample_data(key, teacher, model, hp.batch)
    g_chi, g_z, g_b = field_gradients(model, w, X, y)
    scale = hp.lr / jnp.sqrt(jnp.asarray(D, X.dtype))
    decay = 1.0 - hp.lr * hp.weight_decay / D
    K = decay * w.K - scale * jnp.einsum("bhl,bld->hd", g_chi, X)
    if model.train_values:
        V = decay * w.V - scale * jnp.einsum("bhl,bld->hd", g_z, X)
    else:
        V = w.V
    b = w.b - (hp.lr_bias / D) * g_b
    return Weights(K=K.astype(w.K.dtype), V=V.astype(w.V.dtype), b=b.astype(w.b.dtype))


def advance(model: AttentionBase, hp: StepSizes, teacher: Teacher, w: Weights, key: PRNGKeyArray,
            start: Array, n_steps: Array) -> Weights:
    """Steps `start, …, start + n_steps − 1`; step `k` uses `fold_in(key, k)`, so results do not
    depend on how the run is cut into segments, and the step sizes at `t = k/D`
    ([`headflow.dynamics.StepSizes.at`][]: a schedule is read at the time of each step)."""

    def body(k, w):
        return sgd_step(model, hp.at(k / w.D), teacher, w, jr.fold_in(key, k))

    return jax.lax.fori_loop(start, start + n_steps, body, w)


@eqx.filter_jit
def _segment(model: AttentionBase, hp: StepSizes, teachers: Teacher, w: Weights, keys, starts,
             counts):
    def one_seed(teacher, w, key):
        def body(w, sc):
            w = advance(model, hp, teacher, w, key, sc[0], sc[1])
            return w, (w.gram_rows(teacher), w.b.astype(jnp.float64))

        return jax.lax.scan(body, w, (starts, counts))

    return jax.vmap(one_seed)(teachers, w, keys)


class AttentionWeightSGD(AbstractSGD):
    """The attention model's online SGD of the D-dimensional weights, a random teacher per
    seed, recording the overlaps.

    **Fields:** `model`, `hp` (the step sizes), `dim` (D), `init` (`None`: random weights with
    `init_std = (σ_k, σ_v, b_0)`; weights with a leading seed axis; or a callable
    `init(key, teacher) -> Weights`, e.g. weights built to have given overlaps,
    [`headflow.dynamics.weights_from_overlaps`][]), `dtype` (float32 by default)."""

    model: AttentionBase
    hp: StepSizes
    dim: int = eqx.field(static=True)
    init: Weights | Callable[..., Weights] | None = None
    init_std: tuple[float, float, float] = eqx.field(static=True, default=(0.1, 0.1, 0.0))
    dtype: Any = eqx.field(static=True, default=jnp.float32)

    def start(self, keys, seeds):
        del seeds
        model, dim, dtype, init = self.model, self.dim, self.dtype, self.init
        teachers = jax.vmap(lambda k: make_teacher(k, dim, model.F, model.rho, dtype))(
            keys[:, 0])
        if init is None:
            sk, sv, b0 = self.init_std
            w = jax.vmap(lambda k: init_weights(k, model.H, dim, key_std=sk, value_std=sv,
                                                bias=b0, dtype=dtype))(keys[:, 1])
        elif callable(init) and not isinstance(init, Weights):
            w = jax.vmap(init)(keys[:, 1], teachers)
        else:
            w = init
        w = jax.tree.map(lambda x: x.astype(dtype), w)
        if not model.train_values:
            w = eqx.tree_at(lambda w: w.V, w,
                            jnp.broadcast_to(teachers.vstar[:, None, :], w.V.shape))
        return w, (teachers, keys[:, 2])

    def segment(self, carry, data, starts, counts):
        teachers, keys = data
        return _segment(self.model, self.hp, teachers, carry, keys, starts, counts)

    def check(self, carry, recorded, t_end: float, seeds: list[int]) -> None:
        r, b = recorded
        bad = gather(~bounded(r, axis=(1, 2, 3)) | ~bounded(b, axis=(1, 2)), len(seeds))
        if bool(jnp.any(bad)):
            idx = int(np.argmax(np.asarray(bad)))
            raise DivergenceError(
                f"SGD diverged (seed {seeds[idx]}, D={self.dim}): overlaps became NaN/inf or "
                f"exceeded {BLOWUP:.0e} before t = {t_end:.4g}; try a smaller "
                f"training.lr (now {float(self.hp.lr):g})")

    def states(self, recorded) -> Overlaps:
        rows, biases = recorded
        F = self.model.F
        return jax.vmap(jax.vmap(lambda r, b: Overlaps.from_student_rows(r, b, F)))(rows,
                                                                                   biases)
