"""Ensembles of SDE paths of a configuration: the `headflow sde` engine, the same for every
model (what is model-specific comes from the model's methods: `sde_terms`, `start_sampler`,
`check_dim`, `state_risk`)."""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Bool, Float, Key

from .._errors import HeadflowError, require_x64
from .._stop import check_stop
from ..config import Config
from ..expectations import AUTO_MAX_SAMPLES, MIN_SAMPLES, MonteCarlo, get_expectation
from ..measures import escape_crossing
from ..ode import NOT_DIFFERENTIATED, bounded, model_arrays
from ..sharding import gather, map_batched, shard_leading
from ._diffusion import AbstractDiffusion
from ._solve import (AbstractBrownian, OverlapSDE, domain, get_brownian, get_sde_solver,
                     solve_paths, step_grid)


class SDEResult(eqx.Module):
    """An ensemble of SDE paths: `t` (T), `overlaps` (leaves `(N, T, ...)`), the population
    risk `risk` (N, T) with its error `risk_err`, and the domain check: `valid` (N, T), whether
    each saved state is finite and a PSD Gram matrix, and `first_invalid` (N), the first save
    time at which a path is not (NaN: never). Invalid paths are kept as computed."""

    t: Float[Array, " T"]
    overlaps: Any
    risk: Float[Array, "N T"]
    risk_err: Float[Array, "N T"]
    valid: Bool[Array, "N T"]
    first_invalid: Float[Array, " N"]
    dim: int = eqx.field(static=True, default=0)
    info: dict = eqx.field(static=True, default_factory=dict)
    model: Any = None
    """The model (its `named` view gives the arrays, its `escape_observable` the escape)."""

    def arrays(self) -> dict[str, np.ndarray]:
        """The `sde.npz` arrays: those of `sgd.npz` with a path axis, plus `valid` and
        `first_invalid`."""
        named = model_arrays(self.model, self.overlaps)
        return {"t": np.asarray(self.t), "risk": np.asarray(self.risk),
                "risk_err": np.asarray(self.risk_err), **named,
                "valid": np.asarray(self.valid), "first_invalid": np.asarray(self.first_invalid)}

    @property
    def paths_valid(self) -> np.ndarray:
        """Whether each path stayed in the domain at every save time."""
        return np.all(np.asarray(self.valid), axis=1)

    @property
    def paths_bounded(self) -> np.ndarray:
        """Whether each path's overlaps are finite and below the blow-up level
        (`headflow.dynamics.ode.BLOWUP`) at every save time; a path that is not has diverged."""
        leaves = [np.asarray(x).reshape(np.shape(self.risk)[0], -1)
                  for x in jax.tree.leaves(self.overlaps)]
        y = np.concatenate(leaves, axis=1)
        return np.asarray(bounded(y, axis=1))

    def escape_times(self) -> np.ndarray:
        """Each path's escape time (`headflow.dynamics.measures.escape_crossing` of the
        model's `escape_observable`; NaN: no escape)."""
        t, x = np.asarray(self.t), np.asarray(self.model.escape_observable(self.arrays()))
        out = [escape_crossing(t, x[i]) for i in range(x.shape[0])]
        return np.array([np.nan if e is None else e for e in out])


def path_keys(seed: int, paths: int) -> tuple[Key[Array, " n"], Key[Array, " n"]]:
    """`(initial-state keys, Brownian keys)` of paths `0 … paths−1`: path i uses
    `fold_in(key(seed), i)`, so it does not depend on how many paths run with it."""
    keys = jax.vmap(lambda i: jr.split(jr.fold_in(jr.key(seed), i)))(jnp.arange(paths))
    return keys[:, 0], keys[:, 1]


def _power_of_two(n: float) -> int:
    """The smallest power of two ≥ `n`, within `[MIN_SAMPLES, AUTO_MAX_SAMPLES]`."""
    return int(min(max(2 ** int(np.ceil(np.log2(max(n, 1.0)))), MIN_SAMPLES),
                   AUTO_MAX_SAMPLES))


def noise_samples(cfg: Config) -> int:
    """Nodes of the diffusion: `[sde] samples_noise`, by default sized for `[sde]
    error_target` `τ`. `Σ` is a Monte Carlo covariance over the nodes, whose relative error is
    `≈ √(2/n)`; the spread of the paths goes with `Σ^{1/2}`, relative error `≈ 1/√(2n)`, so
    `n = 1/(2τ²)` rounded up to a power of two (256 at `τ = 0.05`)."""
    if cfg.sde.samples_noise is not None:
        return int(cfg.sde.samples_noise)
    return _power_of_two(1.0 / (2.0 * cfg.sde.error_target ** 2))


def drift_samples(cfg: Config) -> int:
    """Nodes of the drift: `[sde] samples_drift`, by default sized for `[sde] error_target`:
    four times the noise rule's count (half its Monte Carlo error), since the drift's node
    error moves every path alike, a bias of the ensemble that more paths do not average out,
    while the noise's enters each path's fluctuation with the weight `D^{-1/2}` (1024 nodes at
    `τ = 0.05`). Not `[ode] samples`: the ODE's count is sized for a deterministic curve over
    a long span, far more than an ensemble at finite D resolves."""
    if cfg.sde.samples_drift is not None:
        return int(cfg.sde.samples_drift)
    return min(4 * _power_of_two(1.0 / (2.0 * cfg.sde.error_target ** 2)), AUTO_MAX_SAMPLES)


def build_sde(cfg: Config, dim: int, model: Any = None) -> OverlapSDE:
    """The SDE of a configuration at dimension `dim`: the model's drift with its `η²` terms on
    [`drift_samples`][] nodes of `[ode] expectation` (or its closed forms), the diffusion on
    `[sde] samples_noise` Monte Carlo nodes of all fields when set, else on the model's own
    rule (the attention model: [`noise_samples`][]; a model of the family: exact Gauss–Hermite
    nodes for a polynomial model, else Monte Carlo nodes sized from the increments' measured
    kurtosis, `headflow.dynamics.sde.ModelDiffusion`), both with `[ode] seed`; factored as
    `[sde] noise` says."""
    model = cfg.build_model() if model is None else model
    drift_backend = None if cfg.ode.expectation == "exact" else get_expectation(
        cfg.ode.expectation, drift_samples(cfg), seed=cfg.ode.seed)      # closed forms: None
    noise = (None if cfg.sde.samples_noise is None        # the model's own rule
             else MonteCarlo(samples=int(cfg.sde.samples_noise), seed=cfg.ode.seed))
    drift, diffusion = model.sde_terms(cfg, drift_backend, noise)
    return OverlapSDE(drift=drift, diffusion=diffusion,
                      inv_sqrt_dim=jnp.asarray(1.0 / np.sqrt(dim), jnp.float64),
                      noise=cfg.sde.noise)


@eqx.filter_jit
def _initial(sample: Any, diffusion: AbstractDiffusion, keys, dim: Any):
    return map_batched(lambda k: diffusion.flatten(sample(k, dim)), keys, 8)


def initial_states(cfg: Config, model: Any, keys: Key[Array, " n"], dim: int,
                   diffusion: AbstractDiffusion | None = None) -> Float[Array, "N p"]:
    """One exact random initialization at dimension `dim` per key (the law SGD starts from),
    in the SDE's coordinates (`diffusion.flatten`; default: that of [`build_sde`][])."""
    diffusion = build_sde(cfg, dim, model).diffusion if diffusion is None else diffusion
    return _initial(model.start_sampler(cfg), diffusion, keys, model.start_dim(int(dim)))


@dataclasses.dataclass(frozen=True)
class SDESetup:
    """What an ensemble of SDE paths of a config is run with ([`sde_setup`][]): the `model`,
    the dimension `dim` and number of `paths`, the save `times`, the step `grid` and how the
    Brownian paths are drawn (`brownian`), the `sde` and its `solver`, and each path's
    initial-state and Brownian keys."""

    model: Any
    dim: int
    paths: int
    times: np.ndarray
    grid: np.ndarray
    brownian: AbstractBrownian
    sde: OverlapSDE
    solver: Any
    init_keys: Key[Array, " n"]
    bm_keys: Key[Array, " n"]


def sde_setup(cfg: Config, *, dim: int | None = None, paths: int | None = None,
              times=None) -> SDESetup:
    """The objects of an ensemble of SDE paths of `cfg` (shared by [`run_sde`][] and the
    differentiable SDE curves): `dim` (default `[sim] dim`), `paths` (default `[sde] paths`),
    `times` (default the `[output]` grid).

    **Raises:** [`headflow.dynamics.HeadflowError`][] for a dimension too small for the model or
    `paths < 1`."""
    model = cfg.build_model()
    D = cfg.sim.dim if dim is None else int(dim)
    N = cfg.sde.paths if paths is None else int(paths)
    model.check_dim(D)
    if N < 1:
        raise HeadflowError(f"--paths {N}: must be >= 1")
    ts = cfg.save_times() if times is None else np.asarray(times, dtype=np.float64)
    grid = step_grid(ts, cfg.sde.dt)
    init_keys, bm_keys = path_keys(cfg.sde.seed, N)
    return SDESetup(model=model, dim=D, paths=N, times=ts, grid=grid,
                    brownian=get_brownian(cfg.sde.brownian, grid), sde=build_sde(cfg, D, model),
                    solver=get_sde_solver(cfg.sde.solver), init_keys=init_keys,
                    bm_keys=bm_keys)


def solve_groups(sde: OverlapSDE, solver, y0, bm_keys, times: np.ndarray, grid: np.ndarray,
                 brownian: AbstractBrownian, *, group: int | None, progress: bool, desc: str
                 ) -> tuple[Array, float, float]:
    """Every path of `y0` (with its Brownian key), in groups of `group` (default 8 per device,
    vmapped, sharded over the devices), honouring stop requests between groups.
    **Returns:** `(ys (N, T, p), seconds to the end of the first group, seconds in all)`."""
    N = y0.shape[0]
    n_dev = len(jax.devices())
    g = min(group or 8 * n_dev, N)
    g = -(-g // n_dev) * n_dev
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=N, unit="path", desc=desc, file=sys.stderr, leave=False)
    ys, compile_s, t0 = [], float("nan"), time.perf_counter()
    ts, grid_j = jnp.asarray(times), jnp.asarray(grid)
    try:
        for start in range(0, N, g):
            check_stop()
            idx = np.minimum(np.arange(start, start + g), N - 1)   # pad the last group
            args = shard_leading((y0[idx], bm_keys[idx]))
            out = jax.block_until_ready(         # `SDECurve` chooses its own adjoint
                solve_paths(sde, solver, *args, ts, grid_j, brownian, NOT_DIFFERENTIATED))
            if start == 0:
                compile_s = time.perf_counter() - t0
            ys.append(np.asarray(gather(out, min(g, N - start))))
            if bar is not None:
                bar.update(min(g, N - start))
    finally:
        if bar is not None:
            bar.close()
    check_stop()
    return jnp.asarray(np.concatenate(ys)), compile_s, time.perf_counter() - t0


def run_sde(cfg: Config, *, dim: int | None = None, paths: int | None = None,
            progress: bool = False, group: int | None = None) -> SDEResult:
    """An ensemble of paths of the overlaps' SDE as configured (`docs/sde.md`): each path
    starts from its own random initialization at dimension `dim` (default `[sim] dim`) and is
    integrated to `t_max` on the `[output]` grid with `[sde] dt`; `paths` overrides
    `[sde] paths`. The risk is recorded as the SGD simulator records it (`[sim] risk_samples`
    Monte Carlo nodes, `[ode] seed`), so the two compare on common random numbers.

    Paths run in groups of `group` (default 8 per device, vmapped, sharded over the devices);
    stop requests are honoured between groups.

    **Raises:** [`headflow.dynamics.HeadflowError`][] for a dimension too small for the teacher.
    """
    require_x64("the overlap SDE")
    s = sde_setup(cfg, dim=dim, paths=paths)
    check_stop()
    model, D, N, times, grid, sde = s.model, s.dim, s.paths, s.times, s.grid, s.sde
    y0 = initial_states(cfg, model, s.init_keys, D, sde.diffusion)
    y, compile_s, run_s = solve_groups(sde, s.solver, y0, s.bm_keys, times, grid, s.brownian,
                                       group=group, progress=progress, desc=f"SDE D={D} x{N}")
    valid = domain(y, sde.diffusion)
    ok = np.asarray(valid)
    first = np.where(ok.all(axis=1), np.nan, times[np.argmin(ok, axis=1)])
    states = jax.vmap(jax.vmap(sde.diffusion.unflatten))(y)
    risk, err = model.state_risk(cfg, states)
    exact = cfg.ode.expectation == "exact"
    info = {"dim": D, "paths": N, "steps": int(len(grid) - 1), "dt": cfg.sde.dt,
            "solver": cfg.sde.solver, "noise": cfg.sde.noise,
            "brownian": cfg.sde.brownian,
            "drift": cfg.ode.expectation,
            **({} if exact else {"samples_drift": drift_samples(cfg)}),
            "samples_noise": int(getattr(sde.diffusion, "samples", noise_samples(cfg))),
            "brownian_dim": sde.control_size, "seed": cfg.sde.seed,
            "first_group_s": round(compile_s, 3), "solve_s": round(run_s, 3)}
    return SDEResult(t=jnp.asarray(times), overlaps=states, risk=jnp.asarray(risk),
                     risk_err=jnp.asarray(err), valid=valid, first_invalid=jnp.asarray(first),
                     dim=D, info=info, model=model)
