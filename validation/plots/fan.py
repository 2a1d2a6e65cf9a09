"""Fan charts of ensembles (SDE paths): median, 50% and 90% bands over time, optionally with
the SGD seeds drawn over them and the two ensembles' escape-time distributions."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from . import pyplot as plt
from .trajectories import _components, panel_names

BANDS = ((5.0, 95.0, 0.15), (25.0, 75.0, 0.3))
"""`(lower, upper percentile, opacity)` of the bands: 90% and 50% of the paths."""


def _series(name: str, arrays: dict, lead: int = 2) -> list[tuple[str, np.ndarray]]:
    """Labelled scalar series of one panel (`lead`: 2 for arrays `(runs, T, ...)`, 1 for one
    trajectory)."""
    risk = "R" if "m" in arrays else "ε_g"
    return [(risk, arrays["risk"])] if name == "risk" else _components(name, arrays[name], lead)


def escape_cdf(escapes: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The empirical distribution function of escape times on the grid `t`: the fraction of
    runs that escaped by each time (a run that never escapes, NaN, never counts)."""
    e = np.asarray(escapes, dtype=np.float64)
    e = np.where(np.isfinite(e), e, np.inf)
    return (e[None, :] <= np.asarray(t)[:, None]).mean(axis=1)


def plot_fan(path: Path, t: np.ndarray, arrays: dict, *, overlay: dict | None = None,
             escapes: tuple[np.ndarray, np.ndarray] | None = None,
             labels: tuple[str, str] = ("theory", "SGD"), title: str = "",
             curve: dict | None = None, seeds: dict | None = None,
             max_lines: int = 32) -> None:
    """Risk and every order parameter versus t, for arrays with a leading path axis: per
    component the median (line) and the bands holding the central 50% and 90% of the paths
    (percentiles over paths at each time; non-finite values ignored).

    `overlay` (arrays with a leading seed axis, e.g. the SGD seeds) is drawn over the fan: each
    seed as a thin line and the seed median dashed, in the component's colour. `escapes`
    `(overlay's, fan's)` escape times (NaN: never) add a panel with both empirical
    distribution functions. `labels` name `(the fan, the overlay)`; at most `max_lines` of the
    overlay's seeds are drawn (its median uses all).

    `curve` (one trajectory, e.g. the D → ∞ ODE) is drawn dotted in black, and `seeds` (arrays
    with a leading seed axis, e.g. weight-space SGD seeds) as thin black lines."""
    panels = ("risk",) + panel_names(arrays)
    ncols = 4 if escapes is not None else 3
    fig, axes = plt.subplots(2, ncols, figsize=(4.7 * ncols, 7.5))
    flat = list(axes.flat)
    for ax, name in zip(flat, panels):
        fan = _series(name, arrays)
        over = _series(name, overlay) if overlay is not None else []
        for k, (lbl, a) in enumerate(fan):
            color = f"C{k % 10}"
            for lo, hi, alpha in BANDS:
                ax.fill_between(t, np.nanpercentile(a, lo, axis=0),
                                np.nanpercentile(a, hi, axis=0), color=color, alpha=alpha, lw=0)
            ax.plot(t, np.nanmedian(a, axis=0), color=color, lw=1.4,
                    label=lbl if overlay is None else f"{lbl} {labels[0].split(',')[0]}")
        for k, (lbl, a) in enumerate(over):
            color = f"C{k % 10}"
            ax.plot(t, np.asarray(a)[:max_lines].T, color=color, lw=0.5, alpha=0.45)
            ax.plot(t, np.median(a, axis=0), color=color, lw=1.2, ls="--",
                    label=f"{lbl} SGD median")
        for k, (_, a) in enumerate(_series(name, seeds) if seeds is not None else []):
            drawn = ax.plot(t, np.asarray(a).T, color="k", lw=0.6, alpha=0.6)
            if k == 0:
                drawn[0].set_label("weight-space SGD")
        for k, (_, a) in enumerate(_series(name, curve, 1) if curve is not None else []):
            ax.plot(t, a, color="k", lw=1.2, ls=":", label="D → ∞ ODE" if k == 0 else None)
        ax.set_title("risk" if name == "risk" else name)
        ax.set_xlabel("t = steps / D")
        if len(fan) + len(over) <= 12:
            ax.legend(fontsize=7, ncol=2, loc="upper right")  # "best" is slow and warns
    if escapes is not None:
        ax = flat[len(panels)]
        for e, lbl, ls in ((escapes[1], labels[0], "-"), (escapes[0], labels[1], "--")):
            e = np.asarray(e, dtype=np.float64)
            ax.step(t, escape_cdf(e, t), where="post", ls=ls, color="k",
                    label=f"{lbl}: {int(np.isfinite(e).sum())}/{len(e)} escaped")
        ax.set_ylim(0, 1.02)
        ax.set_title("escape times: fraction escaped by t")
        ax.set_xlabel("t = steps / D")
        ax.legend(fontsize=7, loc="upper left")
        for ax in flat[len(panels) + 1:]:
            ax.axis("off")
    what = ("median, 50% and 90% of the paths" if overlay is None else
            f"{labels[0]}: median, 50% and 90% bands; {labels[1]}: thin lines, median dashed")
    if seeds is not None:
        what += "; weight-space SGD: thin black lines"
    if curve is not None:
        what += "; D → ∞ ODE: dotted"
    fig.suptitle((title + "\n" if title else "") + what)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
