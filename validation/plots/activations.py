"""Figures of the activation comparison and of pruning."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from . import pyplot as plt

from headflow.dynamics.activations import activation_class, activation_color, activation_names


def _color(act: str, i: int) -> str:
    del i
    return activation_color(act)


def label(act: str) -> str:
    """The activation's name in figures (its class's `label`)."""
    return activation_class(act).label if act in activation_names() else act


def plot_final_risk(path: Path, amplitudes, final: dict, final_err: dict, bayes, bayes_err, *,
                    mode: str, sgd: Sequence[dict] = (), null_risk: float | None = None,
                    stationary: dict | None = None, drift: dict | None = None,
                    title: str = "") -> None:
    """Final (long-time) risk versus signal amplitude per activation, with `R_Bayes` and SGD
    points; non-stationary states (t_max reached) drawn with open markers, labelled with
    their measured drift `max|RHS_i|/err_i` when `drift` is given."""
    fig, ax = plt.subplots(figsize=(6.8, 4.6))
    a = np.asarray(amplitudes, float)
    for i, (act, r) in enumerate(final.items()):
        c = _color(act, i)
        r, e = np.asarray(r), np.asarray(final_err[act])
        ax.errorbar(a, r, yerr=e, color=c, marker="o", ms=4, lw=1.5, capsize=2,
                    label=f"{label(act)} (ODE)")
        if stationary is not None:
            bad = ~np.asarray(stationary[act], bool)
            if bad.any():
                ax.plot(a[bad], r[bad], "o", ms=9, mfc="none", mec="k", lw=0.8)
                marks = [] if drift is None else [(k, drift[act][k]) for k in np.flatnonzero(bad)]
                for k, dr in marks:
                    ax.annotate(f"drift {dr:.2g}σ", (a[k], r[k]), fontsize=7, xytext=(6, 4),
                                textcoords="offset points")
    ax.errorbar(a, bayes, yerr=bayes_err, color="k", ls="--", lw=1.2, label=r"$R_{\rm Bayes}$")
    for j, p in enumerate(sgd):
        act = p["activation"]
        ax.errorbar([p["amplitude"]], [p["risk"]], yerr=[p["risk_sem"]], fmt="s", ms=6,
                    mfc="none", color=_color(act, list(final).index(act) if act in final else 0),
                    capsize=3,
                    label=(f"SGD D={p['dim']}, η={p['lr']:g}, {p['seeds']} seeds" if j == 0
                           else None))
        if p.get("ode_sgd_noise_risk") is not None:
            ax.plot([p["amplitude"]], [p["ode_sgd_noise_risk"]], "x", ms=8,
                    color=_color(act, list(final).index(act) if act in final else 0),
                    label="ODE with SGD noise, same η and t" if j == 0 else None)
    if null_risk is not None:
        ax.axhline(null_risk, color="0.6", lw=0.8, ls=":", label=r"$\hat y\equiv 0$")
    ax.set_xlabel(r"signal amplitude ($\sqrt{\nu}$ or factor)")
    ax.set_ylabel("long-time risk")
    ax.set_yscale("log")
    ax.set_title(title or f"final risk vs signal ({mode.replace('_', ' ')}); open circles: "
                 "not stationary by t_max", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_risk_curves(path: Path, runs: dict, bayes: dict | None = None, title: str = "") -> None:
    """Risk versus time of every long-time run (log time), one panel per activation, coloured
    by amplitude; `bayes`: {amplitude: R_Bayes} drawn as dotted lines."""
    acts = list(runs)
    fig, axes = plt.subplots(1, len(acts), figsize=(4.6 * len(acts), 3.8), squeeze=False,
                             sharey=True)
    for ax, act in zip(axes[0], acts):
        n = len(runs[act])
        for k, run in enumerate(runs[act]):
            c = plt.cm.viridis(k / max(n - 1, 1))
            t = np.maximum(run.ts, 1e-3)
            lbl = f"a={run.amplitude:g}" + (f", H={run.H}" if len({r.H for r in runs[act]}) > 1
                                            else "")
            ax.plot(t, run.risk_t, color=c, lw=1.3, label=lbl)
            if bayes is not None and run.amplitude in bayes:
                ax.axhline(bayes[run.amplitude], color=c, lw=0.7, ls=":")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("t")
        ax.set_title(label(act))
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("risk (ODE)")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_excess_eta(path: Path, etas, excess, excess_err, *, sgd: Sequence[dict] = (),
                    slope: float | None = None, bayes: float, gf_excess: float | None = None,
                    title: str = "") -> None:
    """Stationary excess risk `R − R_Bayes` versus η (log-log), ODE with η² terms and SGD."""
    from matplotlib.ticker import NullLocator

    fig, ax = plt.subplots(figsize=(5.6, 4.3))
    etas, excess = np.asarray(etas, float), np.asarray(excess, float)
    ax.errorbar(etas, np.abs(excess), yerr=excess_err, marker="o", color="C2", capsize=2,
                label="ODE with SGD noise" + (f" (slope {slope:.2f})" if slope else ""))
    if sgd:
        ax.errorbar([p["lr"] for p in sgd], [abs(p["risk"] - bayes) for p in sgd],
                    yerr=[p["risk_sem"] for p in sgd], fmt="s", mfc="none", color="C3",
                    capsize=3, label=f"SGD D={sgd[0]['dim']}, {sgd[0]['seeds']} seeds")
    if gf_excess is not None:
        ax.axhline(abs(gf_excess), color="0.5", ls=":", lw=1,
                   label="gradient flow |R − R_Bayes|")
    ref = etas.min(), etas.max()
    if excess[-1] > 0:
        ax.plot(ref, [excess[-1] * ref[0] / ref[1], excess[-1]], color="0.7", lw=0.8,
                ls="--", label="∝ η")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(list(etas))
    ax.set_xticklabels([f"{e:g}" for e in etas])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("learning rate η")
    ax.set_ylabel(r"$R_{\rm stationary} - R_{\rm Bayes}$")
    ax.set_title(title or "Bayes-softmax: excess risk from SGD noise", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_risk_vs_heads(path: Path, heads, risks: dict, risk_err: dict, *, bayes: float,
                       S: int | None = None, title: str = "") -> None:
    """Long-time risk versus the number of heads H per activation, with R_Bayes and H = S."""
    fig, ax = plt.subplots(figsize=(5.6, 4.3))
    for i, (act, r) in enumerate(risks.items()):
        ax.errorbar(heads, r, yerr=risk_err[act], marker="o", color=_color(act, i), capsize=2,
                    label=label(act))
    ax.axhline(bayes, color="k", ls="--", lw=1, label=r"$R_{\rm Bayes}$")
    if S is not None:
        ax.axvline(S, color="0.6", ls=":", lw=1, label=f"H = S = {S}")
    ax.set_xlabel("heads H")
    ax.set_ylabel("long-time risk")
    ax.set_yscale("log")
    ax.set_xticks(list(heads))
    ax.set_title(title or "risk vs number of heads", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_pruning(path: Path, curves: dict, random: dict, *, null_risk: float | None = None,
                 bayes: float | None = None, tol: float = 0.05, title: str = "") -> None:
    """Risk versus heads pruned: the criterion's curve per activation (solid) and the mean ±
    std of random orders (dashed band); the 5% tolerance above the unpruned risk marked."""
    acts = list(curves)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, act in enumerate(acts):
        c = _color(act, i)
        r = np.asarray(curves[act]["risk"])
        k = np.arange(len(r))
        for ax in axes:
            ax.errorbar(k, r, yerr=curves[act].get("risk_err"), color=c, marker="o",
                        capsize=2, label=f"{label(act)} ({curves[act]['criterion']})")
            if act in random and len(random[act]):
                rr = np.asarray(random[act])
                mu, sd = rr.mean(0), rr.std(0)
                ax.plot(k, mu, color=c, ls="--", lw=1, label=f"{label(act)} random (mean)")
                ax.fill_between(k, mu - sd, mu + sd, color=c, alpha=0.12, lw=0)
        axes[1].plot([0, len(r) - 1], [(1 + tol) * r[0]] * 2, color=c, lw=0.6, ls=":")
    for ax in axes:
        if null_risk is not None:
            ax.axhline(null_risk, color="0.6", lw=0.8, ls=":", label=r"$\hat y\equiv 0$")
        if bayes is not None:
            ax.axhline(bayes, color="k", lw=0.8, ls="--", label=r"$R_{\rm Bayes}$")
        ax.set_xlabel("heads pruned")
        ax.set_xticks(range(len(next(iter(curves.values()))["risk"])))
    axes[0].set_ylabel("risk (no retraining)")
    axes[1].set_yscale("log")
    axes[1].set_title(f"log scale; dotted: {100 * tol:g}% above unpruned", fontsize=9)
    axes[0].legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
