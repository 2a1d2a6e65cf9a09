"""Figures of phases, escape times, sweeps and phase diagrams."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from headflow.dynamics import ATTENTION, Layout

from . import pyplot as plt

from ..experiments.phase_diagram import PHASE_CLASSES
from ..experiments.phases import Phases

PHASE_COLORS = ("#d9d9d9", "#fdae61", "#2c7bb6", "#d7191c", "#7b3294")


def alignment_labels(layout: Layout = ATTENTION) -> tuple[str, str, str]:
    """`(unit letter, direction letter, formula of the alignment)` of a model's layout:
    `("h", "f", "α_hf = m_hf/√q_hh")` for attention heads and features, `("i", "n",
    "α_in = R_in/√Q_ii")` for the committee's student and teacher units."""
    if layout == ATTENTION:
        return "h", "f", "α_hf = m_hf/√q_hh"
    a, g = layout.alignment
    return "i", "n", f"α_in = {a}_in/√{g}_ii"


def _stage_lines(ax, ph: Phases, *, labels: bool = True, feature: str = "f") -> None:
    if ph.plateau_entry is not None:
        ax.axvline(ph.plateau_entry, color="0.5", ls=":", lw=1)
    for i, s in enumerate(ph.stages):
        ax.axvline(s.time, color=f"C{s.feature % 10}", ls="--", lw=1.2)
        if labels:
            ax.annotate(f"stage {i + 1}: {feature}{s.feature + 1}", (s.time, 1.0),
                        xycoords=("data", "axes fraction"), rotation=90, va="top", ha="right",
                        fontsize=7, color=f"C{s.feature % 10}")


def plot_phases(path: Path, t: np.ndarray, risk: np.ndarray, alpha: np.ndarray, ph: Phases, *,
                title: str = "", risk_band: np.ndarray | None = None,
                layout: Layout = ATTENTION) -> None:
    """Risk with the plateau and stage markers, the per-feature head spread, and a heatmap of
    the head–feature alignment `α_hf(t)` (one row per head and feature); units, directions and
    the alignment are labelled as [`alignment_labels`][] says for `layout`."""
    u, f_, formula = alignment_labels(layout)
    T, H, F = alpha.shape
    fig, axes = plt.subplots(3, 1, figsize=(10, 9), sharex=True,
                             gridspec_kw={"height_ratios": [1.2, 1.0, 0.25 * H * F + 0.6]})
    ax = axes[0]
    ax.plot(t, risk, color="k", lw=1.5)
    if risk_band is not None:
        ax.fill_between(t, risk - risk_band, risk + risk_band, color="k", alpha=0.15, lw=0)
    if ph.plateau_entry is not None and ph.plateau_exit is not None:
        ax.axvspan(ph.plateau_entry, ph.plateau_exit, color="#fdae61", alpha=0.25,
                   label="unspecialized plateau")
        ax.legend(fontsize=8, loc="upper right")
    _stage_lines(ax, ph, feature=f_)
    ax.set_ylabel("risk")
    ax = axes[1]
    for f in range(F):
        ax.plot(t, alpha[:, :, f].max(axis=1) - alpha[:, :, f].min(axis=1), color=f"C{f}",
                label=f"spread along {f_}{f + 1}")
    ax.axhline(ph.threshold, color="0.4", lw=0.8, ls=":")
    for f, tf in enumerate(ph.feature_times):
        if tf is not None:
            ax.plot([tf], [ph.threshold], marker="v", color=f"C{f}", ms=8, ls="none")
    _stage_lines(ax, ph, labels=False)
    ax.set_ylabel(f"max_{u} α − min_{u} α\n(▼ feature times)")
    ax.legend(fontsize=8)
    ax = axes[2]
    rows = alpha.reshape(T, H * F).T
    lim = max(1e-3, float(np.nanmax(np.abs(rows))))
    im = ax.imshow(rows, aspect="auto", cmap="RdBu_r", vmin=-lim, vmax=lim,
                   extent=(t[0], t[-1], H * F - 0.5, -0.5), interpolation="nearest")
    ax.set_yticks(range(H * F), [f"{u}{h + 1} {f_}{f + 1}" for h in range(H) for f in range(F)],
                  fontsize=7)
    for h in range(1, H):
        ax.axhline(h * F - 0.5, color="k", lw=0.6)
    _stage_lines(ax, ph, labels=False)
    fig.colorbar(im, ax=ax, label=formula, pad=0.01, fraction=0.03)
    ax.set_xlabel("t = steps / D")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_escape(path: Path, report: dict, arrays: dict) -> None:
    """t_esc versus ln D (runs, means ± SEM, the fitted line with its 95% band, the SDE means
    with their 10–90% bands at the measured dimensions and at the extrapolation, the
    calibrated linear prediction) and the growth rate λ(t) along the symmetric trajectory;
    without the linear prediction (models other than attention: `linear_stability` false) the
    second panel shows the median SGD head spread per D instead."""
    dims = np.asarray(arrays["dims"], dtype=np.float64)
    x = np.log(dims)
    times = arrays["escape_times"]
    sde = bool(report.get("sde"))
    ext = list(report.get("extrapolation", [])) if sde else []
    x_ext = np.log(np.array([e["dim"] for e in ext], dtype=np.float64))
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(14 if ext else 13, 5))
    rng = np.random.default_rng(0)
    for i in range(len(dims)):
        ok = np.isfinite(times[i])
        ax.plot(x[i] + 0.02 * rng.standard_normal(ok.sum()), times[i][ok], ".", color="0.6",
                ms=3)
    mean = np.array([np.nan if m is None else m for m in report["escape_mean"]])
    sem = np.array([np.nan if s is None else s for s in report["escape_sem"]])
    ax.errorbar(x, mean, yerr=sem, fmt="o", color="k", capsize=3, label="SGD mean ± SEM")
    x_all = np.concatenate([x, x_ext])
    xx = np.linspace(x.min() - 0.1, x.max() + 0.1, 50)
    a, b = report["intercept_measured"], report["slope_measured"]
    lo, hi = report["slope_ci"]
    xm = np.mean(x)
    ym = a + b * xm
    ax.plot(xx, a + b * xx, color="C0",
            label=f"fit: slope {b:.3f} [{lo:.3f}, {hi:.3f}] (95%)")
    ax.fill_between(xx, ym + lo * (xx - xm), ym + hi * (xx - xm), color="C0", alpha=0.15, lw=0)
    if len(x_ext):
        xe = np.linspace(x.max() + 0.1, x_all.max() + 0.1, 30)
        ax.plot(xe, a + b * xe, color="C0", ls=":", lw=1, label="fit, extended")
    if sde:
        _plot_sde_escapes(ax, report, x, x_ext, ext)
    linear = report.get("linear_stability", True)
    if linear:
        _plot_linear_escapes(ax, report, arrays, x, x_ext)
    ax.axhline(report["t_max"], color="0.4", lw=0.6, ls="-.")
    ax.set_ylim(0.0, 1.08 * float(report["t_max"]))
    ax.set_xlabel("ln D")
    ax.set_ylabel("escape time t_esc")
    all_dims = np.concatenate([dims, [e["dim"] for e in ext]])
    ax.set_xticks(x_all, [f"{np.log(d):.2f}\n(D={int(d)})" for d in all_dims], fontsize=7)
    ax.legend(fontsize=7)
    ax.set_title("escape from the unspecialized plateau (dash-dot: t_max)")
    if linear:
        t = arrays["t"]
        pred = np.asarray(arrays["predicted"], dtype=np.float64)
        ax2.plot(t, arrays["growth_rate"], color="C3", label="λ(t): max Re eig of the "
                 "head-difference Jacobian")
        ax2.plot(t, np.gradient(arrays["median_log_spread"], t), color="C2", ls="--",
                 label="d/dt ln (linear head spread)")
        for p in pred[np.isfinite(pred)]:
            ax2.axvline(p, color="0.6", lw=0.8, ls=":")
        ax2.axhline(0, color="k", lw=0.5)
        ax2.set_xlabel("t")
        ax2.set_ylabel("growth rate")
        ax2.legend(fontsize=8)
        ax2.set_title("along the symmetric trajectory (dotted: calibrated predicted escapes)")
    else:
        t = np.asarray(arrays["sgd_t"])
        for i, D in enumerate(dims):
            ax2.plot(t, np.median(arrays["sgd_spread"][i], axis=0), color=f"C{i % 10}",
                     label=f"D = {int(D)}")
        ax2.axhline(report["threshold"], color="0.4", lw=0.8, ls=":")
        ax2.set_yscale("log")
        ax2.set_xlabel("t")
        ax2.set_ylabel("median SGD head spread (dotted: θ)")
        ax2.legend(fontsize=8)
        ax2.set_title("linear-stability prediction not computed for this model")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_linear_escapes(ax, report: dict, arrays: dict, x: np.ndarray, x_ext: np.ndarray
                         ) -> None:
    """The calibrated linear prediction (with its extrapolation) and the prediction from the
    initial perturbation alone."""
    pred = np.asarray(arrays["predicted"], dtype=np.float64)
    sp = report["slope_predicted"]
    cal_x, cal_y = x, pred
    if len(x_ext):
        cal_x = np.concatenate([x, x_ext])
        cal_y = np.concatenate([pred, np.asarray(arrays["calibrated_extrapolate"], float)])
    ax.plot(cal_x, cal_y, "s--", color="C3", ms=4,
            label=f"linear stability, calibrated offset: slope {sp:.3f}"
            + ("" if report["lambda"] is None else f" (λ_eff = {report['lambda']:.3f})"))
    pred0 = np.asarray(arrays["predicted_initial"], dtype=np.float64)
    if np.isfinite(pred0).any():
        ax.plot(x, pred0, "^:", color="C1", ms=4,
                label="linear stability, initial perturbation only")


def _plot_sde_escapes(ax, report: dict, x: np.ndarray, x_ext: np.ndarray, ext: list) -> None:
    """The SDE means with their 10–90% bands, at the measured dimensions and (open symbols)
    at the extrapolation; a censored 90% quantile is drawn at t_max with an up arrow."""
    t_max = float(report["t_max"])

    def band(means, quantiles):
        m = np.array([np.nan if v is None else v for v in means], dtype=np.float64)
        q = [[np.inf if qq[k] is None else qq[k] for k in ("0.1", "0.9")] for qq in quantiles]
        q = np.asarray(q, dtype=np.float64).reshape(-1, 2)
        censored = ~np.isfinite(q[:, 1])
        q = np.where(np.isfinite(q), q, t_max)
        return m, q, censored

    slope = report.get("slope_sde")
    m, q, cens = band(report["escape_sde_mean"], report["escape_sde_quantiles"])
    off = 0.04
    ax.errorbar(x + off, m, yerr=[np.clip(m - q[:, 0], 0, None), np.clip(q[:, 1] - m, 0, None)],
                fmt="D", color="C2", ms=4, capsize=3,
                label="SDE (parameter-free) mean, 10–90%"
                + ("" if slope is None else f": slope {slope:.3f}"))
    if len(x_ext):
        me, qe, ce = band([e["mean"] for e in ext], [e["quantiles"] for e in ext])
        ax.errorbar(x_ext, me, yerr=[np.clip(me - qe[:, 0], 0, None),
                                     np.clip(qe[:, 1] - me, 0, None)],
                    fmt="D", mfc="none", color="C2", ms=5, capsize=3,
                    label="SDE extrapolation, mean, 10–90%")
        x_c = np.concatenate([x + off, x_ext])[np.concatenate([cens, ce])]
    else:
        x_c = (x + off)[cens]
    if len(x_c):
        ax.plot(x_c, np.full(len(x_c), t_max), "^", color="C2", ms=7,
                label="SDE 90% quantile censored at t_max")


MAX_TICKS = 12
"""At most this many tick labels on an axis of a grid map (every k-th value beyond)."""
MAX_CELL_LABELS = 144
"""Grid maps of at most this many cells write each cell's value in it; larger grids are read
from the colour scale (their labels would overlap)."""


def _grid_ticks(ax, v1, v2) -> None:
    for axis, values in ((ax.xaxis, v1), (ax.yaxis, v2)):
        every = -(-len(values) // MAX_TICKS)
        idx = range(0, len(values), every)
        axis.set_ticks(list(idx), [f"{values[i]:g}" for i in idx])


def _cell_labels(ax, vals: np.ndarray, fmt: str) -> None:
    if vals.size > MAX_CELL_LABELS:
        return
    for i in range(vals.shape[0]):
        for j in range(vals.shape[1]):
            if np.isfinite(vals[i, j]):
                ax.text(i, j, fmt.format(vals[i, j]), ha="center", va="center", fontsize=7,
                        color="w")


def plot_sweep(path: Path, axes_spec: list[tuple[str, list]], values: np.ndarray, *,
               label: str, log: bool = False) -> None:
    """A scalar per grid point: a line (one axis) or a heatmap (two axes; further axes at their
    first value)."""
    fig, ax = plt.subplots(figsize=(7, 5))
    if len(axes_spec) == 1:
        (k, v), = axes_spec
        ax.plot(v, values, "o-")
        ax.set_xlabel(k)
        ax.set_ylabel(label)
    else:
        (k1, v1), (k2, v2) = axes_spec[:2]
        vals = values.reshape(len(v1), len(v2), -1)[..., 0]
        im = ax.imshow(vals.T, origin="lower", aspect="auto", cmap="viridis",
                       extent=(-0.5, len(v1) - 0.5, -0.5, len(v2) - 0.5))
        _grid_ticks(ax, v1, v2)
        ax.set_xlabel(k1)
        ax.set_ylabel(k2)
        fig.colorbar(im, ax=ax, label=label)
        _cell_labels(ax, vals, "{:.3g}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_phase_diagram(path: Path, k1: str, v1, k2: str, v2, classes: np.ndarray,
                       escape: np.ndarray | None = None, *, title: str = "") -> None:
    """Categorical map of the phase of each grid point (`classes (len(v1), len(v2))`, indices
    into [`PHASE_CLASSES`][]), with the escape time written in the specialized cells of a grid
    of at most [`MAX_CELL_LABELS`][] cells."""
    fig, ax = plt.subplots(figsize=(7.5, 5.5))
    from matplotlib.colors import ListedColormap

    cmap = ListedColormap(PHASE_COLORS)
    ax.imshow(np.asarray(classes).T, origin="lower", aspect="auto", cmap=cmap, vmin=-0.5,
              vmax=len(PHASE_CLASSES) - 0.5, extent=(-0.5, len(v1) - 0.5, -0.5, len(v2) - 0.5))
    _grid_ticks(ax, v1, v2)
    ax.set_xlabel(k1)
    ax.set_ylabel(k2)
    if escape is not None:
        _cell_labels(ax, np.asarray(escape), "{:.1f}")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in PHASE_COLORS]
    ax.legend(handles, PHASE_CLASSES, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.set_title(title or "phase at t_max (numbers: escape time)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
