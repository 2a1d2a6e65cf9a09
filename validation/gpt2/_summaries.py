"""Host-side summaries of the bound experiments: one function per experiment.

Every function takes the per-row arrays that [`run_bounds`][] gathered for one normalizer
(numpy, `(heads, windows, rows, ...)`, see [`ExperimentData`][]) and returns a [`Summary`][]:
the JSON-able section of `report.json` and the curves saved in `curves.npz`. Statistics use,
for a given N, the query rows whose selection leaves something out (`t ≥ N`, i.e. `L_t > N`),
averaged per head over those rows and over the windows (the paper's token mean); docs/gpt2.md,
"The experiments", describes each one.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
from scipy.special import comb

from ._bounds_config import BoundsConfig
from ._config import GPT2Config


class Summary(NamedTuple):
    """One experiment's section of `report.json` and its curves (numpy arrays)."""

    report: dict[str, Any]
    curves: dict[str, np.ndarray]


class ExperimentData(NamedTuple):
    """The per-row results of one normalizer, host side: one `{name: array}` dict per
    experiment, arrays `(heads, windows, rows, ...)` (coverage: `(layers, windows, rows, ...)`
    for the per-layer counts)."""

    distance: dict[str, np.ndarray]
    critical: dict[str, np.ndarray]
    separability: dict[str, np.ndarray]
    gradient: dict[str, np.ndarray]
    vanishing: dict[str, np.ndarray]
    coverage: dict[str, np.ndarray]


# --------------------------------------------------------------------------------------------
# Small helpers.


def row_mean(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Per-head mean over windows and the selected rows: values (heads, windows, L, ...)."""
    sel = values[:, :, rows]
    return sel.reshape(sel.shape[0], -1, *sel.shape[3:]).mean(axis=1)


def rows_for(length: int, n: int) -> np.ndarray:
    """Query rows of the first `length` tokens whose context exceeds N (t ≥ N)."""
    return np.arange(min(n, length), length)


def fit_line(xs, ys) -> dict[str, float]:
    """Least-squares line `y = slope x + intercept` and its r² (NaN for fewer than 2 points)."""
    xs, ys = np.asarray(xs, float), np.asarray(ys, float)
    if len(xs) < 2:
        return {"slope": math.nan, "intercept": math.nan, "r2": math.nan}
    slope, intercept = np.polyfit(xs, ys, 1)
    pred = slope * xs + intercept
    ss = np.sum((ys - ys.mean()) ** 2)
    return {"slope": float(slope), "intercept": float(intercept),
            "r2": float(1 - np.sum((ys - pred) ** 2) / ss) if ss > 0 else 1.0}


def ks_pvalue(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided two-sample Kolmogorov–Smirnov p-value (1 for identical samples)."""
    from scipy.stats import ks_2samp

    if np.allclose(a, b, rtol=0, atol=0):
        return 1.0
    return float(ks_2samp(a, b).pvalue)


def _none_or(values, fn):
    return [None if v is None else fn(v) for v in values]


# --------------------------------------------------------------------------------------------
# Model and protocol.


def summarize_setup(cfg: BoundsConfig, model: GPT2Config, normalizer: str) -> dict[str, Any]:
    """The `model` and `protocol` sections: what was measured, on what.

    **Arguments:** the [`BoundsConfig`][], the model's [`GPT2Config`][] and the normalizer name.

    **Returns:** `{"model": ..., "protocol": ...}`.
    """
    return {
        "model": {"n_layer": model.n_layer, "n_head": model.n_head, "n_embd": model.n_embd,
                  "d_head": model.d_head, "vocab_size": model.vocab_size,
                  "parameters": model.num_params(), "heads": model.n_layer * model.n_head},
        "protocol": {"L": cfg.length, "windows": cfg.windows, "vectors": cfg.vectors,
                     "reading": cfg.reading, "rows": "query rows t ≥ N of each prefix window",
                     "normalizer": normalizer},
    }


# --------------------------------------------------------------------------------------------
# Experiment 1: distance vs L (and entropy vs log L).


def entropy_by_length(cfg: BoundsConfig, van: dict[str, np.ndarray]
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Attention entropy per L of the sweep: `(mean over the rows t < L, row t = L − 1)`,
    each averaged over heads and windows."""
    lengths = list(cfg.lengths)
    ent_mean = np.array([row_mean(van["entropy"], np.arange(L)).mean() for L in lengths])
    ent_last = np.array([van["entropy"][:, :, L - 1].mean() for L in lengths])
    return ent_mean, ent_last


def summarize_distance_vs_length(
    cfg: BoundsConfig,
    dist: dict[str, np.ndarray],
    van: dict[str, np.ndarray],
    *,
    dist_ns: tuple[int, ...],
) -> Summary:
    """Experiment 1: `d̃` of the top-N set at `N = n_fixed` for every L of the sweep, with the
    random-set expectation (Jensen formula and Monte Carlo), Theorem 1's bound and its weaker
    form, a linear fit of `d̃` against L, and the attention entropy against `log L`.

    **Arguments:**

    - `cfg`: the [`BoundsConfig`][].
    - `dist`: the distance arrays (`top`, `formula`, `mc`, `mc_sem`, `bound`, `bound_max`), with a
      trailing axis over `dist_ns`.
    - `van`: the vanishing arrays (for the entropy).
    - `dist_ns`: the N of the trailing axis.

    **Returns:** the `distance_vs_L` [`Summary`][].
    """
    lengths = list(cfg.lengths)
    i_fixed = dist_ns.index(cfg.n_fixed)
    rows_of = {L: rows_for(L, cfg.n_fixed) for L in lengths}
    series = {
        name: np.array([row_mean(dist[name][..., i_fixed], rows_of[L]) for L in lengths])
        for name in ("top", "formula", "mc", "bound", "bound_max")
    }
    mc_sem = np.array(
        [
            np.sqrt(np.mean(row_mean(dist["mc_sem"][..., i_fixed] ** 2, rows_of[L])))
            / math.sqrt(max(len(rows_of[L]) * cfg.windows, 1))
            for L in lengths
        ]
    )
    ent_mean, ent_last = entropy_by_length(cfg, van)
    top = series["top"].mean(axis=1)
    report = {
        "N": cfg.n_fixed,
        "L": lengths,
        "distance": top.tolist(),
        "distance_q25": np.quantile(series["top"], 0.25, axis=1).tolist(),
        "distance_q75": np.quantile(series["top"], 0.75, axis=1).tolist(),
        "random_formula": series["formula"].mean(axis=1).tolist(),
        "random_mc": series["mc"].mean(axis=1).tolist(),
        "random_mc_sem": (mc_sem / math.sqrt(series["mc"].shape[1])).tolist(),
        "bound": series["bound"].mean(axis=1).tolist(),
        "bound_max": series["bound_max"].mean(axis=1).tolist(),
        "bound_over_distance": (series["bound"].mean(axis=1) / top).tolist(),
        "bound_max_over_distance": (series["bound_max"].mean(axis=1) / top).tolist(),
        "linear_fit_distance_vs_L": fit_line(lengths, top),
        "entropy_mean": ent_mean.tolist(),
        "entropy_last_row": ent_last.tolist(),
        "log_L": np.log(lengths).tolist(),
    }
    curves = {
        "e1_L": np.array(lengths),
        "e1_top": series["top"],
        "e1_formula": series["formula"],
        "e1_mc": series["mc"],
        "e1_bound": series["bound"],
        "e1_bound_max": series["bound_max"],
        "e1_entropy_mean": ent_mean,
        "e1_entropy_last": ent_last,
    }
    return Summary(report, curves)


# --------------------------------------------------------------------------------------------
# Experiment 2: distance vs N at the largest L.


def summarize_distance_vs_n(
    cfg: BoundsConfig, dist: dict[str, np.ndarray], *, dist_ns: tuple[int, ...]
) -> Summary:
    """Experiment 2: `d̃`, the random-set expectation and Theorem 1's bound for every N of
    `n_values` at the largest L, with two consistency diagnostics: the number of heads whose
    Jensen formula exceeds the Monte Carlo mean by more than 3 standard errors (Jensen says 0),
    and the fraction of rows where `d_1` was computed exactly.

    **Arguments:** as [`summarize_distance_vs_length`][] (without the entropy).

    **Returns:** the `distance_vs_N` [`Summary`][].
    """
    length = cfg.length
    per_n = {
        name: np.stack(
            [row_mean(dist[name][..., i], rows_for(length, n)) for i, n in enumerate(dist_ns)]
        )
        for name in ("top", "formula", "mc", "bound", "bound_max")
    }
    keep = [dist_ns.index(n) for n in sorted(set(cfg.n_values))]
    report: dict[str, Any] = {"L": length, "N": [dist_ns[i] for i in keep]}
    for name, key in (
        ("top", "distance"),
        ("formula", "random_formula"),
        ("mc", "random_mc"),
        ("bound", "bound"),
        ("bound_max", "bound_max"),
    ):
        report[key] = per_n[name][keep].mean(axis=1).tolist()
    top = per_n["top"][keep].mean(axis=1)
    report["distance_over_random_mc"] = (top / per_n["mc"][keep].mean(axis=1)).tolist()
    exact_rows, all_rows, jensen = 0, 0, []
    for i, n in enumerate(dist_ns):
        rows = rows_for(length, n)
        exact_rows += int(np.sum(dist["d1_exact"][..., i][:, :, rows]))
        all_rows += dist["d1_exact"][..., i][:, :, rows].size
        # Jensen per head: token mean of the formula vs the Monte Carlo token mean ± 3 s.e.
        mc = row_mean(dist["mc"][..., i], rows)
        formula = row_mean(dist["formula"][..., i], rows)
        sem = np.sqrt(row_mean(dist["mc_sem"][..., i] ** 2, rows) / max(len(rows) * cfg.windows, 1))
        jensen.append(int(np.sum(formula > mc + 3 * sem + 1e-6 * np.abs(mc))))
    report["jensen_formula_above_mc_heads"] = jensen
    report["d1_exact_fraction"] = exact_rows / max(all_rows, 1)
    report["bound_over_distance"] = (per_n["bound"][keep].mean(axis=1) / top).tolist()
    report["bound_max_over_distance"] = (per_n["bound_max"][keep].mean(axis=1) / top).tolist()
    curves = {
        "e2_N": np.array(report["N"]),
        "e2_top": per_n["top"][keep],
        "e2_formula": per_n["formula"][keep],
        "e2_mc": per_n["mc"][keep],
        "e2_bound": per_n["bound"][keep],
        "e2_bound_max": per_n["bound_max"][keep],
    }
    return Summary(report, curves)


# --------------------------------------------------------------------------------------------
# Experiment 3: critical top-N.


def critical_n(
    cfg: BoundsConfig, crit: dict[str, np.ndarray], reference: str, *, grid: tuple[int, ...]
) -> tuple[list[int | None], list[int | None], dict[str, list[float]]]:
    """The critical top-N of every L against one reference expectation.

    For every N of the grid (below L), the per-head token means of `d̃` and of the reference
    are compared by a two-sample Kolmogorov–Smirnov test across the heads.

    **Arguments:**

    - `cfg`, `crit`: the config and the critical-N arrays (`top`, `formula`, `mc`).
    - `reference`: `"mc"` (Monte Carlo) or `"formula"` (Jensen).
    - `grid`: the N grid (trailing axis of `crit`).

    **Returns:** `(first, stable, p_values)`: per L the first N where the test does not reject
    at `ks_alpha` (`None` if none), the first N from which on it never rejects again, and the
    p-values by L.
    """
    found, stable, pvals = [], [], {}
    for L in cfg.lengths:
        ps, ns = [], []
        for i, n in enumerate(grid):
            if n >= L:
                break
            rows = rows_for(L, n)
            ps.append(
                ks_pvalue(
                    row_mean(crit["top"][..., i], rows), row_mean(crit[reference][..., i], rows)
                )
            )
            ns.append(n)
        keep = [p >= cfg.ks_alpha for p in ps]
        found.append(next((n for n, k in zip(ns, keep) if k), None))
        tail = None
        for n, k in zip(reversed(ns), reversed(keep)):
            if not k:
                break
            tail = n
        stable.append(tail)
        pvals[str(L)] = ps
    return found, stable, pvals


def _slope_through_origin(lengths, ns) -> float | None:
    pts = [(L, n) for L, n in zip(lengths, ns) if n is not None]
    return sum(L * n for L, n in pts) / sum(L * L for L, _ in pts) if pts else None


def summarize_critical_n(
    cfg: BoundsConfig, crit: dict[str, np.ndarray], *, grid: tuple[int, ...]
) -> Summary:
    """Experiment 3: the critical top-N of every L, against the Monte Carlo random-set
    expectation (one random subset per row; the token mean averages its noise) and, as in the
    paper's approximation, against the Jensen formula; with slopes through the origin of
    critical N against L.

    **Arguments:** the config, the critical-N arrays and the N `grid`.

    **Returns:** the `critical_topn` [`Summary`][].
    """
    lengths = list(cfg.lengths)
    crit_n, crit_stable, pvals = critical_n(cfg, crit, "mc", grid=grid)
    crit_n_formula, crit_stable_formula, pvals_formula = critical_n(cfg, crit, "formula", grid=grid)
    over_l = lambda ns: [None if n is None else n / L for L, n in zip(lengths, ns)]  # noqa: E731
    report = {
        "alpha": cfg.ks_alpha,
        "L": lengths,
        "reference": "Monte Carlo (1 subset per row)",
        "critical_N": crit_n,
        "critical_N_over_L": over_l(crit_n),
        "slope_through_origin": _slope_through_origin(lengths, crit_n),
        "critical_N_stable": crit_stable,
        "critical_N_stable_over_L": over_l(crit_stable),
        "slope_through_origin_stable": _slope_through_origin(lengths, crit_stable),
        "critical_N_formula": crit_n_formula,
        "critical_N_stable_formula": crit_stable_formula,
        "critical_N_over_L_formula": over_l(crit_n_formula),
        "slope_through_origin_formula": _slope_through_origin(lengths, crit_n_formula),
        "grid": list(grid),
        "p_values": pvals,
        "p_values_formula": pvals_formula,
    }
    as_float = lambda ns: np.array([np.nan if n is None else n for n in ns], float)  # noqa: E731
    curves = {
        "e3_L": np.array(lengths),
        "e3_critical_N": as_float(crit_n),
        "e3_critical_N_formula": as_float(crit_n_formula),
        "e3_critical_N_stable": as_float(crit_stable),
        "e3_grid": np.array(grid),
    }
    for name in ("top", "formula", "mc"):
        curves[f"e3_{name}_at_L"] = np.stack(
            [row_mean(crit[name][..., i], rows_for(cfg.length, n)) for i, n in enumerate(grid)]
        )
    return Summary(report, curves)


# --------------------------------------------------------------------------------------------
# Experiment 4: geometric separability.


def _valid_mean(values: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Per-head mean over the valid rows: `(heads, windows, rows, N) → (heads, N)`."""
    num = np.sum(np.where(valid, values, 0), axis=(1, 2))
    den = np.maximum(np.sum(valid, axis=(1, 2)), 1)
    return num / den


def summarize_separability(
    cfg: BoundsConfig, sep: dict[str, np.ndarray], *, sep_ns: tuple[int, ...]
) -> Summary:
    """Experiment 4: the head-mean `N_s/N` against N at the largest L with Theorem 2's rigorous
    lower bound and heuristic upper bound, its plateau (min and max over `N ≥ plateau_from`),
    the fraction of rows with δ = 0 and how often the heuristic upper bound is exceeded.

    **Arguments:** the config, the separability arrays and their N grid `sep_ns`.

    **Returns:** the `separability` [`Summary`][]; the plateau is `[NaN, NaN]` when no N of the
    grid reaches `plateau_from` (written as `null`).
    """
    valid = sep["valid"]
    ratio_h, lower_h, upper_h = (_valid_mean(sep[k], valid) for k in ("ratio", "lower", "upper"))
    ratio = ratio_h.mean(axis=0)
    plateau_idx = [i for i, n in enumerate(sep_ns) if n >= cfg.plateau_from]
    plateau = (
        [float(ratio[plateau_idx].min()), float(ratio[plateau_idx].max())]
        if plateau_idx
        else [math.nan, math.nan]
    )
    report = {
        "L": cfg.length,
        "N": list(sep_ns),
        "ratio": ratio.tolist(),
        "ratio_q25": np.quantile(ratio_h, 0.25, axis=0).tolist(),
        "ratio_q75": np.quantile(ratio_h, 0.75, axis=0).tolist(),
        "lower": lower_h.mean(axis=0).tolist(),
        "upper": upper_h.mean(axis=0).tolist(),
        "plateau_from": cfg.plateau_from,
        "plateau": plateau,
        "argmin_N": int(sep_ns[int(np.argmin(ratio))]),
        "delta_zero_fraction": float(np.sum(sep["delta_zero"]) / max(np.sum(valid), 1)),
        "upper_exceeded_fraction": float(np.sum(sep["upper_exceeded"]) / max(np.sum(valid), 1)),
    }
    curves = {
        "e4_N": np.array(sep_ns),
        "e4_ratio": ratio_h,
        "e4_lower": lower_h,
        "e4_upper": upper_h,
    }
    return Summary(report, curves)


# --------------------------------------------------------------------------------------------
# Experiment 5: gradient sensitivity.


def summarize_gradient(
    cfg: BoundsConfig,
    grad: dict[str, np.ndarray],
    *,
    rows_grad: np.ndarray,
    model_temperature: float,
) -> Summary:
    """Experiment 5: the Jacobian's spectral norm, its largest diagonal entry and the
    finite-difference sensitivity for each ε against the temperature (token mean per head,
    then the maximum over heads), with the slope of `log S` against `log T` for `T < 0.1` and
    the drop `log10(S(T_min) / max_{T ≥ 1} S(T))`.

    **Arguments:** the config, the gradient arrays, the query rows used per head and the
    model's own temperature (marked on the figure).

    **Returns:** the `gradient` [`Summary`][].
    """
    temps = np.array(cfg.temperatures)
    norm_h = grad["norm"].mean(axis=1)  # (heads, T): mean over windows
    diag_h = grad["diag"].mean(axis=1)
    fd_h = grad["fd"].mean(axis=1)  # (heads, T, eps)
    series = {"jacobian_norm": norm_h.max(axis=0), "jacobian_diag": diag_h.max(axis=0)}
    for j, e in enumerate(cfg.eps):
        series[f"fd_eps_{e:g}"] = fd_h[..., j].max(axis=0)
    small = temps < 0.1
    large = temps >= 1
    report: dict[str, Any] = {
        "T": temps.tolist(),
        "rows_per_head": int(len(rows_grad)),
        "bound_spectral_1_over_2T": (1 / (2 * temps)).tolist(),
        "bound_diag_1_over_4T": (1 / (4 * temps)).tolist(),
        "bound_fd_sqrt2_over_eps": {f"{e:g}": math.sqrt(2) / e for e in cfg.eps},
        "model_temperature": model_temperature,
    }
    slopes: dict[str, float | None] = {}
    drops: dict[str, float | None] = {}
    for name, s in series.items():
        report[name] = s.tolist()
        if small.sum() >= 2 and np.all(s[small] > 0):
            slopes[name] = float(np.polyfit(np.log(temps[small]), np.log(s[small]), 1)[0])
        else:
            slopes[name] = None
        if large.any() and s[0] > 0 and np.max(s[large]) > 0:
            drops[name] = float(np.log10(s[0] / np.max(s[large])))
        else:
            drops[name] = None
    report["slope_T_below_0.1"] = slopes
    report["drop_orders_T_ge_1"] = drops
    curves = {"e5_T": temps, **{f"e5_{k}": v for k, v in series.items()}, "e5_norm_heads": norm_h}
    return Summary(report, curves)


# --------------------------------------------------------------------------------------------
# Vanishing attention.


def summarize_vanishing(cfg: BoundsConfig, van: dict[str, np.ndarray]) -> Summary:
    """Lemma 1 / Corollary 1 on the weights: the median of `2Δ/T` (the exponent of Corollary 1's
    interval), entropy of the row with exactly L keys over `log L` (1 for uniform weights), and
    `L · max_j α_j` of that row (bounded by `e^{2Δ/T}` for softmax; it stays O(1) as L grows
    when attention vanishes), each per L of the sweep, plus the fraction of visible weights that
    are exactly zero.

    **Arguments:** the config and the vanishing arrays.

    **Returns:** the `vanishing` [`Summary`][].
    """
    lengths = list(cfg.lengths)
    _, ent_last = entropy_by_length(cfg, van)
    peak = np.array([van["peak_times_L"][:, :, L - 1].mean() for L in lengths])
    report = {
        "two_delta_over_T_median": float(np.median(van["two_delta_over_t"])),
        "entropy_last_row_over_log_L": (ent_last / np.log(lengths)).tolist(),
        "max_weight_last_row_times_L": peak.tolist(),
        "zero_weight_fraction": float(np.sum(van["zeros"]) / max(np.sum(van["visible"]), 1)),
    }
    return Summary(report, {"vanishing_max_weight_times_L": peak})


# --------------------------------------------------------------------------------------------
# Multi-head coverage.


def subset_miss_probability(k: np.ndarray, heads: int, h: int) -> np.ndarray:
    """`C(heads − k, h) / C(heads, h)`: the probability that none of the `k` heads that
    distinguish a token is among `h` heads drawn uniformly without replacement."""
    return comb(heads - k, h) / comb(heads, h)


def independent_heads_coverage(p_heads: np.ndarray, h: int) -> float:
    """`1 − E_S[Π_{j∈S} (1 − p_j)]` over uniformly random h-subsets S of heads with their own
    distinguishing probabilities `p_heads` (independent heads): the mean product is the
    elementary symmetric polynomial `e_h(1 − p)` over `C(heads, h)`."""
    poly = np.array([1.0])
    for q in 1 - np.asarray(p_heads, float):
        poly = np.convolve(poly, [1.0, q])  # coefficients of Π (1 + q_j t), lowest degree first
    return float(1 - poly[h] / comb(len(p_heads), h))


def summarize_coverage(cfg: BoundsConfig, cov: dict[str, np.ndarray], *, heads: int) -> Summary:
    """Multi-head coverage of the top-N set of each layer (docs/gpt2.md, "Multi-head coverage").

    For every N of `coverage_n`: the per-head probability `p` that a head distinguishes a token
    of the set, the measured coverage by h heads of the layer (exact mean over all h-subsets),
    the formula `1 − (1 − p̄)^h`, the independent-heads value with each head's own p, the
    largest gap to the formula, and the number of heads needed to reach `coverage_target`
    (measured, by the formula, and the paper's example `p = 0.8`).

    **Arguments:** the config, the coverage arrays (`p_N` `(layers·heads, windows, rows)`,
    `k_N` `(layers, windows, rows, N)`, `valid_N` `(layers, windows, rows)`) and the number of
    heads per layer.

    **Returns:** the `coverage` [`Summary`][] (per N, keyed by `str(N)`).
    """
    target = cfg.coverage_target
    hs = np.arange(1, heads + 1)
    subsets = range(1, heads + 1)
    report: dict[str, Any] = {
        "target": target,
        "heads_per_layer": heads,
        "H": hs.tolist(),
        "paper_example": {
            "p": 0.8,
            "H": 3,
            "coverage": 1 - 0.2**3,
            "heads_for_target": _heads_needed(0.8, target),
        },
        "N": {},
    }
    curves: dict[str, np.ndarray] = {"coverage_H": hs}
    for n in cfg.coverage_n:
        valid = cov[f"valid_{n}"].astype(bool)  # (layers, windows, rows)
        k = cov[f"k_{n}"]  # (layers, windows, rows, n)
        p = cov[f"p_{n}"]  # (layers·heads, windows, rows)
        layers = valid.shape[0]
        if not valid.any():
            report["N"][str(n)] = None
            continue
        valid_h = np.repeat(valid, heads, axis=0)
        p_heads = np.sum(np.where(valid_h, p, 0), axis=(1, 2)) / np.maximum(
            np.sum(valid_h, axis=(1, 2)), 1
        )
        tokens = k[valid]  # (valid rows, n)
        p_bar = float(tokens.mean() / heads)
        measured = np.array([1 - subset_miss_probability(tokens, heads, h).mean() for h in subsets])
        formula = 1 - (1 - p_bar) ** hs
        per_layer = p_heads.reshape(layers, heads)
        independent = np.array(
            [np.mean([independent_heads_coverage(pl, h) for pl in per_layer]) for h in subsets]
        )
        reached = np.nonzero(measured >= target)[0]
        report["N"][str(n)] = {
            "p_mean": p_bar,
            "p_heads_q25": float(np.quantile(p_heads, 0.25)),
            "p_heads_q75": float(np.quantile(p_heads, 0.75)),
            "coverage": measured.tolist(),
            "formula": formula.tolist(),
            "independent_heads": independent.tolist(),
            "max_abs_gap_to_formula": float(np.max(np.abs(measured - formula))),
            "heads_for_target": int(hs[reached[0]]) if reached.size else None,
            "heads_for_target_formula": _heads_needed(p_bar, target),
            "rows": int(valid.sum()),
        }
        curves.update(
            {
                f"coverage_{n}_measured": measured,
                f"coverage_{n}_formula": formula,
                f"coverage_{n}_independent": independent,
                f"coverage_{n}_p_heads": p_heads,
            }
        )
    return Summary(report, curves)


def _heads_needed(p: float, target: float) -> int | None:
    """Smallest h with `1 − (1 − p)^h ≥ target` (`None` if p = 0)."""
    if p <= 0:
        return None
    if p >= 1:
        return 1
    return max(1, math.ceil(math.log(1 - target) / math.log(1 - p) - 1e-12))


# --------------------------------------------------------------------------------------------
# Rigorous checks.


def summarize_checks(
    cfg: BoundsConfig,
    data: ExperimentData,
    *,
    dist_ns: tuple[int, ...],
    rows_grad: np.ndarray,
    jacobian_violations: dict[str, int],
    applicable: dict[str, bool],
) -> dict[str, Any]:
    """The rigorous bounds' violation counts (all must be zero) and how many cases each
    checked; bounds that do not apply to the normalizer are listed in `not_applicable`.

    **Arguments:**

    - `cfg`, `data`: the config and the per-row arrays.
    - `dist_ns`, `rows_grad`: the N of experiments 1–2 and the rows of experiment 5.
    - `jacobian_violations`: the Jacobian counts, keyed by the normalizer's bound names.
    - `applicable`: for `corollary1_weights`, `theorem1_fixed_set`, `theorem2_lower` and
      `jacobian`, whether the normalizer satisfies the bound's assumptions.

    **Returns:** `{"violations", "rigorous_violations", "checked", "not_applicable"}`.
    """
    dist, sep, van = data.distance, data.separability, data.vanishing
    heads = dist["top"].shape[0]
    length = cfg.length
    violations = {
        "corollary1_weights": int(np.sum(van["violations"])),
        "theorem1_fixed_set": int(np.sum(dist["violation"])),
        "theorem2_lower": int(np.sum(sep["violation"])),
        **jacobian_violations,
    }
    n_rows = int(sum(len(rows_for(length, n)) for n in dist_ns)) * heads * cfg.windows
    checked = {
        "corollary1_weights": int(van["entropy"].size * (length + 1) // 2)
        if applicable["corollary1_weights"]
        else 0,
        "theorem1_fixed_set": n_rows if applicable["theorem1_fixed_set"] else 0,
        "theorem2_lower": int(np.sum(sep["valid"])) if applicable["theorem2_lower"] else 0,
        "jacobian": int(len(rows_grad) * len(cfg.temperatures) * heads * cfg.windows)
        if applicable["jacobian"]
        else 0,
    }
    return {
        "violations": violations,
        "rigorous_violations": int(sum(violations.values())),
        "checked": checked,
        "not_applicable": sorted(name for name, ok in applicable.items() if not ok),
    }


# --------------------------------------------------------------------------------------------
# The whole report of one normalizer.


def summarize(
    cfg: BoundsConfig,
    model: GPT2Config,
    data: ExperimentData,
    *,
    normalizer: str,
    grid: tuple[int, ...],
    dist_ns: tuple[int, ...],
    sep_ns: tuple[int, ...],
    rows_grad: np.ndarray,
    model_temperature: float,
    jacobian_violations: dict[str, int],
    applicable: dict[str, bool],
) -> Summary:
    """Every section of one normalizer's report, in the order of `report.json`.

    **Arguments:** the config, the model's config, the per-row arrays, the normalizer's name,
    the N grids of experiments 3, 1–2 and 4, the rows of experiment 5, the model's own
    temperature, and the Jacobian violation counts and applicability of the rigorous checks
    (see [`summarize_checks`][]).

    **Returns:** the report (JSON-able; non-finite numbers are mapped to `null` when written)
    and all curves.
    """
    parts = {
        "distance_vs_L": summarize_distance_vs_length(
            cfg, data.distance, data.vanishing, dist_ns=dist_ns
        ),
        "distance_vs_N": summarize_distance_vs_n(cfg, data.distance, dist_ns=dist_ns),
        "critical_topn": summarize_critical_n(cfg, data.critical, grid=grid),
        "separability": summarize_separability(cfg, data.separability, sep_ns=sep_ns),
        "gradient": summarize_gradient(
            cfg, data.gradient, rows_grad=rows_grad, model_temperature=model_temperature
        ),
    }
    vanishing = summarize_vanishing(cfg, data.vanishing)
    coverage = summarize_coverage(cfg, data.coverage, heads=model.n_head)
    checks = summarize_checks(
        cfg,
        data,
        dist_ns=dist_ns,
        rows_grad=rows_grad,
        jacobian_violations=jacobian_violations,
        applicable=applicable,
    )
    report: dict[str, Any] = summarize_setup(cfg, model, normalizer)
    curves: dict[str, np.ndarray] = {}
    for name, part in parts.items():
        report[name] = part.report
        curves.update(part.curves)
    report.update(checks)
    report["vanishing"] = vanishing.report
    report["critical_n_over_L"] = parts["critical_topn"].report["critical_N_over_L"][-1]
    report["separability_plateau"] = parts["separability"].report["plateau"]
    report["coverage"] = coverage.report
    curves.update(vanishing.curves)
    curves.update(coverage.curves)
    return Summary(report, curves)


def comparison_row(report: dict[str, Any]) -> dict[str, Any]:
    """The headline numbers of one normalizer's report, for the side-by-side table.

    **Arguments:** a report from [`summarize`][].

    **Returns:** `{key: value}`: distance at N = n_fixed for the smallest and largest L and its
    ratio to the random set at each N of experiment 2, critical N/L at the largest L, the
    separability plateau, the gradient slope and drop, `L · max α` and entropy/log L at the
    largest L, the coverage p and heads needed at each N, and the rigorous violations.
    """
    e1, e2, e5 = report["distance_vs_L"], report["distance_vs_N"], report["gradient"]
    van, cov = report["vanishing"], report["coverage"]["N"]
    return {
        "distance_N_fixed_L_min": e1["distance"][0],
        "distance_N_fixed_L_max": e1["distance"][-1],
        "distance_over_random_mc": dict(zip(map(str, e2["N"]), e2["distance_over_random_mc"])),
        "critical_N_over_L": report["critical_n_over_L"],
        "separability_plateau": report["separability_plateau"],
        "separability_ratio_N_min": report["separability"]["ratio"][0],
        "gradient_slope_T_below_0.1": e5["slope_T_below_0.1"]["jacobian_norm"],
        "gradient_drop_orders_T_ge_1": e5["drop_orders_T_ge_1"]["jacobian_norm"],
        "max_weight_times_L_at_L_max": van["max_weight_last_row_times_L"][-1],
        "entropy_over_log_L_at_L_max": van["entropy_last_row_over_log_L"][-1],
        "zero_weight_fraction": van["zero_weight_fraction"],
        "coverage_p": {n: (c or {}).get("p_mean") for n, c in cov.items()},
        "coverage_heads_for_target": {n: (c or {}).get("heads_for_target") for n, c in cov.items()},
        "rigorous_violations": report["rigorous_violations"],
        "not_applicable": report["not_applicable"],
    }
