"""Shared helpers of the tests: models, random weights, real finite-D sequences, z-scores,
command lines started and interrupted in subprocesses."""

from __future__ import annotations

import json
import contextlib
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from headflow.dynamics import Model, Teacher, Weights, make_teacher, sample_data
from headflow.dynamics.activations import activation_names, get_activation
from headflow.dynamics.priors import AbstractPrior, Discrete, FlippedSpike, Gaussian

ACTIVATIONS = activation_names()
Z = 5.0  # z-score threshold; all seeds are fixed, so a miss beyond 5σ means a bug


def make_model(activation: str = "bayes_softmax", *, L: int = 3, H: int = 2,
               prior: AbstractPrior | None = None, noise: float = 0.0, rho: float = 1.0,
               train_values: bool = True) -> Model:
    prior = FlippedSpike(3.0, 0.7, [1.0]) if prior is None else prior
    return Model(L=L, H=H, F=prior.F, activation=get_activation(activation), prior=prior,
                 noise=noise, rho=rho, train_values=train_values)


def with_activation(model: Model, activation: str, H: int | None = None) -> Model:
    return dataclasses.replace(model, activation=get_activation(activation),
                               H=model.H if H is None else H)


def prior_covariance(prior: AbstractPrior) -> np.ndarray:
    """`Cov θ` (full matrix)."""
    if isinstance(prior, Gaussian):
        return np.diag(np.asarray(prior.variance()))
    pts, w = np.asarray(prior.points), np.asarray(prior.weights)
    d = pts - w @ pts
    return np.einsum("s,sf,sg->fg", w, d, d)


def correlated_weights(key, teacher: Teacher, H: int, *, scale: float = 1.0,
                       teacher_mix: float = 1.0, dtype=jnp.float64) -> Weights:
    """Off-manifold weights: keys and values are random mixtures of the teacher directions, of
    each other and of independent noise, so every block of the Gram matrix (cross overlaps
    included) is O(1)."""
    D, F = teacher.D, teacher.kstar.shape[0]
    k1, k2, k3, k4 = jr.split(key, 4)
    T = teacher.rows().astype(jnp.float64)                                   # (F+1, D)
    noise = jr.normal(k1, (2 * H, D), dtype=jnp.float64)
    mix_t = teacher_mix * jr.normal(k2, (2 * H, F + 1), dtype=jnp.float64)
    S = noise + mix_t @ T
    mix_s = 0.6 * jr.normal(k3, (2 * H, 2 * H), dtype=jnp.float64)
    S = S + jnp.tril(mix_s, -1) @ S                                           # correlate rows
    S = scale * S / jnp.sqrt(jnp.mean(S**2, axis=1, keepdims=True))
    b = jr.normal(k4, (H,), dtype=jnp.float64)
    return Weights(K=S[:H].astype(dtype), V=S[H:].astype(dtype), b=b.astype(dtype))


def teacher_for(model: Model, D: int, seed: int = 0, dtype=jnp.float64) -> Teacher:
    return make_teacher(jr.key(seed), D, model.F, model.rho, dtype=dtype)


@eqx.filter_jit
def _chunk_fields(key, teacher: Teacher, model: Model, W: jax.Array, batch: int):
    X, y = sample_data(key, teacher, model, batch)
    lam = jnp.einsum("pd,bld->blp", W.astype(X.dtype), X) / jnp.sqrt(jnp.asarray(teacher.D,
                                                                                X.dtype))
    return lam.astype(jnp.float64), y.astype(jnp.float64)


def _optimizations_enabled() -> bool:
    return not jax.config.values.get("jax_disable_most_optimizations", False)


def set_xla_optimizations(enabled: bool) -> None:
    """Switch XLA's optimizations (`jax_disable_most_optimizations`). When the setting changes,
    the programs in memory are dropped first: JAX's in-memory caches do not key on the setting
    (its persistent cache does), so a program compiled at the other setting would otherwise be
    reused as it was compiled."""
    if _optimizations_enabled() != enabled:
        jax.clear_caches()
        jax.config.update("jax_disable_most_optimizations", not enabled)


@contextlib.contextmanager
def xla_optimizations(enabled: bool):
    """Set XLA's optimizations for the block ([`set_xla_optimizations`][]), then restore the
    previous setting."""
    before = _optimizations_enabled()
    set_xla_optimizations(enabled)
    try:
        yield
    finally:
        set_xla_optimizations(before)


FAST_COMPILE_ENV = {"JAX_DISABLE_MOST_OPTIMIZATIONS": "1"}
"""The environment of a command line a test starts whose programs are compiled far more than run
(small configs checking files, caches and errors): XLA at -O0, as in the compile-bound modules
(tests/conftest.py). The flag is part of the persistent cache's key, so such runs share their
programs with each other, not with the test process's."""


def optimized():
    """Compile with XLA's optimizations even where conftest turned most of them off: for the
    few programs whose run time (not compile time) dominates, such as the sequence sampler."""
    return xla_optimizations(True)


def sampled_fields(key, teacher: Teacher, model: Model, W, n: int, chunk: int = 4096):
    """Real finite-D sequences (`headflow.dynamics.sample_data`) reduced to their fields:
    `λ = X Wᵀ/√D` (n, L, P) and the labels y (n)."""
    # the activation and H do not enter the data: normalize them so that the jitted sampler is
    # compiled once per (prior, L, noise, D, P)
    model = dataclasses.replace(model, activation=get_activation("softmax"), H=1)
    lams, ys = [], []
    with optimized():
        for i in range(-(-n // chunk)):
            lam, y = _chunk_fields(jr.fold_in(key, i), teacher, model, jnp.asarray(W), chunk)
            lams.append(np.asarray(lam))
            ys.append(np.asarray(y))
    return np.concatenate(lams)[:n], np.concatenate(ys)[:n]


def squared_errors(models, teacher: Teacher, w: Weights, key, n: int, chunk: int = 4096):
    """`(ŷ − y)²` of each model (same weights, same sequences), shape (len(models), n)."""
    W = jnp.concatenate([w.K, w.V]).astype(jnp.float64)
    lam, y = sampled_fields(key, teacher, models[0], W, n, chunk)
    H = w.K.shape[0]
    chi = jnp.swapaxes(jnp.asarray(lam[..., :H]), -1, -2)
    z = jnp.swapaxes(jnp.asarray(lam[..., H:]), -1, -2)
    b = jnp.asarray(w.b, jnp.float64)
    out = []
    for m in models:
        yhat = jax.jit(jax.vmap(lambda c, zz: m.predict(c, zz, b)))(chi, z)
        out.append((np.asarray(yhat) - y) ** 2)
    return np.stack(out)


def mean_se(x, axis=-1):
    x = np.asarray(x)
    return x.mean(axis), x.std(axis, ddof=1) / np.sqrt(x.shape[axis])


def second_moment_z(x: np.ndarray, mean: np.ndarray, target: np.ndarray) -> np.ndarray:
    """z-scores of the empirical covariance `mean((x−μ)(x−μ)ᵀ)` (μ known) against `target`,
    each entry with its own standard error (from the empirical fourth moments)."""
    d = x - mean
    prod = d[:, :, None] * d[:, None, :]
    est = prod.mean(0)
    se = prod.std(0, ddof=1) / np.sqrt(len(x))
    return (est - target) / np.maximum(se, 1e-300)


def first_moment_z(x: np.ndarray, target: np.ndarray) -> np.ndarray:
    est, se = mean_se(x, axis=0)
    return (est - target) / np.maximum(se, 1e-300)


PRIORS = {
    "flipped_spike": lambda: FlippedSpike(3.0, 0.7, [1.0]),
    "discrete_2d": lambda: Discrete([[1.5, 0.0], [-1.0, 1.0], [0.3, -2.0]], [0.3, 0.5, 0.2]),
    "gaussian_2d": lambda: Gaussian([0.8, -0.4], [2.0, 0.5]),
}


def off_manifold_state(on_manifold: bool):
    """A fixed H = 2, F = 1 state with non-zero cross overlaps (its manifold part when
    `on_manifold`), shared by the one-step drift and diffusion tests."""
    import jax.numpy as jnp

    import headflow.dynamics as d

    ov = d.Overlaps(m=jnp.array([[0.6], [-0.4]]), q=jnp.array([[1.2, 0.3], [0.3, 0.9]]),
                    n=jnp.array([0.5, 0.3]), s=jnp.array([[0.7, 0.1], [0.1, 0.5]]),
                    b=jnp.array([0.3, -0.2]), kv=jnp.array([[0.2, -0.1], [0.05, 0.15]]),
                    kvs=jnp.array([0.1, -0.15]), vks=jnp.array([[0.2], [-0.1]]))
    return ov.on_manifold() if on_manifold else ov


def strict_json(text: str):
    """`json.loads` that refuses the non-standard constants NaN and ±Infinity."""
    def bad(name):
        raise ValueError(f"non-standard JSON constant {name}")
    return json.loads(text, parse_constant=bad)


def one_line_error(capsys, *needles):
    """The captured stderr is one `headflow … error: …` line containing every needle."""
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("headflow") and "error:" in err[0], err
    for n in needles:
        assert n in err[0], (n, err)


ROOT = Path(__file__).resolve().parents[1]


def start_headflow(argv, out: Path) -> subprocess.Popen:
    """Start `headflow ARGV --out OUT` in a subprocess, from the folder that holds OUT's first
    missing parent (stdout and stderr piped, as text)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cwd = next(p for p in out.parents if p.exists())
    return subprocess.Popen([sys.executable, "-m", "headflow.validation", *argv, "--out", str(out)],
                            cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def assert_stopped_cleanly(proc: subprocess.Popen, code: int, left: Path, what) -> None:
    """A command line sent a signal: exit status `code` (128 + signal), one line `headflow:
    interrupted`, no traceback, and nothing left at `left` (the nested output folder's first
    missing parent)."""
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == code, (what, proc.returncode, stderr[-2000:])
    assert "headflow: interrupted" in stderr, (what, stderr[-2000:])
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, (what, stderr)
    assert not left.exists(), what
