"""Finite-size scaling of the ODE–SGD deviation (`docs/overlap-sgd.md#finite-size-studies`):
`headflow compare` on `validation/configs/escape.toml` with SGD in overlap space
(`sim.space = "overlaps"`) at D = 10³ … 10⁶, each deviation beside its sampling noise and the
ODE's node error, and the fitted slope of the resolved deviations in log D.

    .venv/bin/python benchmarks/bench_finite_size.py [--dims 1000,10000,100000,1000000]
        [--seeds 16] [--t-window 2.0] [--ode-samples N] [--node-check 4] [--resamples 999]

The deviation is measured over the plateau, where the ODE is the D → ∞ limit that single runs
track: `t ≤ --t-window` (before the first escape at every D of this config; the escape time
grows with ln D, so a fixed window is the same stretch of the dynamics at every D). For the
risk it is the sup over that window of `|R_ODE(t) − mean_seeds R_SGD(t)| / mean_seeds R_SGD(t)`,
for `m` the sup over the window and the features of `|m̄_ODE − mean_seeds m̄_SGD|`, `m̄` the
head mean of `m`. On the plateau the heads are exchangeable, so any per-head comparison needs
an order of the heads, and ordering each seed's heads by their own alignment (`compare`'s
canonical order) selects the larger of noisy values: a bias of the size of one seed's
fluctuation, O(D^{-1/2}), that no number of seeds removes. The head mean needs no order; the
canonical per-head figure is printed beside it for comparison. Three things are printed beside
each deviation:

- **the risk on both sides with one rule.** SGD records its risk with `[sim] risk_samples`
  Monte Carlo nodes (common random numbers); the ODE's own risk uses its expectation nodes. The
  two estimators differ at the same state by their node errors, a bias that no number of seeds
  removes. The deviation "one rule" evaluates the ODE's trajectory with SGD's rule, so that the
  estimators cancel and only the dynamics differ; "own rules" is the deviation as `compare`
  reports it;
- **the seed noise**: the 95% bootstrap quantile (seeds resampled with replacement) of the same
  sup taken between the resampled and the actual seed mean: the size the statistic has when
  the ODE is exact. The sup of a noisy curve is biased upward by this much;
- **the node change**: the same sup between the ODE on `--ode-samples` nodes and on
  `--node-check` times as many (both with SGD's risk rule): the ODE's own numerical error.

A deviation is *resolved* when it exceeds the seed noise plus the node change; an unresolved one
is at the noise floor of the measurement, not a floor of the physics. A single run deviates from
the ODE by O(D^{-1/2}), but the fluctuations enter the seed mean's drift only at second order
(and the steps' discreteness at O(1/D)), so the mean's deviation from the ODE is expected to
fall like 1/D, while its noise falls like D^{-1/2}/√seeds. The slope in log-log is fitted on the
resolved points only.
"""

from __future__ import annotations

import argparse
import sys
import time
import tomllib
from importlib import resources
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _sup_rel(theory: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """sup over the last axis of |theory − mean| / mean (leading axes: resamples)."""
    return np.max(np.abs(theory - mean) / mean, axis=-1)


def _sup_abs(theory: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """sup over every axis but the first of |theory − mean|."""
    d = np.abs(theory - mean)
    return d.reshape(d.shape[0], -1).max(axis=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dims", default="1000,10000,100000,1000000")
    ap.add_argument("--seeds", type=int, default=16)
    ap.add_argument("--t-window", type=float, default=2.0, dest="t_window")
    ap.add_argument("--ode-samples", type=int, default=None, dest="ode_samples",
                    help="ODE nodes (default: the config's, 2048 QMC nodes)")
    ap.add_argument("--node-check", type=int, default=4, dest="node_check",
                    help="rerun the ODE on this many times the nodes (0: no check)")
    ap.add_argument("--resamples", type=int, default=999)
    args = ap.parse_args()

    import jax

    jax.config.update("jax_enable_x64", True)
    from headflow.dynamics import Config
    from headflow.validation.experiments.compare import (canonicalize, canonicalize_seeds, compare,
                                                         ode_from_seed_mean, unit_mean)
    from headflow.validation.experiments.scaling import loglog_fit

    text = resources.files("headflow.validation").joinpath("configs/escape.toml").read_text()
    cfg = Config.from_dict(tomllib.loads(text)).replace(
        **{"sim.seeds": args.seeds, "sim.space": "overlaps", "training.t_max": args.t_window,
           "output.n_save": 41})
    if args.ode_samples is not None:
        cfg = cfg.replace(**{"ode.samples": args.ode_samples})
    nodes = cfg.ode.samples
    print(f"escape.toml, overlap-space SGD, {args.seeds} seeds, t ≤ {args.t_window}; ODE on "
          f"{nodes} nodes" + (f", checked on {args.node_check * nodes}" if args.node_check
                              else "") + f"; SGD's risk rule: {cfg.sim.risk_samples} nodes",
          flush=True)
    model = cfg.build_model()
    rng = np.random.default_rng(0)
    rows = []
    for D in [int(float(d)) for d in args.dims.split(",")]:
        t0 = time.perf_counter()
        sgd, ode, report = compare(cfg.replace(**{"sim.dim": D}))
        s, o = canonicalize_seeds(sgd.arrays()), canonicalize(ode.arrays())
        r_one = np.asarray(model.state_risk(cfg, ode.overlaps)[0])      # SGD's rule
        rs, ms = s["risk"], unit_mean(s["m"], 2)                     # m̄: (S, T, F)
        m_ode = unit_mean(o["m"], 1)
        mean_r, mean_m = rs.mean(axis=0), ms.mean(axis=0)
        dev_own, m_canonical = report["risk_sup_rel"], report["m_sup_abs"]   # as compare has it
        dev = float(_sup_rel(r_one, mean_r))
        m_dev = float(_sup_abs(m_ode[None], mean_m[None])[0])
        idx = rng.integers(0, args.seeds, (args.resamples, args.seeds))
        noise = float(np.quantile(_sup_rel(rs[idx].mean(axis=1), mean_r), 0.95))
        m_noise = float(np.quantile(_sup_abs(ms[idx].mean(axis=1), mean_m[None]), 0.95))
        node = m_node = 0.0
        if args.node_check:
            fine = ode_from_seed_mean(cfg.replace(**{"sim.dim": D, "ode.samples":
                                                      args.node_check * nodes}), sgd)
            r_fine = np.asarray(model.state_risk(cfg, fine.overlaps)[0])
            node = float(_sup_rel(r_fine, r_one))
            m_node = float(_sup_abs(unit_mean(fine.arrays()["m"], 1)[None], m_ode[None])[0])
        wall = time.perf_counter() - t0
        resolved = dev > noise + node
        m_resolved = m_dev > m_noise + m_node
        rows.append((D, dev, resolved, m_dev, m_resolved, m_canonical))
        print(f"D={D:>8d}: sup_t rel. risk deviation {dev:.2e} one rule ({dev_own:.2e} own "
              f"rules), seed noise {noise:.1e}, node change {node:.1e}: "
              f"{'resolved' if resolved else 'not resolved'}; sup |Δm̄| {m_dev:.2e}, seed noise "
              f"{m_noise:.1e}, node change {m_node:.1e}: "
              f"{'resolved' if m_resolved else 'not resolved'} (per head in canonical order: "
              f"{m_canonical:.2e}); {wall:.1f} s", flush=True)
    for j, name in ((1, "risk deviation"), (3, "m̄ deviation")):
        kept = [(r[0], r[j]) for r in rows if r[j + 1]]
        if len(kept) < 2:
            print(f"log-log slope of the {name} in D: fewer than two resolved points")
            continue
        fit = loglog_fit([k[0] for k in kept], [k[1] for k in kept])
        slope, se = fit["slope"], fit["stderr"]
        print(f"log-log slope of the {name} in D over the resolved D = "
              f"{', '.join(str(k[0]) for k in kept)}: {slope:.3f} ± {se:.3f} (expected −1)")
    if len(rows) >= 2:
        fit = loglog_fit([r[0] for r in rows], [r[5] for r in rows])
        slope, se = fit["slope"], fit["stderr"]
        print(f"log-log slope of the per-head m deviation in canonical order, all D: "
              f"{slope:.3f} ± {se:.3f} (the ordering's bias: −1/2)")


if __name__ == "__main__":
    main()
