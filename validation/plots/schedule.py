"""The figure of `headflow schedule`: the schedule and the risk curves it was judged on."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from . import pyplot as plt


def plot_schedule(path: Path, t: np.ndarray, *, lr_constant: float, lr_schedule: np.ndarray,
                  ode_constant: np.ndarray, ode_schedule: np.ndarray,
                  sgd_constant: np.ndarray, sgd_schedule: np.ndarray, title: str = "") -> None:
    """Left: η(t) of the schedule and the best constant η. Right: the ODE risk (dashed) and
    the SGD seed mean ± its standard error (band) for both."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    pos = t > 0
    a.plot(t[pos], lr_schedule[pos], color="C1", label="optimized schedule η(t)")
    a.axhline(lr_constant, color="C0", label=f"best constant η = {lr_constant:.3g}")
    a.set_xscale("log")
    a.set_yscale("log")
    a.set_xlabel("t = steps / D")
    a.set_ylabel("η")
    a.legend()
    for curve, sgd, color, label in ((ode_constant, sgd_constant, "C0", "constant η"),
                                     (ode_schedule, sgd_schedule, "C1", "schedule")):
        mean = sgd.mean(axis=0)
        sem = sgd.std(axis=0, ddof=1) / np.sqrt(len(sgd)) if len(sgd) > 1 else 0 * mean
        b.fill_between(t, mean - sem, mean + sem, color=color, alpha=0.3)
        b.plot(t, mean, color=color, label=f"SGD, {label}")
        b.plot(t, curve, color=color, ls="--", label=f"ODE, {label}")
    b.set_yscale("log")
    b.set_xlabel("t = steps / D")
    b.set_ylabel("population risk")
    b.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
