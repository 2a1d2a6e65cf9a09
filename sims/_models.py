"""Online SGD of a model of the family (`docs/models.md`) at finite D, in weight space and
exactly in law in overlap space, over seeds.

Both simulators draw the fields of a fresh input and differentiate the model's own loss with
[`headflow.dynamics.models.sample_gradients`][], the code the theory averages. One step on a batch
of B inputs `x_b ~ N(0, I_D)` moves the student rows and the trained scalar parameters by

    w ← (1 − ηλ/D) w − (η/(B√D)) Σ_b G_b x_b,      p ← p − (η_p/(BD)) Σ_b ∂ℓ_b/∂p.

In overlap space (`docs/overlap-sgd.md`) the fields of all rows are `λ_b = C c_b` with
`Ω = C Cᵀ` and `c_b ~ N(0, I_P)`, and `x_b·x_b' = c_b·c_b' + O_bb'` with
`O ~ Wishart(D − P, I_B)` independent of them, so the step is an exact map of `(Ω, params)`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from headflow.dynamics import DivergenceError, HeadflowError, StepSizes, require_x64
from headflow.dynamics.models import AbstractModel, GramState, ModelWeights, sample_gradients
from headflow.dynamics.ode import BLOWUP, bounded
from headflow.dynamics.sharding import gather

from ._wishart import as_float64, bartlett, chi_square, psd_factor
from ._runs import run_segments, save_steps, seed_keys


def batch_gradients(model: AbstractModel, params, lam: Float[Array, "B P"],
                    xi: Float[Array, " B"]) -> tuple[Float[Array, "B S"], dict[str, Array]]:
    """Per-sample `(G, ∂ℓ/∂params)` of a batch (leading axis B)."""
    return jax.vmap(lambda la, x: sample_gradients(model, params, la, x))(lam, xi)


def _param_step(model: AbstractModel, hp: StepSizes, params, gp, D):
    return {k: (v - (hp.lr_bias / D) * jnp.mean(gp[k], axis=0) if k in model.trained else v)
            for k, v in params.items()}


# -- weight space ----------------------------------------------------------------------------------

def weight_step(model: AbstractModel, hp: StepSizes, w: ModelWeights, key: PRNGKeyArray
                ) -> ModelWeights:
    """One online SGD step of the weights on a fresh batch."""
    D = w.D
    dtype = w.students.dtype
    kx, kn = jr.split(key)
    X = jr.normal(kx, (hp.batch, D), dtype=dtype)
    xi = jr.normal(kn, (hp.batch,), dtype=dtype)
    sqrt_d = jnp.sqrt(jnp.asarray(D, dtype))
    rows = jnp.concatenate([w.students, w.teachers])
    lam = X @ rows.T / sqrt_d                                          # (B, P)
    G, gp = batch_gradients(model, w.params, lam, xi)
    decay = 1.0 - hp.lr * hp.weight_decay / D
    students = decay * w.students - (hp.lr / (hp.batch * sqrt_d)) * (G.T @ X)
    params = _param_step(model, hp, w.params, gp, D)
    return ModelWeights(students=students.astype(dtype), teachers=w.teachers,
                        params={k: v.astype(w.params[k].dtype) for k, v in params.items()})


# -- overlap space ---------------------------------------------------------------------------------

class ChainState(eqx.Module):
    """One run of the chain: the state and the first step at which Ω failed
    [`psd_factor`][]'s check (`fail_step`, −1: never)."""

    state: GramState
    fail_step: Array


def chain_step(model: AbstractModel, hp: StepSizes, dim, cs: ChainState, key: PRNGKeyArray,
               step) -> ChainState:
    """One online SGD step of `(Ω, params)`, exact in law."""
    st = cs.state
    B, P, S = hp.batch, model.n_rows, model.n_students
    D = jnp.asarray(dim, jnp.float64)
    kc, kn, kw, kb = jr.split(key, 4)
    C, ok, _ = psd_factor(st.gram)
    c = jr.normal(kc, (B, P), dtype=jnp.float64)
    xi = jr.normal(kn, (B,), dtype=jnp.float64)
    lam = c @ C.T                                                      # (B, P)
    G, gp = batch_gradients(model, st.params, lam, xi)
    T = bartlett(chi_square(kw, D - P - jnp.arange(B)),
                 jr.normal(kb, (B * (B - 1) // 2,), dtype=jnp.float64))
    tokens = c @ c.T + T @ T.T                                         # x_b·x_b'
    decay = 1.0 - hp.lr * hp.weight_decay / D
    GL = G.T @ lam                                                     # Σ_b G_b λ_bᵀ (S, P)
    om = st.gram
    rows = decay * om[:S] - (hp.lr / (B * D)) * GL
    ss = (decay**2 * om[:S, :S] - decay * (hp.lr / (B * D)) * (GL[:, :S] + GL[:, :S].T)
          + (hp.lr**2 / (B**2 * D)) * (G.T @ (tokens / D) @ G))
    gram = om.at[:S, :S].set(ss).at[:S, S:].set(rows[:, S:]).at[S:, :S].set(rows[:, S:].T)
    params = _param_step(model, hp, st.params, gp, D)
    first = (cs.fail_step < 0) & ~ok
    return ChainState(state=GramState(gram=gram, params=params),
                      fail_step=jnp.where(first, step, cs.fail_step))


# -- runs over seeds -------------------------------------------------------------------------------

def _weights_segment(model, hp, w, keys, starts, counts):
    def one_seed(w, key):
        def body(w, sc):
            def step(k, w):
                return weight_step(model, hp.at(k / w.D), w, jr.fold_in(key, k))

            w = jax.lax.fori_loop(sc[0], sc[0] + sc[1], step, w)
            return w, w.state()

        return jax.lax.scan(body, w, (starts, counts))

    return jax.vmap(one_seed)(w, keys)


def _chain_segment(model, hp, dim, cs, keys, starts, counts):
    def one_seed(cs, key):
        def body(cs, sc):
            def step(k, cs):
                return chain_step(model, hp.at(k / dim), dim, cs, jr.fold_in(key, k), k)

            cs = jax.lax.fori_loop(sc[0], sc[0] + sc[1], step, cs)
            return cs, cs.state

        return jax.lax.scan(body, cs, (starts, counts))

    return jax.vmap(one_seed)(cs, keys)


_weights_jit = eqx.filter_jit(_weights_segment)
_chain_jit = eqx.filter_jit(_chain_segment)


def simulate_model(model: AbstractModel, hp: StepSizes, *, dim: int, seeds, times,
                   space: str = "weights", init: GramState | None = None,
                   dtype: Any = jnp.float32, progress: bool = False,
                   segments: int = 20) -> GramState:
    """Online SGD of `model` for every seed, recording `(Ω, params)` at the save times.

    **Arguments:** `hp` the step sizes; `dim` D; `seeds` a list of ints (seed `s`: its
    initialization from `fold_in`-free keys of `s`, its data from another); `times` in
    `t = steps/D` (recorded after `round(t·D)` steps); `space` `"weights"` (D-dimensional
    weights in `dtype`) or `"overlaps"` (the exact chain, float64; its start is the Gram matrix
    of the same initial weights); `init` one state to start every seed from (None: the model's
    random initialization); `progress` a bar on stderr.

    **Returns:** the states, leaves `(S, T, ...)` (float64).

    **Raises:** [`headflow.dynamics.DivergenceError`][] when a run becomes NaN/inf or exceeds
    `headflow.dynamics.ode.BLOWUP` (or, in overlap space, its Gram matrix stops being PSD).
    """
    require_x64("the SGD simulators (their overlaps)")
    dim = int(dim)
    P = model.n_rows
    if space == "overlaps" and dim < P + hp.batch + 1:
        raise HeadflowError(f"overlap-space SGD needs D >= P + B + 1 = {P + hp.batch + 1} "
                            f"(got D = {dim})")
    seeds = [int(s) for s in seeds]
    steps_at = save_steps(np.asarray(times, dtype=np.float64).reshape(-1), dim)
    ks = jnp.stack([seed_keys(s) for s in seeds])
    n = len(seeds)
    wdtype = jnp.float64 if space == "overlaps" else dtype
    if init is None:
        w = jax.vmap(lambda k: model.init_weights(k, dim, wdtype))(ks[:, 1])
    else:
        init = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), init)
        model.check_state(init)
        W = jax.vmap(lambda k: _rows_with_gram(k, init.gram, dim))(ks[:, 0])
        S = model.n_students
        w = ModelWeights(students=W[:, :S].astype(wdtype), teachers=W[:, S:].astype(wdtype),
                         params=jax.tree.map(lambda x: jnp.broadcast_to(x, (n, *x.shape)),
                                             init.params))
    keys = ks[:, 2]
    if space == "overlaps":
        carry: Any = jax.vmap(lambda ww: ChainState(state=ww.state(),
                                                    fail_step=jnp.array(-1, jnp.int64)))(w)
        segment: Callable = lambda c, k, a, b: _chain_jit(  # noqa: E731
            model, as_float64(hp), jnp.asarray(dim, jnp.float64), c, k, a, b)
    else:
        carry = w
        segment = lambda c, k, a, b: _weights_jit(model, hp, c, k, a, b)  # noqa: E731

    def check(carry: Any, states: GramState, t_end: float) -> None:
        if space == "overlaps":
            fail = np.asarray(gather(carry.fail_step, n))
            if np.any(fail >= 0):
                j = int(np.argmin(np.where(fail >= 0, fail, np.iinfo(np.int64).max)))
                raise DivergenceError(f"SGD in overlap space (seed {seeds[j]}, D={dim}): the "
                                      "Gram matrix stopped being positive semi-definite at "
                                      f"t = {fail[j] / dim:.6g}; try a smaller training.lr")
        bad = np.asarray(gather(~bounded(states.gram, axis=(1, 2, 3)), n))
        if bool(np.any(bad)):
            j = int(np.argmax(bad))
            raise DivergenceError(f"SGD diverged (seed {seeds[j]}, D={dim}): the order "
                                  f"parameters became NaN/inf or exceeded {BLOWUP:.0e} before "
                                  f"t = {t_end:.4g}; try a smaller training.lr")

    _, out = run_segments(segment, carry, keys, steps_at, dim=dim, seeds=n, segments=segments,
                          check=check, progress=progress, desc=f"SGD ({space})")
    return gather(out, n)


def _rows_with_gram(key: PRNGKeyArray, gram: Float[Array, "P P"], dim: int
                    ) -> Float[Array, "P D"]:
    """Rows of dimension `dim` whose Gram matrix over D is exactly `gram`: `C E` with
    `gram = C Cᵀ` and `E` random orthogonal rows of norm `√D`."""
    P = gram.shape[-1]
    frame, _ = jnp.linalg.qr(jr.normal(key, (dim, P), dtype=jnp.float64))
    C, _, _ = psd_factor(gram)
    return (C @ frame.T) * jnp.sqrt(jnp.asarray(dim, jnp.float64))

