"""Figures of `gpt2 bounds`, laid out like the paper's Figs. 2–4, plus attention entropy,
multi-head coverage and the normalizers side by side."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def plot_bounds(report: dict, curves: dict, folder: str | Path, *, prefix: str = "") -> list[str]:
    """Write the figures of the main normalizer into `folder`, file names starting with
    `prefix`; returns the file names.

    - `fig2_distance.png`: d̃ vs L at fixed N, and vs N at the largest L, with the random-set
      expectation (formula and Monte Carlo) and Theorem 1's bound.
    - `fig3_critical_separability.png`: critical top-N vs L (KS test), and `N_s/N` vs N with
      Theorem 2's bounds.
    - `fig4_gradient.png`: sensitivity vs temperature (exact Jacobian norm, finite differences
      for each ε) with `1/(2T)`, `1/(4T)` and `√2/ε`.
    - `entropy.png`: attention entropy vs log L (Lemma 1).
    - `coverage.png` (when the report has coverage): see [`plot_coverage`][].
    - `normalizers.png` (when it compares normalizers): see [`plot_normalizers`][].
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
    fig.savefig(folder / f"{prefix}fig2_distance.png", dpi=120)
    plt.close(fig)
    names.append(f"{prefix}fig2_distance.png")

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
    fig.savefig(folder / f"{prefix}fig3_critical_separability.png", dpi=120)
    plt.close(fig)
    names.append(f"{prefix}fig3_critical_separability.png")

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
    fig.savefig(folder / f"{prefix}fig4_gradient.png", dpi=120)
    plt.close(fig)
    names.append(f"{prefix}fig4_gradient.png")

    fig, ax = plt.subplots(figsize=(5.2, 4))
    ax.plot(e1["log_L"], e1["entropy_last_row"], "o-", label="row with exactly L keys")
    ax.plot(e1["log_L"], e1["entropy_mean"], "s--", label="mean over rows t < L")
    ax.plot(e1["log_L"], e1["log_L"], "k:", label="log L (uniform)")
    ax.set_xlabel("log L")
    ax.set_ylabel("attention entropy (mean over heads)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(folder / f"{prefix}entropy.png", dpi=120)
    plt.close(fig)
    names.append(f"{prefix}entropy.png")
    if report.get("coverage", {}).get("N"):
        names.append(plot_coverage(report["coverage"], folder, prefix=prefix))
    if "normalizers" in report:
        names.append(plot_normalizers(report["normalizers"], folder, prefix=prefix))
    return names


def plot_coverage(coverage: dict, folder: str | Path, *, prefix: str = "") -> str:
    """`coverage.png`: the fraction of a layer's top-N set that at least one of h heads
    distinguishes, measured (exact mean over h-subsets of the layer's heads), against
    `1 − (1 − p̄)^h` and against independent heads with their own p, for every N; the paper's
    example (`p = 0.8`) for reference. Returns the file name."""
    plt = _plt()
    hs = np.array(coverage["H"])
    fig, ax = plt.subplots(figsize=(6.2, 4.4))
    for i, (n, c) in enumerate(coverage["N"].items()):
        if c is None:
            continue
        color = f"C{i}"
        ax.plot(hs, c["coverage"], "o-", color=color,
                label=f"N = {n}: measured (p̄ = {c['p_mean']:.2f})")
        ax.plot(hs, c["formula"], "--", color=color, label=f"N = {n}: 1 − (1 − p̄)^h")
        ax.plot(hs, c["independent_heads"], ":", color=color, alpha=0.8,
                label=f"N = {n}: independent heads, own p")
    ax.plot(hs, 1 - 0.2 ** hs, "k-", lw=0.8, alpha=0.6, label="paper's example, p = 0.8")
    ax.axhline(coverage["target"], color="grey", lw=0.6)
    ax.set_xlabel("heads h (of one layer)")
    ax.set_ylabel("fraction of the top-N set distinguished")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=7)
    fig.tight_layout()
    name = f"{prefix}coverage.png"
    fig.savefig(Path(folder) / name, dpi=120)
    plt.close(fig)
    return name


def plot_normalizers(reports: dict, folder: str | Path, *, prefix: str = "") -> str:
    """`normalizers.png`: the five experiments with one line per normalizer (d̃ vs L, d̃ over
    the random set vs N, critical N vs L, N_s/N vs N, ‖J‖₂ vs T) and `L · max α` vs L (vanishing
    attention). Returns the file name."""
    plt = _plt()
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.4))
    ax = axes.ravel()
    for i, (name, r) in enumerate(reports.items()):
        color = f"C{i}"
        e1, e2, e3, e4, e5 = (r[k] for k in ("distance_vs_L", "distance_vs_N", "critical_topn",
                                              "separability", "gradient"))
        ax[0].plot(e1["L"], e1["distance"], "o-", color=color, label=name)
        ax[1].plot(e2["N"], e2["distance_over_random_mc"], "o-", color=color, label=name)
        crit = np.array([np.nan if n is None else n for n in e3["critical_N"]], float)
        ax[2].plot(e3["L"], crit, "o-", color=color, label=name)
        ax[3].plot(e4["N"], e4["ratio"], "o-", color=color, label=name)
        ax[4].plot(e5["T"], e5["jacobian_norm"], "o-", color=color, label=name)
        ax[5].plot(e1["L"], r["vanishing"]["max_weight_last_row_times_L"], "o-", color=color,
                   label=name)
    L = np.array(next(iter(reports.values()))["distance_vs_L"]["L"], float)
    ax[2].plot(L, 0.06 * L, "k:", label="0.06 L (paper)")
    ax[3].axhspan(0.70, 0.85, color="grey", alpha=0.12, label="paper's plateau")
    T = np.array(next(iter(reports.values()))["gradient"]["T"])
    ax[4].plot(T, 1 / (2 * T), "k-", lw=0.8, label="1/(2T) (softmax)")
    titles = [("context length L", "top-N d̃ (N fixed)", "distance vs L"),
              ("selected tokens N", "d̃ / random set (Monte Carlo)", "distance vs N, largest L"),
              ("context length L", "critical top-N", "critical top-N (KS)"),
              ("selected tokens N", "N_s / N", "separability, largest L"),
              ("temperature T (on raw q·k)", "‖J‖₂ (token mean, max over heads)", "gradient"),
              ("context length L", "L · max_j α_j (row with L keys)", "vanishing attention")]
    for a, (xl, yl, title) in zip(ax, titles):
        a.set_xlabel(xl)
        a.set_ylabel(yl)
        a.set_title(title)
        a.legend(fontsize=7)
    for a in (ax[0], ax[2], ax[5]):
        a.set_xscale("log", base=2)
        a.set_yscale("log")
    ax[1].set_xscale("log")
    ax[4].set_xscale("log")
    ax[4].set_yscale("log")
    ax[3].set_ylim(-0.02, 1.05)
    fig.tight_layout()
    name = f"{prefix}normalizers.png"
    fig.savefig(Path(folder) / name, dpi=110)
    plt.close(fig)
    return name
