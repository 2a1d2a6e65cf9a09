"""The finite-size scaling figure: learning curves of the ODE against the SGD seed mean at a few
D, and the ODE–SGD deviation against D on log-log axes with its fitted slope."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from . import pyplot as plt


def draw_risk_curves(ax, report: dict, arrays: dict) -> None:
    """The risk of the SGD seed mean (± seed std) and of the ODE at the smallest, middle and
    largest D, with the pre-escape window shaded."""
    dims, t = np.asarray(arrays["dims"]), np.asarray(arrays["t"])
    n = len(dims)
    for j, i in enumerate(sorted({0, n // 2, n - 1})):
        m, sd = arrays["risk_sgd_mean"][i], arrays["risk_sgd_std"][i]
        ax.plot(t, m, color=f"C{j}", lw=1.3, label=f"SGD mean, D = {int(dims[i])}")
        ax.fill_between(t, m - sd, m + sd, color=f"C{j}", alpha=0.15, lw=0)
        ax.plot(t, arrays["risk_ode"][i], color=f"C{j}", ls="--", lw=1.2,
                label=f"ODE from the D = {int(dims[i])} seed-mean start")
    ax.axvspan(0, report["t_window"], color="0.85", zorder=0, label="pre-escape window")
    ax.set(xlabel="t = steps / D", ylabel="population risk",
           title=f"risk: SGD mean ± seed std ({report['seeds']} seeds) and ODE")
    ax.legend(fontsize=7)


def draw_deviation(ax, report: dict, arrays: dict) -> None:
    """`δ(D)` with its bootstrap error bars, the fitted line and its slope interval, the slope
    `−1/2` through the points' centre, and the diagnostics (RMS relative risk deviation, spread
    about the seed mean, bias of the seed mean and its noise level), on log-log axes."""
    dims = np.asarray(arrays["dims"], dtype=np.float64)
    fits = report["fits"]
    xx = np.geomspace(dims.min() / 1.3, dims.max() * 1.3, 50)

    def line(key):
        f = fits[key]
        return np.exp(f["intercept"]) * xx ** f["slope"]

    delta = np.asarray(arrays["delta"])
    lo, hi = report["slope_ci"]
    ax.errorbar(dims, delta, yerr=arrays["delta_se"], fmt="o", color="C0", capsize=3,
                label=r"$\delta$: RMS $|\Omega_{SGD} - \Omega_{ODE}|$ over seeds, "
                      r"$0 < t \leq t_w$")
    ax.plot(xx, line("delta"), color="C0",
            label=f"fit: slope {report['slope']:.3f} [{lo:.3f}, {hi:.3f}] "
                  f"({100 * report['level']:.0f}%)")
    centre = np.exp(np.log(delta).mean() - report["slope_expected"] * np.log(dims).mean())
    ax.plot(xx, centre * xx ** report["slope_expected"], color="k", ls=":",
            label=f"slope {report['slope_expected']:g}")
    ax.plot(dims, arrays["risk_rms"], "s", color="C1", ms=5,
            label=f"RMS rel. risk deviation (slope {fits['risk_rms']['slope']:.2f})")
    ax.plot(xx, line("risk_rms"), color="C1", lw=0.8)
    ax.plot(dims, arrays["spread"], "v", mfc="none", color="C0",
            label=f"spread about the seed mean (slope {fits['spread']['slope']:.2f})")
    ax.plot(dims, arrays["bias"], "^", mfc="none", color="C2",
            label=f"bias, seed mean − ODE (slope {fits['bias']['slope']:.2f})")
    ax.plot(dims, arrays["noise_level"], "_", color="C2", ms=10,
            label="noise level of the bias, spread/√seeds")
    ax.set(xscale="log", yscale="log", xlabel="D", ylabel="deviation from the ODE",
           title=f"finite-size scaling, 0 < t ≤ {report['t_window']:.3g} "
                 f"({report['seeds']} seeds per D)")
    ax.set_xticks(dims, [str(int(D)) for D in dims], minor=False)
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.legend(fontsize=7)


def plot_scaling(path: Path, report: dict, arrays: dict) -> None:
    """[`draw_risk_curves`][] and [`draw_deviation`][] side by side, saved to `path`."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.6))
    draw_risk_curves(a, report, arrays)
    draw_deviation(b, report, arrays)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
