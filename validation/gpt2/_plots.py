"""Figures of `gpt2 bounds`, laid out like the paper's Figs. 2–4 (plus attention entropy)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def plot_bounds(report: dict, curves: dict, folder: str | Path) -> list[str]:
    """Write the figures into `folder`; returns their file names.

    - `fig2_distance.png`: d̃ vs L at fixed N, and vs N at the largest L, with the random-set
      expectation (formula and Monte Carlo) and Theorem 1's bound.
    - `fig3_critical_separability.png`: critical top-N vs L (KS test), and `N_s/N` vs N with
      Theorem 2's bounds.
    - `fig4_gradient.png`: sensitivity vs temperature (exact Jacobian norm, finite differences
      for each ε) with `1/(2T)`, `1/(4T)` and `√2/ε`.
    - `entropy.png`: attention entropy vs log L (Lemma 1).
    """
    plt = _plt()
    folder = Path(folder)
    names = []

    e1, e2 = report["distance_vs_L"], report["distance_vs_N"]
    fig, ax = plt.subplots(1, 2, figsize=(11, 4.2))
    L = np.array(e1["L"])
    ax[0].plot(L, e1["distance"], "o-", label="top-N  d̃")
    ax[0].fill_between(L, e1["distance_q25"], e1["distance_q75"], alpha=0.2)
    ax[0].plot(L, e1["random_mc"], "s--", label="random set (Monte Carlo)")
    ax[0].plot(L, e1["random_formula"], ":", label="random set (formula)")
    if np.all(np.isfinite(e1["bound"])):
        ax[0].plot(L, e1["bound"], "^-", label="Theorem 1 bound")
    ax[0].set_xscale("log", base=2)
    ax[0].set_yscale("log")
    ax[0].set_xlabel("context length L")
    ax[0].set_ylabel("distance (mean over heads and rows)")
    ax[0].set_title(f"distance vs L, N = {e1['N']}")
    ax[0].legend(fontsize=8)
    N = np.array(e2["N"])
    ax[1].plot(N, e2["distance"], "o-", label="top-N  d̃")
    ax[1].plot(N, e2["random_mc"], "s--", label="random set (Monte Carlo)")
    ax[1].plot(N, e2["random_formula"], ":", label="random set (formula)")
    if np.all(np.isfinite(e2["bound"])):
        ax[1].plot(N, e2["bound"], "^-", label="Theorem 1 bound")
    ax[1].set_xscale("log")
    ax[1].set_yscale("log")
    ax[1].set_xlabel("selected tokens N")
    ax[1].set_title(f"distance vs N, L = {e2['L']}")
    ax[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(folder / "fig2_distance.png", dpi=120)
    plt.close(fig)
    names.append("fig2_distance.png")

    e3, e4 = report["critical_topn"], report["separability"]
    fig, ax = plt.subplots(1, 2, figsize=(11, 4.2))
    Ls = np.array(e3["L"], float)
    crit = np.array([np.nan if n is None else n for n in e3["critical_N"]], float)
    ax[0].plot(Ls, crit, "o-", label=f"critical N (KS vs Monte Carlo, α = {e3['alpha']})")
    crit_s = np.array([np.nan if n is None else n for n in e3["critical_N_stable"]], float)
    ax[0].plot(Ls, crit_s, "d-", alpha=0.7, label="from which on KS never rejects")
    crit_f = np.array([np.nan if n is None else n for n in e3["critical_N_formula"]], float)
    ax[0].plot(Ls, crit_f, "s--", label="critical N (KS vs Jensen formula)")
    ax[0].plot(Ls, 0.06 * Ls, "k:", label="0.06 L (paper)")
    if e3.get("slope_through_origin"):
        ax[0].plot(Ls, e3["slope_through_origin"] * Ls, "--", alpha=0.6,
                   label=f"fit {e3['slope_through_origin']:.3f} L")
    ax[0].set_xscale("log", base=2)
    ax[0].set_yscale("log")
    ax[0].set_xlabel("context length L")
    ax[0].set_ylabel("critical top-N")
    ax[0].legend(fontsize=8)
    Ns = np.array(e4["N"])
    ax[1].plot(Ns, e4["ratio"], "o-", label="N_s / N")
    ax[1].fill_between(Ns, e4["ratio_q25"], e4["ratio_q75"], alpha=0.2, label="heads 25–75 %")
    ax[1].plot(Ns, e4["lower"], "^--", label="lower bound (rigorous)")
    ax[1].plot(Ns, e4["upper"], "v:", label="upper (Hoeffding, heuristic)")
    ax[1].axhspan(0.70, 0.85, color="grey", alpha=0.12, label="paper's plateau 0.70–0.85")
    ax[1].set_ylim(-0.02, 1.05)
    ax[1].set_xlabel("selected tokens N")
    ax[1].set_title(f"separability, L = {e4['L']}")
    ax[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(folder / "fig3_critical_separability.png", dpi=120)
    plt.close(fig)
    names.append("fig3_critical_separability.png")

    e5 = report["gradient"]
    T = np.array(e5["T"])
    fig, ax = plt.subplots(figsize=(6.2, 4.4))
    ax.plot(T, e5["jacobian_norm"], "o-", label="‖J‖₂ (exact)")
    ax.plot(T, e5["jacobian_diag"], "x-", alpha=0.7, label="max diagonal of J")
    for key in e5:
        if key.startswith("fd_eps_"):
            ax.plot(T, e5[key], "--", label=f"finite difference ε = {key[7:]}")
    ax.plot(T, e5["bound_spectral_1_over_2T"], "k-", lw=0.8, label="1/(2T)")
    ax.plot(T, e5["bound_diag_1_over_4T"], "k:", lw=0.8, label="1/(4T)")
    ax.axvline(e5["model_temperature"], color="grey", lw=0.6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("temperature T (on raw q·k)")
    ax.set_ylabel("sensitivity (token mean, max over heads)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(folder / "fig4_gradient.png", dpi=120)
    plt.close(fig)
    names.append("fig4_gradient.png")

    fig, ax = plt.subplots(figsize=(5.2, 4))
    ax.plot(e1["log_L"], e1["entropy_last_row"], "o-", label="row with exactly L keys")
    ax.plot(e1["log_L"], e1["entropy_mean"], "s--", label="mean over rows t < L")
    ax.plot(e1["log_L"], e1["log_L"], "k:", label="log L (uniform)")
    ax.set_xlabel("log L")
    ax.set_ylabel("attention entropy (mean over heads)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(folder / "entropy.png", dpi=120)
    plt.close(fig)
    names.append("entropy.png")
    return names
