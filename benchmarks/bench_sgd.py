"""Benchmark: online SGD steps of `sims` against the cost of their random numbers and against a
plain numpy loop.

    python benchmarks/bench_sgd.py [--steps N] [--numpy-steps M] [--variants]

Setting: D = 4000, L = 4, H = 2, 16 seeds vmapped, float32, the default configuration otherwise
(Bayes-softmax, flipped spike, η = η_b = 1, B = 1). Reported, per step and per seed:

- `sims`: `headflow.sims.attention.simulate` (jitted `fori_loop` over steps, `vmap` over seeds);
  the compile
time
  is measured separately, and the fixed per-call cost (teacher QR, init, transfers) is removed by
  timing two run lengths and taking the difference;
- (a) the bare cost of that step's Gaussians in JAX: the same `jax.random.normal` draws of shape
  `(16, B, L, D)` per step (one key per seed, `fold_in` of the step), in a jitted `fori_loop`;
- (b) a plain numpy loop of the same update: vectorized over seeds, Python loop over steps (draw
  the data, fields, Bayes-softmax, the gradient in closed form, the update).

Targets: `sims/(a) ≤ 1.5` (the step costs little beyond its random numbers) and
`(b)/sims ≥ 3`. `--variants` also times alternative formulations of the step (see
`VARIANTS`), to find where the time goes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import jax.random as jr  # noqa: E402

jax.config.update("jax_enable_x64", True)  # overlaps in float64; the simulator asks for float32
from headflow import dynamics  # noqa: E402
from headflow import sims  # noqa: E402
from headflow.dynamics import load_config, make_teacher, sample_data  # noqa: E402

D, L, H, S = 4000, 4, 2, 16


def _setup():
    cfg = load_config(None, [f"sim.dim={D}", f"sim.seeds={S}", f"model.L={L}", f"model.H={H}"])
    return cfg, cfg.build_model(), dynamics.StepSizes.from_config(cfg.training)


class _Clock:
    """Wall time and this process's CPU time (all threads). On a machine shared with other
    work the CPU time is the more stable measure of the cost; without contention and for
    single-threaded work the two agree."""

    def __init__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def stop(self):
        return np.array([time.perf_counter() - self.wall, time.process_time() - self.cpu])


def _timed(fn):
    c = _Clock()
    out = fn()
    jax.block_until_ready(out)
    return c.stop(), out


# -- sims ----------------------------------------------------------------------------------------

def bench_sims(model, hp, steps):
    seeds = list(range(S))

    def run(n):
        run = sims.attention.simulate(model, hp, dim=D, seeds=seeds, times=[0.0, n / D],
                            dtype=jnp.float32)
        return run.overlaps.q, run.weights.K

    t_first, _ = _timed(lambda: run(1))         # compile + 1 step
    t_again, _ = _timed(lambda: run(1))         # the same call, compiled
    n1 = max(steps // 5, 1)
    t1, _ = _timed(lambda: run(n1))
    t2, _ = _timed(lambda: run(steps))
    per_step = (t2 - t1) / (steps - n1)
    return dict(compile=t_first - t_again, fixed=t_again, per_step=per_step,
                per_step_seed=per_step / S)


# -- (a) the Gaussians alone --------------------------------------------------------------------

def bench_draws(batch, steps):
    keys = jr.split(jr.key(0), S)

    @jax.jit
    def draw(keys, n):
        def body(k, X):
            return jax.vmap(lambda key: jr.normal(jr.fold_in(key, k), (batch, L, D),
                                                  dtype=jnp.float32))(keys)
        return jax.lax.fori_loop(0, n, body, jnp.zeros((S, batch, L, D), jnp.float32))

    t_first, _ = _timed(lambda: draw(keys, 1))
    t_again, _ = _timed(lambda: draw(keys, 1))
    n1 = max(steps // 5, 1)
    t1, _ = _timed(lambda: draw(keys, n1))
    t2, _ = _timed(lambda: draw(keys, steps))
    per_step = (t2 - t1) / (steps - n1)
    return dict(compile=t_first - t_again, per_step=per_step, per_step_seed=per_step / S)


# -- (b) numpy ---------------------------------------------------------------------------------

def numpy_gradients(K, V, b, X, y):
    """Closed-form gradients of the batch-mean loss for Bayes-softmax heads (per seed axis s):
    `A = softmax over (h, ℓ) of χ + b`, `ŷ = Σ A z`, `∂ŷ/∂χ_{hℓ} = A_{hℓ}(z_{hℓ} − ŷ)`,
    `∂ŷ/∂z = A`, `∂ŷ/∂b_h = Σ_ℓ A_{hℓ}(z_{hℓ} − ŷ)`; the loss `½(ŷ − y)²` averaged over B."""
    sqrt_d = np.float32(np.sqrt(K.shape[-1]))
    chi = np.einsum("shd,sbld->sbhl", K, X) / sqrt_d
    z = np.einsum("shd,sbld->sbhl", V, X) / sqrt_d
    u = chi + b[:, None, :, None]
    u = u - u.max(axis=(2, 3), keepdims=True)
    e = np.exp(u)
    A = e / e.sum(axis=(2, 3), keepdims=True)
    yhat = (A * z).sum(axis=(2, 3))
    err = (yhat - y) / X.shape[1]                                   # (s, b), batch mean
    g_chi = err[:, :, None, None] * A * (z - yhat[:, :, None, None])
    g_z = err[:, :, None, None] * A
    g_b = g_chi.sum(axis=3).sum(axis=1)
    return g_chi, g_z, g_b


def numpy_step(rng, kstar, vstar, K, V, b, batch, lr, lr_bias, points, weights):
    sqrt_d = np.float32(np.sqrt(D))
    X = rng.standard_normal((S, batch, L, D), dtype=np.float32)
    idx = rng.choice(len(weights), size=(S, batch), p=weights)
    theta = points[idx].astype(np.float32)                          # (s, b, F)
    eps = rng.integers(0, L, size=(S, batch))
    si, bi = np.meshgrid(np.arange(S), np.arange(batch), indexing="ij")
    X[si, bi, eps] += np.einsum("sbf,sfd->sbd", theta, kstar) / sqrt_d
    y = np.einsum("sbd,sd->sb", X[si, bi, eps], vstar) / sqrt_d
    g_chi, g_z, g_b = numpy_gradients(K, V, b, X, y)
    K -= (lr / sqrt_d) * np.einsum("sbhl,sbld->shd", g_chi, X)
    V -= (lr / sqrt_d) * np.einsum("sbhl,sbld->shd", g_z, X)
    b -= (lr_bias / D) * g_b
    return K, V, b


def bench_numpy(model, hp, steps):
    rng = np.random.default_rng(0)
    teachers = [make_teacher(jr.key(s), D, model.F, model.rho, jnp.float32) for s in range(S)]
    kstar = np.stack([np.asarray(t.kstar) for t in teachers])
    vstar = np.stack([np.asarray(t.vstar) for t in teachers])
    K = (0.1 * rng.standard_normal((S, H, D))).astype(np.float32)
    V = (0.1 * rng.standard_normal((S, H, D))).astype(np.float32)
    b = np.zeros((S, H), np.float32)
    points = np.asarray(model.prior.points)
    weights = np.asarray(model.prior.weights)
    args = (hp.batch, np.float32(hp.lr), np.float32(hp.lr_bias), points, weights)
    numpy_step(rng, kstar, vstar, K, V, b, *args)                   # warm-up
    c = _Clock()
    for _ in range(steps):
        K, V, b = numpy_step(rng, kstar, vstar, K, V, b, *args)
    per_step = c.stop() / steps
    c = _Clock()
    for _ in range(steps):
        rng.standard_normal((S, hp.batch, L, D), dtype=np.float32)
    rng_only = c.stop() / steps
    assert np.all(np.isfinite(K))
    return dict(per_step=per_step, per_step_seed=per_step / S, rng_seed=rng_only / S)


def check_numpy_gradients(model):
    """The numpy closed form equals `headflow.sims.attention.field_gradients` (autodiff of
    `Model.loss`)."""
    teacher = make_teacher(jr.key(0), D, model.F, model.rho, jnp.float32)
    w = dynamics.init_weights(jr.key(1), H, D, key_std=1.0, value_std=1.0, bias=0.3)
    X, y = sample_data(jr.key(2), teacher, model, 3)
    g = sims.attention.field_gradients(model, w, X, y)
    n = numpy_gradients(np.asarray(w.K)[None], np.asarray(w.V)[None], np.asarray(w.b)[None],
                        np.asarray(X)[None], np.asarray(y)[None])
    return max(float(np.max(np.abs(np.asarray(a) - c[0]))) for a, c in zip(g, n))


# -- variants of the jitted step (profiling) -----------------------------------------------------

def _variant_runner(step_fn, model, hp, steps):
    """Time `step_fn(teacher, w, key) -> w` in the same fori_loop/vmap harness as sims."""
    seeds = jnp.stack([jr.split(jr.key(s), 3) for s in range(S)])   # as sims seeds its runs
    teachers = jax.vmap(lambda k: make_teacher(k, D, model.F, model.rho, jnp.float32))(seeds[:, 0])
    w0 = jax.vmap(lambda k: dynamics.init_weights(k, H, D, key_std=0.1, value_std=0.1, bias=0.0))(
        seeds[:, 1])

    @jax.jit
    def run(teachers, w, keys, n):
        def one(teacher, w, key):
            return jax.lax.fori_loop(0, n, lambda k, w: step_fn(teacher, w, jr.fold_in(key, k)), w)
        return jax.vmap(one)(teachers, w, keys)

    _timed(lambda: run(teachers, w0, seeds[:, 2], 1))
    n1 = max(steps // 5, 1)
    t1, _ = _timed(lambda: run(teachers, w0, seeds[:, 2], n1))
    t2, _ = _timed(lambda: run(teachers, w0, seeds[:, 2], steps))
    return (t2 - t1) / (steps - n1) / S


def _variants(model, hp):
    from headflow.dynamics import Weights

    def sims_step(teacher, w, key):
        return sims.attention.sgd_step(model, hp, teacher, w, key)

    def no_data(teacher, w, key):
        # the step on a fixed sequence: everything except drawing the data
        X = jnp.ones((hp.batch, L, D), jnp.float32) * 0.01
        y = jnp.zeros((hp.batch,), jnp.float32)
        g_chi, g_z, g_b = sims.attention.field_gradients(model, w, X, y)
        s = hp.lr / jnp.sqrt(jnp.float32(D))
        return Weights(K=w.K - s * jnp.einsum("bhl,bld->hd", g_chi, X),
                       V=w.V - s * jnp.einsum("bhl,bld->hd", g_z, X), b=w.b - g_b / D)

    def data_only(teacher, w, key):
        X, y = sample_data(key, teacher, model, hp.batch)
        return Weights(K=w.K + X[0, :H] * 1e-9, V=w.V, b=w.b + y[0] * 1e-9)

    def fused(teacher, w, key):
        # one matmul for all fields and one for all weight gradients
        X, y = sample_data(key, teacher, model, hp.batch)
        W = jnp.concatenate([w.K, w.V])
        f = jnp.einsum("pd,bld->bpl", W, X) / jnp.sqrt(jnp.float32(D))
        chi, z = f[:, :H], f[:, H:]
        g_chi, g_z, g_b = jax.grad(
            lambda c, zz, bb: jnp.mean(jax.vmap(model.loss, (0, 0, None, 0))(c, zz, bb, y)),
            argnums=(0, 1, 2))(chi, z, w.b)
        G = jnp.concatenate([g_chi, g_z], axis=1)
        W = W - hp.lr / jnp.sqrt(jnp.float32(D)) * jnp.einsum("bpl,bld->pd", G, X)
        return Weights(K=W[:H], V=W[H:], b=w.b - hp.lr_bias / D * g_b)

    def rbg_data(teacher, w, key):
        # the same step with the data drawn from an `rbg` key (XLA's RngBitGenerator)
        kk = jr.key_data(key).reshape(-1)
        rkey = jr.wrap_key_data(jnp.concatenate([kk, kk]).astype(jnp.uint32), impl="rbg")
        return sims.attention.sgd_step(model, hp, teacher, w, rkey)

    return dict(sims_step=sims_step, no_data=no_data, data_only=data_only, fused=fused,
                rbg_data=rbg_data)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=2000, help="JAX steps per timing (default 2000)")
    p.add_argument("--numpy-steps", type=int, default=200, help="numpy steps (default 200)")
    p.add_argument("--variants", action="store_true", help="also time variants of the step")
    args = p.parse_args(argv)

    cfg, model, hp = _setup()
    print(f"jax {jax.__version__} on {jax.devices()[0].platform} x{jax.device_count()}, "
          f"{os.cpu_count()} CPUs; D={D} L={L} H={H} seeds={S} batch={hp.batch} float32, "
          f"activation={model.activation.name}, steps={args.steps}, "
          f"numpy steps={args.numpy_steps}")
    print(f"numpy closed-form gradient vs sims.attention.field_gradients: max |diff| = "
          f"{check_numpy_gradients(model):.2e}")

    t0 = time.perf_counter()
    r_sims = bench_sims(model, hp, args.steps)
    r_draw = bench_draws(hp.batch, args.steps)
    r_np = bench_numpy(model, hp, args.numpy_steps)
    us = 1e6

    def both(x):  # "wall / cpu"
        return f"{x[0] * us:8.2f} / {x[1] * us:8.2f}"

    print("per step and seed, in microseconds:              wall /      cpu")
    print(f"sims         : {both(r_sims['per_step_seed'])}   ({r_sims['per_step'][0] * 1e3:.3f} ms "
          f"wall per step of {S} seeds); compile {r_sims['compile'][0]:.2f} s wall, fixed cost "
          f"per call {r_sims['fixed'][0]:.2f} s")
    print(f"(a) draws    : {both(r_draw['per_step_seed'])}   "
          f"(compile {r_draw['compile'][0]:.2f} s)")
    print(f"(b) numpy    : {both(r_np['per_step_seed'])}   (of which numpy's normals alone: "
          f"{both(r_np['rng_seed'])})")
    ra = r_sims["per_step"] / r_draw["per_step"]
    rb = r_np["per_step"] / r_sims["per_step"]
    for i, clock in enumerate(("wall", "cpu")):
        print(f"[{clock:4s}] sims/(a) = {ra[i]:.2f} (target <= 1.5: "
              f"{'met' if ra[i] <= 1.5 else 'MISSED'});  (b)/sims = {rb[i]:.2f} (target >= 3: "
              f"{'met' if rb[i] >= 3 else 'MISSED'})")
    if args.variants:
        print("variants of the step (same harness), per step and seed:   wall /      cpu")
        for name, fn in _variants(model, hp).items():
            print(f"  {name:10s}: {both(_variant_runner(fn, model, hp, args.steps))}")
    print(f"benchmark wall time {time.perf_counter() - t0:.1f} s; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")

if __name__ == "__main__":
    main()
