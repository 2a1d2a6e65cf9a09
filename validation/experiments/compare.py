"""Theory versus simulation: the ODE, ODEs per seed or the SDE ensemble against SGD
(`docs/ode.md#theory-versus-simulation`, `docs/sde.md#comparing-ensembles-with-sgd`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from headflow.dynamics import ATTENTION, Config, DivergenceError, HeadflowError, Layout, Overlaps
from headflow.dynamics.measures import (ESCAPE_THRESHOLD, escape_crossing, escape_quantiles,
                                        head_spread)
from headflow.dynamics.ode import (BLOWUP, NOT_DIFFERENTIATED, Integrator, ODEResult, build,
                                   explain, model_arrays, run_ode, solve, traced_values)
from headflow.dynamics.sde import SDEResult, run_sde
from headflow.sims import SGDResult, run_sgd

from ..verdicts import ks_distance, mean_gap, overall, spread_gap, verdict
from ._constants import THEORIES as THEORIES  # light: shown by `headflow compare --help`

MEAN_TOLERANCE = 0.5
"""The ensemble means of the risk agree when, at every saved time, they differ by at most this
many standard deviations of a run ([`headflow.validation.verdicts.mean_gap`][])."""

SPREAD_TOLERANCE = math.log(1.25)
"""The ensemble spreads of the risk agree when their log ratio, averaged over the saved times, is
within this (a 25% difference; [`headflow.validation.verdicts.spread_gap`][])."""

ESCAPE_TOLERANCE = 0.2
"""The escape-time distributions agree when their distribution functions differ by at most
this at every time (the Kolmogorov–Smirnov distance,
[`headflow.validation.verdicts.ks_distance`][])."""

NEVER_ESCAPED = ("a run that never escapes counts as escaping at +inf: both ensembles are "
                 "observed over the same [0, t_max], so this is the same right-censoring on both "
                 "sides; quantiles beyond the escaped fraction are +inf (null) and the KS test "
                 "compares the escape-time distributions on [0, t_max] including the fraction "
                 "that escaped")
"""How never-escaped runs enter the escape-time comparison (written into the report)."""


def canonical_permutation(m_final: np.ndarray) -> np.ndarray:
    """A head order that makes runs comparable despite the heads' permutation symmetry: heads
    sorted by their final alignment with feature 1 (descending), ties broken by the next
    features. `m_final (H, F)` → permutation (H)."""
    keys = tuple(-m_final[:, f] for f in reversed(range(m_final.shape[1])))
    return np.lexsort(keys)


def permute_heads(arrays: dict[str, np.ndarray], perm: np.ndarray,
                  layout: Layout = ATTENTION) -> dict[str, np.ndarray]:
    """Apply a permutation of the units (heads) to one trajectory's order parameters (arrays
    `(T, ...)` named as in `sgd.npz`/`ode.npz`, laid out as `layout` says); other entries are
    returned unchanged."""
    out = dict(arrays)
    for name in layout.per_unit:
        if name in out:
            out[name] = out[name][:, perm]
    for name in layout.unit_by_unit:
        if name in out:
            out[name] = out[name][:, perm][:, :, perm]
    return out


def canonicalize_seeds(arrays: dict[str, np.ndarray], layout: Layout = ATTENTION
                       ) -> dict[str, np.ndarray]:
    """Put every run of an ensemble (SGD seeds, SDE paths, ODEs per seed: arrays
    `(S, T, ...)`) in its canonical head order."""
    per_head = layout.per_unit + layout.unit_by_unit
    align = layout.alignment[0]
    S = arrays[align].shape[0]
    seeds = []
    for i in range(S):
        one = {k: arrays[k][i] for k in per_head if k in arrays}
        seeds.append(permute_heads(one, canonical_permutation(one[align][-1]), layout))
    out = dict(arrays)
    for k in per_head:
        if k in arrays:
            out[k] = np.stack([s[k] for s in seeds])
    return out


def canonicalize(arrays: dict[str, np.ndarray], layout: Layout = ATTENTION
                 ) -> dict[str, np.ndarray]:
    """Canonical head order of one trajectory (arrays `(T, ...)`)."""
    return permute_heads(arrays, canonical_permutation(arrays[layout.alignment[0]][-1]),
                         layout)


def seed_mean_initial(sgd: SGDResult) -> Overlaps:
    """The seed mean of the measured initial overlaps (all blocks, cross terms included)."""
    return jax.tree.map(lambda x: jnp.mean(x[:, 0], axis=0), sgd.overlaps)


def _sup(x: np.ndarray) -> float:
    return float(np.max(np.abs(x))) if x.size else 0.0


def _deviations(sgd: dict[str, np.ndarray], center: dict[str, np.ndarray], t_pre: float, *,
                dim: int, seeds: int, layout: Layout) -> dict:
    """The sup-norm deviations of a theory curve `center` (arrays `(T, ...)`: the ODE, or the
    mean of a theory ensemble) from the SGD seed mean, over the run and before `t_pre`, with
    the seed spread (`sgd` in canonical head order)."""
    t = sgd["t"]
    rs, ro = sgd["risk"].mean(axis=0), center["risk"]
    pre = t <= t_pre
    rep: dict = {"dim": int(dim), "seeds": int(seeds), "t_max": float(t[-1])}
    dev = np.abs(ro - rs)
    rep["risk_sup_abs"] = float(dev.max())
    rep["risk_sup_rel"] = float((dev / np.abs(rs)).max())
    rep["risk_spread"] = float(sgd["risk"].std(axis=0, ddof=1).max()) if seeds > 1 else 0.0
    for name in layout.names:
        mean = sgd[name].mean(axis=0)
        rep[f"{name}_sup_abs"] = _sup(center[name] - mean)
        rep[f"{name}_spread"] = _sup(sgd[name].std(axis=0, ddof=1)) if seeds > 1 else 0.0
    if layout.cross:
        rep["cross_sup_sgd"] = max(_sup(sgd[c].mean(axis=0)) for c in layout.cross)
    rep["pre_escape"] = {
        "t_end": float(t_pre),
        "risk_sup_abs": float(dev[pre].max()),
        "risk_sup_rel": float((dev[pre] / np.abs(rs[pre])).max()),
        **{f"{n}_sup_abs": _sup(center[n][pre] - sgd[n][:, pre].mean(axis=0))
           for n in layout.names},
        **{f"{n}_unit_mean_sup_abs": _sup(unit_mean(center[n][pre], 1)
                                          - unit_mean(sgd[n][:, pre], 2).mean(axis=0))
           for n in layout.names if n in layout.per_unit},
    }
    return rep


def unit_mean(x: np.ndarray, axis: int) -> np.ndarray:
    """The mean over the units (heads) of a per-unit array whose unit axis is `axis` (1 for one
    run `(T, units, …)`, 2 for an ensemble `(S, T, units, …)`).

    It needs no order of the units. Before the escape the units are exchangeable, and putting
    each run in its canonical order ([`canonical_permutation`][]) sorts noisy, nearly equal
    values: each run's first unit is the larger of them, a bias of the size of one run's
    fluctuation that averaging over runs does not remove. So on the plateau a per-unit
    deviation from the theory measures that bias, and the unit mean's deviation
    (`pre_escape`'s `NAME_unit_mean_sup_abs`) measures the dynamics."""
    return np.asarray(x).mean(axis=axis)


def escape_curves(arrays: dict[str, np.ndarray], layout: Layout = ATTENTION,
                  observable: Callable | None = None) -> np.ndarray:
    """The escape observable of runs given by their named arrays (any leading axes kept):
    `observable(arrays)` (a model's `escape_observable`), by default the head spread of the
    alignment arrays of `layout` ([`headflow.dynamics.measures.head_spread`][])."""
    if observable is None:
        a, g = layout.alignment
        return np.asarray(head_spread(np.asarray(arrays[a]), np.asarray(arrays[g])))
    return np.asarray(observable(arrays))


def escapes_of(t: np.ndarray, arrays: dict[str, np.ndarray], layout: Layout = ATTENTION, *,
               threshold: float = ESCAPE_THRESHOLD, observable: Callable | None = None
               ) -> list[float | None]:
    """The escape time of every run of an ensemble (arrays `(S, T, ...)`; None: never): the
    [`headflow.dynamics.measures.escape_crossing`][] of `threshold` by its
    [`escape_curves`][] (the model's `escape_observable` when given, else the head spread of
    the alignment arrays of `layout`)."""
    return [escape_crossing(t, x, threshold)
            for x in escape_curves(arrays, layout, observable)]


def _sgd_escapes(sgd: dict[str, np.ndarray], layout: Layout,
                 observable: Callable | None = None) -> list[float | None]:
    return escapes_of(sgd["t"], sgd, layout, observable=observable)


def _pre_escape_end(t: np.ndarray, escapes: list[float | None]) -> float:
    """The end of the pre-escape window: the first escape of any run, else the last time."""
    found = [e for e in escapes if e is not None]
    return min(found) if found else float(t[-1])


def agreement_report(sgd: dict[str, np.ndarray], ode: dict[str, np.ndarray], *, dim: int,
                     seeds: int, layout: Layout = ATTENTION,
                     observable: Callable | None = None) -> dict:
    """Quantitative agreement between the ODE and the seed mean of SGD on a common
    time grid: sup-norm deviations of the risk and of each order parameter over the whole run,
    over the pre-escape window (before any SGD seed or the ODE leaves the unspecialized plateau,
    where single runs track the ODE) and at the final time, with the seed spread.

    Heads are exchangeable, and which head takes which direction at the specialization escape
    is random: every run (each seed and the ODE) is first put in its canonical head order
    ([`canonical_permutation`][]). Escapes: [`escapes_of`][] with `observable` (the model's
    `escape_observable`; default the head spread of `layout`)."""
    sgd, ode = canonicalize_seeds(sgd, layout), canonicalize(ode, layout)
    t = sgd["t"]
    rs, ro = sgd["risk"].mean(axis=0), ode["risk"]
    esc_sgd = _sgd_escapes(sgd, layout, observable)
    esc_ode = escape_crossing(t, escape_curves(ode, layout, observable))
    rep = _deviations(sgd, ode, _pre_escape_end(t, esc_sgd + [esc_ode]), dim=dim, seeds=seeds,
                      layout=layout)
    rep["risk_mc_err"] = float(max(sgd["risk_err"].max(), ode["risk_err"].max()))
    dev = abs(float(ro[-1] - rs[-1]))
    rep["final"] = {"t": float(t[-1]), "risk_ode": float(ro[-1]), "risk_sgd": float(rs[-1]),
                    "risk_abs": dev, "risk_rel": dev / abs(float(rs[-1])),
                    "risk_sgd_sem": float(sgd["risk"][:, -1].std(ddof=1) / np.sqrt(seeds))
                    if seeds > 1 else 0.0}
    rep["escape"] = {"sgd": esc_sgd, "ode": esc_ode,
                     "sgd_escaped": int(sum(e is not None for e in esc_sgd))}
    return {k: rep[k] for k in ode_keys(layout) if k in rep}


def ode_keys(layout: Layout = ATTENTION) -> tuple[str, ...]:
    """The keys of the ODE report, in their order."""
    return ("dim", "seeds", "t_max", "risk_sup_abs", "risk_sup_rel", "risk_spread",
            "risk_mc_err", *(f"{n}_{w}" for n in layout.names for w in ("sup_abs", "spread")),
            "cross_sup_sgd", "pre_escape", "final", "escape")


# -- ensembles ---------------------------------------------------------------------------------

def ensemble_moments(a: np.ndarray) -> dict[str, np.ndarray]:
    """Mean and standard deviation over the leading (run) axis of `a (N, T, ...)`, each with
    its standard error: `mean_se = std/√N`, and `std_se` by the delta method from the standard
    error of the sample variance, `√((μ₄ − s⁴ (N−3)/(N−1))/N) / (2s)` with the fourth central
    moment μ₄ (no normality assumed: at the escape the runs are bimodal). NaN where N < 2."""
    a = np.asarray(a, dtype=np.float64)
    n = a.shape[0]
    mean = a.mean(axis=0)
    if n < 2:
        nan = np.full_like(mean, np.nan)
        return {"mean": mean, "mean_se": nan, "std": nan, "std_se": nan}
    var = a.var(axis=0, ddof=1)
    std = np.sqrt(var)
    m4 = np.mean((a - mean) ** 4, axis=0)
    var_se = np.sqrt(np.clip(m4 - var**2 * (n - 3) / (n - 1), 0.0, None) / n)
    std_se = np.divide(var_se, 2 * std, out=np.zeros_like(std), where=std > 0)
    return {"mean": mean, "mean_se": std / np.sqrt(n), "std": std, "std_se": std_se}


def escape_array(escapes) -> np.ndarray:
    """Escape times as floats, a run that never escapes (None or NaN) as +∞
    ([`NEVER_ESCAPED`][])."""
    x = np.asarray([np.nan if v is None else v for v in escapes], dtype=np.float64)
    return np.where(np.isnan(x), np.inf, x)


def _mean_z_and_std_ratio(t: np.ndarray, sgd: dict, theory: dict
                          ) -> tuple[np.ndarray, np.ndarray]:
    """From two ensembles' [`ensemble_moments`][]: the mean difference in combined standard
    errors `|Δmean| / √(se_sgd² + se_theory²)` at every time (+∞ where the errors vanish but the
    means differ, 0 where both do), and the std ratio theory/SGD at the times t > t₀ (1 where
    both stds vanish, +∞ where only SGD's does)."""
    se = np.sqrt(sgd["mean_se"] ** 2 + theory["mean_se"] ** 2)
    diff = np.abs(theory["mean"] - sgd["mean"])
    z = np.divide(diff, se, out=np.where(diff > 0, np.inf, 0.0), where=se > 0)
    later = np.asarray(t) > t[0]
    num, den = theory["std"][later], sgd["std"][later]
    ratio = np.divide(num, den, out=np.where((num == 0) & (den == 0), 1.0, np.inf),
                      where=den > 0)
    return z, ratio


def agreement_verdicts(t: np.ndarray, sgd_risk: np.ndarray, theory_risk: np.ndarray,
                       sgd_escapes, theory_escapes, *, seed: int = 0,
                       names: tuple[str, str] = ("seeds", "theory runs")) -> dict:
    """The three verdicts on the risk of two ensembles (`(S, T)` and `(N, T)` on the common grid
    `t`) and their escape times (None/NaN: never escaped), each
    [`headflow.validation.verdicts.verdict`][] (agree, disagree or not resolved at this size, from a
    permutation test and a bootstrap bound over seeds and paths):

    - `mean`: the largest standardized difference of the means over time
      ([`headflow.validation.verdicts.mean_gap`][], tolerance [`MEAN_TOLERANCE`][]; `t_gap`: where);
    - `std`: the time-averaged log ratio of the standard deviations
      ([`headflow.validation.verdicts.spread_gap`][], tolerance [`SPREAD_TOLERANCE`][]; `ratio`: the
      ratio theory/SGD it stands for);
    - `escape`: the Kolmogorov–Smirnov distance of the escape times
      ([`headflow.validation.verdicts.ks_distance`][], tolerance [`ESCAPE_TOLERANCE`][];
      never-escaped runs as in [`NEVER_ESCAPED`][]).

    `all` is the overall word ([`headflow.validation.verdicts.overall`][]); `names` say what the
    runs of each side are, for the phrase of a verdict not resolved."""
    a, b = np.asarray(sgd_risk, np.float64), np.asarray(theory_risk, np.float64)
    mean = verdict(a, b, mean_gap, tolerance=MEAN_TOLERANCE, seed=seed,
                   names=names).to_dict()
    if a.shape[0] > 1 and b.shape[0] > 1:
        sd = np.sqrt((a.var(axis=0, ddof=1) + b.var(axis=0, ddof=1)) / 2)
        diff = np.abs(a.mean(axis=0) - b.mean(axis=0))
        gap = np.divide(diff, sd, out=np.where(diff > 0, np.inf, 0.0), where=sd > 0)
        mean["t_gap"] = float(np.asarray(t)[int(np.argmax(gap))])
    else:
        mean["t_gap"] = None
    std = verdict(a, b, spread_gap, tolerance=SPREAD_TOLERANCE, seed=seed + 1,
                  names=names).to_dict()
    if a.shape[0] > 1 and b.shape[0] > 1:
        va, vb = a.var(axis=0, ddof=1), b.var(axis=0, ddof=1)
        both = (va > 0) & (vb > 0)
        std["ratio"] = (float(np.exp(np.mean(0.5 * np.log(vb[both] / va[both]))))
                        if both.any() else 1.0)
    else:
        std["ratio"] = None
    escape = verdict(escape_array(sgd_escapes), escape_array(theory_escapes), ks_distance,
                     tolerance=ESCAPE_TOLERANCE, seed=seed + 2, names=names).to_dict()
    return {"mean": mean, "std": std, "escape": escape,
            "all": overall([v["word"] for v in (mean, std, escape)])}


def ensemble_series(sgd: dict[str, np.ndarray], theory: dict[str, np.ndarray],
                    layout: Layout = ATTENTION) -> dict[str, np.ndarray]:
    """The moments over time of both ensembles (both in canonical head order): for the risk and
    every order parameter `NAME`, `{sgd,theory}_{mean,mean_se,std,std_se}_NAME` with the shape
    of one run (`(T, ...)`), plus `t` (the `ensemble.npz` arrays)."""
    out = {"t": np.asarray(sgd["t"])}
    for side, arrays in (("sgd", sgd), ("theory", theory)):
        for name in ("risk",) + layout.names:
            for stat, v in ensemble_moments(arrays[name]).items():
                out[f"{side}_{stat}_{name}"] = v
    return out


def _summary(series: dict[str, np.ndarray], name: str) -> dict:
    """Per quantity: the largest `|Δmean|` in combined standard errors over time and
    components, the mean std ratio (theory/SGD) over t > 0 and components, and the final
    values of both ensembles."""
    g = {stat: series[f"sgd_{stat}_{name}"] for stat in ("mean", "mean_se", "std", "std_se")}
    h = {stat: series[f"theory_{stat}_{name}"] for stat in ("mean", "mean_se", "std", "std_se")}
    z, ratio = _mean_z_and_std_ratio(series["t"], g, h)
    ratio = ratio[np.isfinite(ratio)]
    se = np.sqrt(g["mean_se"] ** 2 + h["mean_se"] ** 2)

    def last(d: dict) -> dict:
        return {k: v[-1].tolist() for k, v in d.items()}

    return {"mean_z_max": float(np.nanmax(z)) if np.isfinite(se).any() else None,
            "std_ratio_mean": float(ratio.mean()) if ratio.size else None,
            "final_sgd": last(g), "final_theory": last(h)}


def ensemble_report(sgd: dict[str, np.ndarray], theory: dict[str, np.ndarray], *, dim: int,
                    theory_name: str, layout: Layout = ATTENTION,
                    observable: Callable | None = None) -> dict:
    """The agreement of a theory ensemble (SDE paths or ODEs per seed, arrays `(N, T, ...)`)
    with the SGD seeds (`(S, T, ...)`) on the common grid `sgd["t"]`, every run in its
    canonical head order.

    The report has the keys of [`agreement_report`][] computed against the theory ensemble's
    mean (`final` with `risk_theory` and its standard error, `escape` with both ensembles'
    escape times, their quantiles and the KS test), `verdicts` ([`agreement_verdicts`][]) and
    `ensemble` (per quantity: the largest mean difference in standard errors, the mean std
    ratio and both final moments). Escapes: [`escapes_of`][] with `observable` (the model's
    `escape_observable`; default the head spread of `layout`)."""
    sgd, theory = canonicalize_seeds(sgd, layout), canonicalize_seeds(theory, layout)
    t = sgd["t"]
    S, N = sgd["risk"].shape[0], theory["risk"].shape[0]
    if theory["risk"].shape[1] != len(t):
        raise HeadflowError(f"theory has {theory['risk'].shape[1]} saved times, SGD {len(t)}")
    series = ensemble_series(sgd, theory, layout)
    center = {n: series[f"theory_mean_{n}"] for n in ("risk",) + layout.names}
    esc_sgd = _sgd_escapes(sgd, layout, observable)
    esc_th = escapes_of(t, theory, layout, observable=observable)
    rep = {"theory": theory_name,
           **_deviations(sgd, center, _pre_escape_end(t, esc_sgd + esc_th), dim=dim, seeds=S,
                         layout=layout),
           "paths": int(N)}
    rep["risk_mc_err"] = float(max(sgd["risk_err"].max(), theory["risk_err"].max()))
    rs, rt = series["sgd_mean_risk"], series["theory_mean_risk"]
    dev = abs(float(rt[-1] - rs[-1]))
    rep["final"] = {"t": float(t[-1]), "risk_theory": float(rt[-1]),
                    "risk_theory_sem": float(series["theory_mean_se_risk"][-1]),
                    "risk_sgd": float(rs[-1]), "risk_abs": dev,
                    "risk_rel": dev / abs(float(rs[-1])),
                    "risk_sgd_sem": float(series["sgd_mean_se_risk"][-1]) if S > 1 else 0.0}
    rep["escape"] = {"sgd": esc_sgd, "theory": esc_th,
                     "sgd_escaped": int(sum(e is not None for e in esc_sgd)),
                     "theory_escaped": int(sum(e is not None for e in esc_th)),
                     "sgd_quantiles": escape_quantiles(esc_sgd),
                     "theory_quantiles": escape_quantiles(esc_th),
                     "never_escaped": NEVER_ESCAPED}
    rep["verdicts"] = agreement_verdicts(
        t, sgd["risk"], theory["risk"], esc_sgd, esc_th,
        names=("seeds", "paths" if theory_name == "sde" else "ODEs"))
    rep["escape"]["ks_distance"] = rep["verdicts"]["escape"]["statistic"]
    rep["ensemble"] = {n: _summary(series, n) for n in ("risk",) + layout.names}
    return rep


# -- theories ----------------------------------------------------------------------------------

class ODEEnsemble(eqx.Module):
    """One ODE per SGD seed, each from that seed's measured initial overlaps: `t` (T),
    `overlaps` (leaves `(S, T, ...)`), `risk`, `risk_err` (S, T) and the solver's steps per
    seed."""

    t: np.ndarray
    overlaps: Any
    risk: np.ndarray
    risk_err: np.ndarray
    num_steps: tuple[int, ...] = eqx.field(static=True, default=())
    model: Any = None
    """The model (its `named` view gives the arrays)."""

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays of `sgd.npz` (seed axis first)."""
        named = model_arrays(self.model, self.overlaps)
        return {"t": np.asarray(self.t), "risk": np.asarray(self.risk),
                "risk_err": np.asarray(self.risk_err), **named}


@eqx.filter_jit
def _solve_seeds(field, ov0s: Any, ts, integrator: Integrator):
    """[`headflow.dynamics.ode.solve`][] vmapped over the initial states, all on one device (the
    field's node chunks sized for that batch,
    [`headflow.dynamics.fields.AbstractField.batched`][])."""
    field = field.batched(jax.tree.leaves(ov0s)[0].shape[0])
    sol = eqx.filter_vmap(lambda ov: solve(dfx.ODETerm(field), ov, ts, integrator,
                                           adjoint=NOT_DIFFERENTIATED))(ov0s)
    return sol.ys, sol.result, sol.stats["num_steps"]


def run_ode_per_seed(cfg: Config, sgd: SGDResult) -> ODEEnsemble:
    """The configured ODE (`[ode]`: form, nodes, solver) from each seed's own measured initial
    overlaps, on the SGD save grid, all seeds in one vmapped solve (one compiled program, the
    same field and integrator as [`headflow.dynamics.ode.run_ode`][]; `samples = "auto"` is sized
    once, from the seed-mean start).

    **Raises:** [`headflow.dynamics.DivergenceError`][] / [`headflow.dynamics.HeadflowError`][]
    naming the first seed whose ODE diverged or hit `ode.max_steps`."""
    model = cfg.build_model()
    starts = jax.tree.map(lambda x: jnp.asarray(x[:, 0], jnp.float64), sgd.overlaps)
    starts = jax.vmap(lambda o: model.ode_state(cfg, o))(starts)
    for i, seed in enumerate(sgd.seeds):
        model.check_state(jax.tree.map(lambda x, i=i: np.asarray(x[i]), starts),
                          what=f"initial overlaps of seed {seed}")
    times = np.asarray(sgd.t, dtype=np.float64)
    p = build(cfg, jax.tree.map(lambda x: jnp.mean(x, axis=0), starts), times)
    integrator = p.integrator.with_jumps(p.steps.knot_times)
    ys, result, steps = jax.block_until_ready(
        _solve_seeds(traced_values(p.field), starts, jnp.asarray(times), integrator))
    _explain_seeds(sgd, ys, result, times, integrator)
    risk, err = model.state_risk(p.cfg, ys, p.backend)
    return ODEEnsemble(t=times, overlaps=ys, risk=np.asarray(risk), risk_err=np.asarray(err),
                       num_steps=tuple(int(n) for n in np.asarray(steps)), model=model)


def _explain_seeds(sgd: SGDResult, ys, result, times: np.ndarray, integrator: Integrator
                   ) -> None:
    """A one-line error naming the first seed whose ODE failed."""
    for i in range(len(sgd.seeds)):
        one = jax.tree.map(lambda x: np.asarray(x[i]), ys)
        finite = np.all(np.stack([np.isfinite(x).reshape(len(times), -1).all(axis=1)
                                  for x in jax.tree.leaves(one)]), axis=0)
        try:
            explain(jax.tree.map(lambda x: x[i], result), times, finite, integrator)
        except HeadflowError as failed:
            raise type(failed)(f"seed {sgd.seeds[i]}: {failed}") from None


def ode_from_seed_mean(cfg: Config, sgd: SGDResult, *, progress: bool = False) -> ODEResult:
    """The D → ∞ theory of an SGD run: [`headflow.dynamics.ode.run_ode`][] from the seed mean of the
    measured initial overlaps ([`seed_mean_initial`][]), on the SGD save grid."""
    return run_ode(cfg, seed_mean_initial(sgd), np.asarray(sgd.t), progress=progress)


def run_sde_checked(cfg: Config, dim: int, paths: int | None, *, progress: bool = False
                    ) -> SDEResult:
    """[`headflow.dynamics.sde.run_sde`][] at `dim`; a one-line
    [`headflow.dynamics.DivergenceError`][] when a path diverged (NaN/inf or above `BLOWUP`). Paths
    that only left the PSD cone are kept (`paths_invalid` in the report)."""
    res = run_sde(cfg, dim=dim, paths=paths, progress=progress)
    bounded = res.paths_bounded
    if not bounded.all():
        bad = np.flatnonzero(~bounded)
        first = np.asarray(res.first_invalid)[bad]
        raise DivergenceError(f"{len(bad)} of {len(bounded)} SDE paths diverged (NaN/inf or "
                              f"overlaps above {BLOWUP:.0e}; first at t = {np.nanmin(first):.4g},"
                              f" path {int(bad[0])}); try a smaller sde.dt (now "
                              f"{cfg.sde.dt:g}) or training.lr")
    return res


def compare(cfg: Config, *, dim: int | None = None, seeds: int | None = None,
            theory: str = "ode", paths: int | None = None, progress: bool = False
            ) -> tuple[SGDResult, ODEResult | ODEEnsemble | SDEResult, dict]:
    """SGD at `dim` over `seeds`, then the `theory` ([`THEORIES`][]) on the same time grid;
    returns both and the report.

    - `"ode"`: the ODE from the seed mean of the measured initial overlaps
      ([`agreement_report`][]);
    - `"ode-per-seed"`: one ODE per seed from its own initial overlaps
      ([`run_ode_per_seed`][]);
    - `"sde"`: `paths` SDE paths at the run's D (default `[sde] paths`), each from its own
      random start ([`run_sde_checked`][]).

    For the two ensembles the report is [`ensemble_report`][]; their moments over time are
    [`ensemble_series`][] of the [`canonical_arrays`][]."""
    if theory not in THEORIES:
        raise HeadflowError(f"--theory {theory!r}: choose from {', '.join(THEORIES)}")
    model = cfg.build_model()
    layout, observable = model.layout, model.escape_observable
    sgd = run_sgd(cfg, dim=dim, seeds=seeds, progress=progress)
    if theory == "ode":
        ode = ode_from_seed_mean(cfg, sgd, progress=progress)
        report = {"theory": "ode", **agreement_report(sgd.arrays(), ode.arrays(), dim=sgd.dim,
                                                      seeds=len(sgd.seeds), layout=layout,
                                                      observable=observable)}
        report.update(_ode_settings(cfg))
        return sgd, ode, report
    res: ODEEnsemble | SDEResult
    if theory == "ode-per-seed":
        res = run_ode_per_seed(cfg, sgd)
    else:
        res = run_sde_checked(cfg, sgd.dim, paths, progress=progress)
    th = res.arrays()
    th["t"] = np.asarray(sgd.t)
    report = ensemble_report(sgd.arrays(), th, dim=sgd.dim, theory_name=theory, layout=layout,
                             observable=observable)
    if theory == "ode-per-seed":
        report.update(_ode_settings(cfg))
    else:
        assert isinstance(res, SDEResult)
        invalid = ~res.paths_valid
        first = np.asarray(res.first_invalid)
        report["sde"] = {**{k: res.info[k] for k in ("dt", "solver", "noise", "samples_drift",
                                                      "drift", "samples_noise", "seed", "steps")
                            if k in res.info},
                         "paths_invalid": int(invalid.sum()),
                         "first_invalid_t": float(np.nanmin(first)) if invalid.any() else None}
    return sgd, res, report


def _ode_settings(cfg: Config) -> dict:
    """How the ODE was computed, for the report."""
    if cfg.model_kind == "attention":
        return {"ode_form": cfg.ode.form}
    return {"ode_expectation": cfg.ode.expectation}


def canonical_arrays(sgd: SGDResult, theory: ODEResult | ODEEnsemble | SDEResult,
                     layout: Layout = ATTENTION) -> tuple[dict, dict]:
    """Both runs' arrays in canonical head order (for figures)."""
    th = theory.arrays()
    return canonicalize_seeds(sgd.arrays(), layout), (
        canonicalize(th, layout) if th["risk"].ndim == 1 else canonicalize_seeds(th, layout))
