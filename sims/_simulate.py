"""Running online SGD over seeds and recording the order parameters on a time grid."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, Int

from dynamics import (Config, DivergenceError, Model, Overlaps, Teacher, Weights, init_weights,
                      make_teacher, population_risk)
from dynamics._sharding import shard_leading
from dynamics.expectations import MonteCarlo

from ._sgd import SGDHyper, advance


class SGDResult(eqx.Module):
    """A recorded SGD run over seeds.

    `t` (T) in units of steps/D, `steps` (T), `overlaps` with leaves `(S, T, ...)`,
    `risk` and `risk_err` (S, T): the exact population risk of the weights at each save point
    (their fields are exactly Gaussian) evaluated by Monte Carlo over the fields with common
    random numbers, and its Monte Carlo standard error.
    """

    t: Float[Array, " T"]
    steps: Int[Array, " T"]
    overlaps: Overlaps
    risk: Float[Array, "S T"]
    risk_err: Float[Array, "S T"]
    seeds: tuple[int, ...] = eqx.field(static=True)
    dim: int = eqx.field(static=True)

    def arrays(self) -> dict[str, np.ndarray]:
        """The `sgd.npz` arrays of the interface spec."""
        ov = self.overlaps
        out = {"t": self.t, "steps": self.steps, "risk": self.risk, "risk_err": self.risk_err,
               "m": ov.m, "q": ov.q, "n": ov.n, "s": ov.s, "b": ov.b, "kv": ov.kv,
               "kvs": ov.kvs, "vks": ov.vks, "seeds": np.asarray(self.seeds)}
        return {k: np.asarray(v) for k, v in out.items()}


def seed_keys(seed: int):
    """`(teacher, init, data)` keys of one run."""
    return jr.split(jr.key(seed), 3)


def save_steps_for(times: np.ndarray, D: int) -> np.ndarray:
    """Steps `round(t·D)` of the save times (non-decreasing)."""
    steps = np.rint(np.asarray(times, dtype=np.float64) * D).astype(np.int64)
    return np.maximum.accumulate(steps)


@eqx.filter_jit
def _segment(model: Model, hp: SGDHyper, teachers: Teacher, w: Weights, keys, starts, counts):
    def one_seed(teacher, w, key):
        def body(w, sc):
            w = advance(model, hp, teacher, w, key, sc[0], sc[1])
            return w, (w.gram_rows(teacher), w.b.astype(jnp.float64))

        return jax.lax.scan(body, w, (starts, counts))

    return jax.vmap(one_seed)(teachers, w, keys)


def simulate(model: Model, hp: SGDHyper, *, dim: int, seeds, save_steps,
             init: Weights | Callable[..., Weights] | None = None,
             init_std: tuple[float, float, float] = (0.1, 0.1, 0.0),
             dtype=jnp.float32, progress: bool = False, segments: int = 20
             ) -> tuple[Overlaps, Teacher, Weights]:
    """Run online SGD for every seed and record the overlaps at `save_steps`.

    **Arguments:**

    - `model`, `hp`: the model and the SGD step sizes.
    - `dim`: D. `seeds`: a list of ints (one independent run each: teacher, init, data).
    - `save_steps`: non-decreasing step counts at which to record (step 0 = the initial state).
    - `init`: `None` (random init with `init_std = (σ_k, σ_v, b_0)`), weights with a leading
      seed axis, or a callable `init(key, teacher) -> Weights` (e.g. weights built to have given
      overlaps, [`dynamics.weights_from_overlaps`][]).
    - `dtype`: float32 (default) or float64.
    - `progress`: a progress bar on stderr.

    **Returns:** `(overlaps (S, T, ...), teachers, final weights)`.

    **Raises:** [`dynamics.DivergenceError`][] when the overlaps become NaN/inf.
    """
    seeds = [int(s) for s in seeds]
    save_steps = np.asarray(save_steps, dtype=np.int64)
    ks = jnp.stack([seed_keys(s) for s in seeds])           # (S, 3)
    teachers = jax.vmap(lambda k: make_teacher(k, dim, model.F, model.rho, dtype))(ks[:, 0])
    if init is None:
        sk, sv, b0 = init_std
        w = jax.vmap(lambda k: init_weights(k, model.H, dim, key_std=sk, value_std=sv, bias=b0,
                                            dtype=dtype))(ks[:, 1])
    elif callable(init) and not isinstance(init, Weights):
        w = jax.vmap(init)(ks[:, 1], teachers)
    else:
        w = init
    w = jax.tree.map(lambda x: x.astype(dtype), w)
    if not model.train_values:
        w = eqx.tree_at(lambda w: w.V, w, jnp.broadcast_to(teachers.vstar[:, None, :], w.V.shape))
    teachers, w, data_keys = shard_leading((teachers, w, ks[:, 2]))

    T = len(save_steps)
    counts = np.diff(save_steps, prepend=0)
    starts = save_steps - counts
    n_seg = max(1, min(segments, T))
    seg = math.ceil(T / n_seg)
    pad = n_seg * seg - T
    starts = np.concatenate([starts, np.full(pad, save_steps[-1])]).reshape(n_seg, seg)
    counts = np.concatenate([counts, np.zeros(pad, np.int64)]).reshape(n_seg, seg)

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=int(save_steps[-1]), unit="step", desc=f"SGD D={dim} x{len(seeds)}",
                   file=sys.stderr, leave=False)
    rows, biases = [], []
    try:
        for i in range(n_seg):
            w, (r, b) = _segment(model, hp, teachers, w, data_keys, jnp.asarray(starts[i]),
                                 jnp.asarray(counts[i]))
            rows.append(r)
            biases.append(b)
            bad = ~jnp.all(jnp.isfinite(r), axis=(1, 2, 3)) | ~jnp.all(jnp.isfinite(b), axis=(1, 2))
            if bool(jnp.any(bad)):
                idx = int(np.argmax(np.asarray(bad)))
                raise DivergenceError(
                    f"SGD diverged (seed {seeds[idx]}, D={dim}): overlaps became NaN/inf before "
                    f"t = {float(save_steps[min((i + 1) * seg, T) - 1]) / dim:.4g}; try a smaller "
                    f"training.lr (now {float(hp.lr):g})")
            if bar is not None:
                bar.update(int(counts[i].sum()))
    finally:
        if bar is not None:
            bar.close()
    rows = jnp.concatenate(rows, axis=1)[:, :T]
    biases = jnp.concatenate(biases, axis=1)[:, :T]
    ov = jax.vmap(jax.vmap(lambda r, b: Overlaps.from_student_rows(r, b, model.F)))(rows, biases)
    return ov, teachers, w


def recorded_risk(model: Model, ov: Overlaps, *, samples: int = 8192, seed: int = 0,
                  batch_size: int = 8) -> tuple[Float[Array, "*batch"], Float[Array, "*batch"]]:
    """Population risk and its Monte Carlo error for overlaps with any leading batch axes
    (fixed nodes for all of them: common random numbers)."""
    backend = MonteCarlo(samples=samples, seed=seed)
    from dynamics import key_dims

    nodes = backend.nodes(key_dims(model))
    batch_shape = ov.b.shape[:-1]
    flat = jax.tree.map(lambda x: x.reshape(-1, *x.shape[len(batch_shape):]), ov)

    @jax.jit
    def run(flat, nodes):
        return jax.lax.map(lambda o: population_risk(model, o, backend, nodes), flat,
                           batch_size=batch_size)

    risk, err = run(flat, nodes)
    return risk.reshape(batch_shape), err.reshape(batch_shape)


def run_sgd(cfg: Config, *, dim: int | None = None, seeds: int | None = None,
            init: Weights | Callable[..., Weights] | None = None, progress: bool = False,
            times: np.ndarray | None = None) -> SGDResult:
    """Online SGD as configured (`[model]`, `[prior]`, `[training]`, `[sim]`, `[output]`);
    `dim`, `seeds` override `[sim]`."""
    model = cfg.build_model()
    D = cfg.sim.dim if dim is None else int(dim)
    n = cfg.sim.seeds if seeds is None else int(seeds)
    seed_list = list(range(cfg.sim.seed, cfg.sim.seed + n))
    times = cfg.save_times() if times is None else np.asarray(times)
    steps = save_steps_for(times, D)
    tr = cfg.training
    ov, _, _ = simulate(model, SGDHyper.from_config(tr), dim=D, seeds=seed_list,
                        save_steps=steps, init=init,
                        init_std=(tr.init_key_std, tr.init_value_std, tr.init_bias),
                        dtype=jnp.dtype(cfg.sim.dtype), progress=progress)
    risk, err = recorded_risk(model, ov, samples=cfg.sim.risk_samples, seed=cfg.ode.seed)
    return SGDResult(t=jnp.asarray(steps / D), steps=jnp.asarray(steps), overlaps=ov, risk=risk,
                     risk_err=err, seeds=tuple(seed_list), dim=D)
