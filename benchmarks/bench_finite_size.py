"""Finite-size scaling of the ODE–SGD deviation (`docs/overlap-sgd.md#finite-size-studies`):
`headflow compare` on `validation/configs/escape.toml` with SGD in overlap space
(`sim.space = "overlaps"`) at D = 10³ … 10⁶, and the fitted slope of the deviation in log D.

    .venv/bin/python benchmarks/bench_finite_size.py [--dims 1000,10000,100000,1000000]
        [--seeds 16] [--t-window 2.0] [--ode-samples N]

The deviation is measured over the plateau, where the ODE is the D → ∞ limit that single runs
track: `t ≤ --t-window` (before the first escape at every D of this config; the escape time
grows with ln D, so a fixed window is the same stretch of the dynamics at every D). It is the
sup over that window of `|R_ODE(t) − mean_seeds R_SGD(t)| / mean_seeds R_SGD(t)`, and the same for
`m`. Both the finite-D drift corrections and the seed-mean's statistical error are
O(D^{-1/2}), so the slope in log-log should be about −1/2. The seed-mean's standard error is
printed beside it, so the deviation can be compared with the noise floor at each D.
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dims", default="1000,10000,100000,1000000")
    ap.add_argument("--seeds", type=int, default=16)
    ap.add_argument("--t-window", type=float, default=2.0, dest="t_window")
    ap.add_argument("--ode-samples", type=int, default=None, dest="ode_samples",
                    help="ODE nodes (default: the config's, 2048 QMC nodes)")
    args = ap.parse_args()

    import jax

    jax.config.update("jax_enable_x64", True)
    from dynamics import Config
    from validation.experiments.compare import canonicalize, canonicalize_seeds, compare

    text = resources.files("validation").joinpath("configs/escape.toml").read_text()
    cfg = Config.from_dict(tomllib.loads(text)).replace(
        **{"sim.seeds": args.seeds, "sim.space": "overlaps", "training.t_max": args.t_window,
           "output.n_save": 41})
    if args.ode_samples is not None:
        cfg = cfg.replace(**{"ode.samples": args.ode_samples})
    dims = [int(float(d)) for d in args.dims.split(",")]
    rows = []
    for D in dims:
        t0 = time.perf_counter()
        sgd, ode, _ = compare(cfg.replace(**{"sim.dim": D}))
        wall = time.perf_counter() - t0
        s, o = canonicalize_seeds(sgd.arrays()), canonicalize(ode.arrays())
        rs = s["risk"].mean(axis=0)
        rel = np.abs(o["risk"] - rs) / rs
        sem = s["risk"].std(axis=0, ddof=1) / np.sqrt(args.seeds) / rs
        m_dev = np.abs(o["m"] - s["m"].mean(axis=0)).max()
        k = int(np.argmax(rel))
        rows.append((D, rel.max(), sem[k], m_dev, wall))
        print(f"D={D:>8d}: sup_t rel. risk deviation {rel.max():.3e} (seed-mean s.e. there "
              f"{sem[k]:.1e}), sup |Δm| {m_dev:.3e}; {wall:.1f} s", flush=True)
    x = np.log(np.array([r[0] for r in rows], dtype=np.float64))
    for j, name in ((1, "risk deviation"), (3, "m deviation")):
        y = np.log(np.array([r[j] for r in rows]))
        slope, icpt = np.polyfit(x, y, 1)
        resid = y - (slope * x + icpt)
        se = np.sqrt(resid @ resid / max(len(x) - 2, 1) / np.sum((x - x.mean()) ** 2))
        print(f"log-log slope of the {name} in D: {slope:.3f} ± {se:.3f} (expected −0.5)")


if __name__ == "__main__":
    main()
