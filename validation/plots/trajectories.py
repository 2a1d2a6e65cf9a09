"""Figures of learning curves and order parameters."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from . import pyplot as plt

from headflow.dynamics import ORDER_PARAMETERS


_SYMMETRIC = {"q", "s", "Q", "T"}
"""Order parameters that are symmetric matrices (plotted by their upper triangle)."""

NOT_STATE = {"t", "steps", "risk", "risk_err", "seeds", "valid", "first_invalid", "escape"}
"""Arrays of the output files that are not order parameters."""


def panel_names(arrays: dict) -> tuple[str, ...]:
    """The order parameters to plot: the attention model's manifold ones, or every named order
    parameter of a model of the family (`Q`, `R`, `T`, `v`, `A` for the committee)."""
    if "m" in arrays:
        return ORDER_PARAMETERS
    return tuple(k for k in arrays if k not in NOT_STATE)


def _components(name: str, arr: np.ndarray, lead: int) -> list[tuple[str, np.ndarray]]:
    """Split an order-parameter array `(*lead axes, *shape)` (the time axis last of the `lead`
    leading axes) into labelled scalar series (symmetric matrices: upper triangle only)."""
    shape = arr.shape[lead:]
    out = []
    for idx in np.ndindex(*shape):
        if name in _SYMMETRIC and idx[0] > idx[1]:
            continue
        label = f"{name}_{''.join(str(i + 1) for i in idx)}"
        out.append((label, arr[(Ellipsis, *idx)]))
    return out


def plot_trajectories(path: Path, t: np.ndarray, *, sgd: dict | None = None,
                      ode: dict | None = None, title: str = "") -> None:
    """Risk and every order parameter versus t: SGD seed mean with a ±1 std band (arrays with a
    leading seed axis) and/or the ODE line."""
    panels = ("risk",) + panel_names(sgd if sgd is not None else ode or {})
    fig, axes = plt.subplots(2, 3, figsize=(14, 7.5), sharex=True)
    for ax, name in zip(axes.flat, panels):
        series = []
        risk = "R" if "m" in (sgd if sgd is not None else ode or {}) else "ε_g"
        if sgd is not None:
            series += [(lbl, a, "sgd") for lbl, a in ([(risk, sgd["risk"])] if name == "risk"
                                                       else _components(name, sgd[name], 2))]
        if ode is not None:
            series += [(lbl, a, "ode") for lbl, a in ([(risk, ode["risk"])] if name == "risk"
                                                       else _components(name, ode[name], 1))]
        colors: dict[str, str] = {}
        for lbl, a, kind in series:
            color = colors.setdefault(lbl, f"C{len(colors) % 10}")
            if kind == "sgd":
                mu, sd = a.mean(axis=0), a.std(axis=0)
                if name == "risk":  # single runs: their escape times scatter
                    ax.plot(t, a.T, color=color, lw=0.4, alpha=0.35)
                ax.plot(t, mu, color=color, lw=1.0, alpha=0.9,
                        label=f"{lbl} SGD" if ode is not None else lbl)
                ax.fill_between(t, mu - sd, mu + sd, color=color, alpha=0.2, lw=0)
            else:
                ax.plot(t, a, color=color, lw=1.8, ls="--" if sgd is not None else "-",
                        label=f"{lbl} ODE" if sgd is not None else lbl)
        ax.set_title("risk" if name == "risk" else name)
        if len(series) <= 12:
            ax.legend(fontsize=7, ncol=2)
    for ax in axes[-1]:
        ax.set_xlabel("t = steps / D")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
