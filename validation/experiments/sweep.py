"""Vectorized grids of ODE runs (`headflow sweep`): one `jax.vmap` over the grid points that
share the model's structure, sharded over the available devices (of every process, under
[`headflow.dynamics.distributed`][]).

Everything a grid point may change that is a pytree *leaf* of the model or of the step sizes
(learning rates, weight decay, prior amplitude, mean or variances, label noise, `ρ*`, initial
scales) is batched; keys that change the structure (number of heads, activation, prior kind,
save grid, solver settings) split the grid into groups, each solved in one vectorized call.
A diverging point is stopped by an event (its overlaps exceed `diverge_at`) so it does not hold
the whole batch to `max_steps`.
"""

from __future__ import annotations

import dataclasses
import itertools

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from headflow.dynamics import (ATTENTION, ORDER_PARAMETERS, Config, ConfigError, Layout, StepSizes,
                               check_stop, population_risk, risk_nodes)
from headflow.dynamics.config import parse_value
from headflow.dynamics.fields import (ExactField, ModelField, exact_backend, has_closed_field,
                                      model_nodes)
from headflow.dynamics.models.attention import key_nodes
from headflow.dynamics.models import GramState, model_risk
from headflow.dynamics.ode import (NOT_DIFFERENTIATED, BlowUp, Integrator, backend_of, frozen_init,
                                   initial_state, model_arrays, model_start, risk_rule, solve)
from headflow.dynamics.models.attention import field_class
from headflow.dynamics.sharding import gather, map_batched, per_device, shard_batch

STATUS = ("ok", "diverged", "max_steps", "failed")


def parse_grid(items: list[str], cfg: Config) -> list[tuple[str, list]]:
    """`["training.lr=0.5,1,2", ...]` → `[("training.lr", [0.5, 1.0, 2.0]), ...]`, each value
    parsed as TOML and checked against the config (one-line errors naming the key)."""
    out: list[tuple[str, list]] = []
    for item in items:
        key, eq, text = item.partition("=")
        key = key.strip()
        if not eq or "." not in key or not text.strip():
            raise ConfigError(f"--grid {item}: expected section.key=v1,v2,...")
        parts = _split_values(text)
        if not any(v.strip() for v in parts):
            raise ConfigError(f"--grid {item}: no values; expected section.key=v1,v2,...")
        if not all(v.strip() for v in parts):
            raise ConfigError(f"--grid {item}: an empty value; expected section.key=v1,v2,...")
        values = [parse_value(v.strip()) for v in parts]
        repeated = [v for i, v in enumerate(values) if v in values[:i]]
        if repeated:
            raise ConfigError(f"--grid {item}: {repeated[0]!r} is repeated")
        if any(k == key for k, _ in out):
            raise ConfigError(f"--grid {key}: given twice")
        for v in values:
            cfg.replace(**{key: v})        # validates key and value
        out.append((key, values))
    if not out:
        raise ConfigError("sweep: give at least one --grid section.key=v1,v2,...")
    return out


def _split_values(text: str) -> list[str]:
    """Split on commas outside brackets (values may be TOML lists like `[1.0, 0.0]`)."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return parts


@dataclasses.dataclass
class SweepResult:
    """Per grid point (row-major over the `--grid` axes): `overrides`, `status` (index into
    [`STATUS`][]), the trajectory `t (T)`, `risk (P, T)` and the order parameters
    `(P, T, ...)` (non-finite after a divergence), `steps (P,)`, the solver steps each point
    took (accepted and rejected: the points of a vectorized group advance together, so each
    pays for the group's largest), and `null_risk (P,)`, the risk `Δ² + ρ*` of the predictor
    `ŷ ≡ 0`."""

    axes: list[tuple[str, list]]
    overrides: list[dict]
    t: np.ndarray
    status: np.ndarray
    risk: np.ndarray
    arrays: dict[str, np.ndarray]
    null_risk: np.ndarray | None = None
    layout: Layout = ATTENTION
    steps: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(v) for _, v in self.axes)


def _stack_points(trees):
    """Stack grid points leafwise: array leaves and the Python numbers that differ across the
    points become arrays with a leading point axis; Python numbers shared by all points stay
    Python numbers (unbatched, and of the type the model code expects)."""
    treedef = jax.tree.structure(trees[0])
    leaves = [jax.tree.leaves(t) for t in trees]
    out = []
    for k in range(len(leaves[0])):
        vals = [lv[k] for lv in leaves]
        v0 = vals[0]
        if isinstance(v0, (bool, int, float)) and all(v == v0 for v in vals):
            out.append(v0)
        else:
            out.append(jnp.stack([jnp.asarray(v) for v in vals]))
    return jax.tree.unflatten(treedef, out)


def _structure_key(cfg: Config, model, steps):
    leaves, treedef = jax.tree.flatten((model, steps))
    shapes = tuple((tuple(np.shape(x)), type(x).__name__) for x in leaves)
    o = cfg.ode
    return (treedef, shapes, tuple(cfg.save_times().tolist()), o.expectation, o.samples,
            o.seed, o.solver, o.rtol, o.atol, o.max_steps, o.form, o.rhs, o.sgd_noise)


def _manifold_risk(model, ov, nodes):
    return population_risk(model, ov, nodes, manifold=True)


@eqx.filter_jit
def _solve_group(models, steps, ov0s, nodes, ts, integrator, risk_nodes, sgd_noise, field_cls,
                 risk_fn=_manifold_risk):
    batch = per_device(jax.tree.leaves(ov0s)[0].shape[0])

    def one(model, step_sizes, ov0):
        field = field_cls(model=model, steps=step_sizes, nodes=nodes,
                          sgd_noise=sgd_noise).batched(batch)
        sol = solve(dfx.ODETerm(field), ov0, ts, integrator, adjoint=NOT_DIFFERENTIATED)
        code = jnp.where(sol.result == dfx.RESULTS.successful, 0,
                         jnp.where(sol.result == dfx.RESULTS.event_occurred, 1,
                                   jnp.where(sol.result == dfx.RESULTS.max_steps_reached, 2, 3)))
        ys = sol.ys
        finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(x.reshape(x.shape[0], -1)), axis=1)
                                    for x in jax.tree.leaves(ys)]), axis=0)

        def risk_at(o, ok):
            safe = jax.tree.map(lambda x, x0: jnp.where(ok, x, x0), o, ov0)
            r, _ = risk_fn(model, safe, risk_nodes)
            return jnp.where(ok, r, jnp.nan)

        risk = map_batched(lambda a: risk_at(*a), (ys, finite), 16)
        return ys, code, risk, sol.stats["num_steps"]

    return eqx.filter_vmap(one)(models, steps, ov0s)


def run_sweep(cfg: Config, axes: list[tuple[str, list]], *, max_steps: int | None = None,
              diverge_at: float = 1e3, progress: bool = False) -> SweepResult:
    """Integrate the manifold ODE at every point of the grid `axes` (cartesian product),
    vectorized over the points that share the model structure.

    **Arguments:** `cfg` the base configuration; `axes` from [`parse_grid`][]; `max_steps` per
    point (default `ode.max_steps`); `diverge_at`: a run whose order parameters exceed this in
    absolute value is stopped and marked diverged ([`headflow.dynamics.ode.BlowUp`][]).

    **Returns:** a [`SweepResult`][].
    """
    if cfg.model_kind != "attention":
        return _run_model_sweep(cfg, axes, max_steps=max_steps, diverge_at=diverge_at)
    if cfg.ode.form != "manifold":
        raise ConfigError("sweep integrates the manifold ODE (ode.form = 'manifold')")
    points, cfgs = _grid_configs(cfg, axes)
    shapes = {(c.model.H, c.model.F) for c in cfgs}
    if len(shapes) > 1:
        raise ConfigError("sweep: grid keys that change the number of heads or directions "
                          "(model.H, model.F) cannot be stored together; sweep them in "
                          "separate runs")
    groups: dict = {}
    built = []
    for i, c in enumerate(cfgs):
        model = c.build_model()
        step_sizes = StepSizes.from_config(c.training)
        ov0 = initial_state(c, model).on_manifold()
        ov0 = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), ov0)
        built.append((model, step_sizes, ov0))
        # the nodes are closed under the prior's feature group, which depends on the prior's
        # values (a zero amplitude adds sign flips): points with different groups get their
        # own nodes, those a separate run of the point uses
        key = (_structure_key(c, model, step_sizes), model.prior.symmetry())
        groups.setdefault(key, []).append(i)
    ts = np.asarray(cfgs[0].save_times())
    T = len(ts)
    status = np.zeros(len(points), dtype=np.int64)
    n_steps = np.zeros(len(points), dtype=np.int64)
    risk = np.full((len(points), T), np.nan)
    arrays: dict[str, np.ndarray] = {}
    for members in groups.values():
        check_stop()
        c0 = cfgs[members[0]]
        models, steps, ov0s = shard_batch(
            tuple(_stack_points([built[i][j] for i in members]) for j in range(3)),
            len(members))
        backend = backend_of(c0)
        # the engine's field nodes (closed under the model's symmetry group) and risk nodes
        model0 = c0.build_model()
        integrator = Integrator.from_config(c0.ode, blowup=BlowUp(float(diverge_at)),
                                            **({"max_steps": max_steps} if max_steps else {}))
        ys, code, r, n = _solve_group(models, steps, ov0s, key_nodes(model0, backend),
                                      jnp.asarray(ts), integrator, risk_nodes(model0, backend),
                                      c0.ode.sgd_noise, field_class(c0, model0))
        check_stop()              # a stop request ends the solves early: do not report them
        ys, code, r, n = gather((ys, code, r, n), len(members))
        code = np.asarray(code)
        status[members] = code
        n_steps[members] = np.asarray(n)
        risk[members] = np.asarray(r)
        for name in ORDER_PARAMETERS:
            v = np.asarray(getattr(ys, name))
            if name not in arrays:
                arrays[name] = np.full((len(points),) + v.shape[1:], np.nan)
            arrays[name][members] = v
    del progress
    null = np.array([c.model.noise**2 + c.model.rho for c in cfgs])
    return SweepResult(axes=axes, overrides=points, t=ts, status=status, risk=risk,
                       arrays=arrays, null_risk=null, steps=n_steps)


def _starts(c0: Config, stacked, models: list) -> GramState:
    """The start of every point of a group (float64, stacked): `[ode] init = "random"` draws
    them in one vectorized call over the points' models (they share the seed and `sim.dim`),
    any other init is computed point by point."""
    if c0.ode.init == "random":
        starts = eqx.filter_vmap(lambda m: model_start(c0, m))(stacked)
    else:
        starts = _stack_points([model_start(c0, m) for m in models])
    return jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), starts)


def _grid_configs(cfg: Config, axes: list[tuple[str, list]]) -> tuple[list[dict], list[Config]]:
    """The grid points (row-major) and their configs, on one common time grid."""
    keys = [k for k, _ in axes]
    points = [dict(zip(keys, combo)) for combo in itertools.product(*(v for _, v in axes))]
    cfgs = [cfg.replace(**p) for p in points]
    if len({tuple(c.save_times().tolist()) for c in cfgs}) > 1:
        raise ConfigError("sweep: training.t_max and [output] must be the same at every grid "
                          "point (one common time grid)")
    return points, cfgs


def _run_model_sweep(cfg: Config, axes: list[tuple[str, list]], *, max_steps: int | None,
                     diverge_at: float) -> SweepResult:
    """[`run_sweep`][] for a model of the family (`docs/models.md`): the ODE of `[ode]`
    (closed forms or nodes) from `[ode] init` at every grid point, vmapped over the points that
    share the model's structure."""
    points, cfgs = _grid_configs(cfg, axes)
    models = [c.build_model() for c in cfgs]
    if len({(m.n_rows, tuple(m.limit_state().params)) for m in models}) > 1:
        raise ConfigError("sweep: grid keys that change the model's size (model.K, model.M) "
                          "cannot be stored together; sweep them in separate runs")
    groups: dict = {}
    built = []
    for i, (c, model) in enumerate(zip(cfgs, models)):
        step_sizes = StepSizes.from_config(c.training)
        built.append((model, step_sizes))
        # the points of a group also share what their start is drawn from
        key = (_structure_key(c, model, step_sizes), c.sim.seed, c.sim.dim,
               frozen_init(c.ode.init))
        groups.setdefault(key, []).append(i)
    ts = np.asarray(cfgs[0].save_times())
    status = np.zeros(len(points), dtype=np.int64)
    n_steps = np.zeros(len(points), dtype=np.int64)
    risk = np.full((len(points), len(ts)), np.nan)
    arrays: dict[str, np.ndarray] = {}
    for members in groups.values():
        check_stop()
        c0, model0 = cfgs[members[0]], models[members[0]]
        points_models, steps = (_stack_points([built[i][j] for i in members]) for j in range(2))
        starts = _starts(c0, points_models, [built[i][0] for i in members])
        points_models, steps, starts = shard_batch((points_models, steps, starts), len(members))
        exact = c0.ode.expectation == "exact"
        closed = exact and has_closed_field(model0)
        nodes = (None if closed else model_nodes(model0, exact_backend(model0) if exact
                                                  else backend_of(c0)))
        integrator = Integrator.from_config(c0.ode, blowup=BlowUp(float(diverge_at)),
                                            **({"max_steps": max_steps} if max_steps else {}))
        ys, code, r, n = _solve_group(points_models, steps, starts, nodes, jnp.asarray(ts),
                                      integrator,
                                      risk_rule(c0).nodes(model0.n_rows), c0.ode.sgd_noise,
                                      ExactField if closed else ModelField, model_risk)
        check_stop()
        ys, code, r, n = gather((ys, code, r, n), len(members))
        status[members] = np.asarray(code)
        n_steps[members] = np.asarray(n)
        risk[members] = np.asarray(r)
        for name, v in model_arrays(model0, ys).items():
            if name not in arrays:
                arrays[name] = np.full((len(points),) + v.shape[1:], np.nan)
            arrays[name][members] = v
    return SweepResult(axes=axes, overrides=points, t=ts, status=status, risk=risk,
                       arrays=arrays, null_risk=None, layout=model0.layout, steps=n_steps)
