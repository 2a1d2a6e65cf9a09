"""Fan charts of ensembles (SDE paths): median, 50% and 90% bands over time."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dynamics import ORDER_PARAMETERS

from . import pyplot as plt
from .trajectories import _components

BANDS = ((5.0, 95.0, 0.15), (25.0, 75.0, 0.3))
"""`(lower, upper percentile, opacity)` of the bands: 90% and 50% of the paths."""


def plot_fan(path: Path, t: np.ndarray, arrays: dict, *, title: str = "") -> None:
    """Risk and every order parameter versus t, for arrays with a leading path axis: per
    component the median (line) and the bands holding the central 50% and 90% of the paths
    (percentiles over paths at each time; non-finite values ignored)."""
    panels = ("risk",) + ORDER_PARAMETERS
    fig, axes = plt.subplots(2, 3, figsize=(14, 7.5), sharex=True)
    for ax, name in zip(axes.flat, panels):
        series = [("R", arrays["risk"])] if name == "risk" else _components(name, arrays[name])
        for k, (lbl, a) in enumerate(series):
            color = f"C{k % 10}"
            for lo, hi, alpha in BANDS:
                ax.fill_between(t, np.nanpercentile(a, lo, axis=0),
                                np.nanpercentile(a, hi, axis=0), color=color, alpha=alpha, lw=0)
            ax.plot(t, np.nanmedian(a, axis=0), color=color, lw=1.4, label=lbl)
        ax.set_title("risk" if name == "risk" else name)
        if len(series) <= 12:
            ax.legend(fontsize=7, ncol=2)
    for ax in axes[-1]:
        ax.set_xlabel("t = steps / D")
    fig.suptitle((title + "\n" if title else "") + "median, 50% and 90% of the paths")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
