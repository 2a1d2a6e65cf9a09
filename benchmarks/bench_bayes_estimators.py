"""The two estimators of `R_Bayes` side by side, with errors from independent scramblings.

    python benchmarks/bench_bayes_estimators.py [--samples 131072] [--replicates 4]
        [--amplitudes 1,2,3,4] [--configs activations_spike,activations_onehot]

For each config (a discrete prior) and amplitude: the Bayes integral
(`headflow.dynamics.bayes_risk`) and the population risk of the Bayes-softmax construction
(`headflow.dynamics.bayes_construction`, one head per support point, whose risk is `R_Bayes`
exactly), each on `--replicates` scrambled-Sobol node sets (seeds 0, 1, …). The error of each is
the standard deviation of its replicates over √replicates; `z` is their difference over the
combined error, to be read against Student's t with `replicates − 1` degrees of freedom (`t_crit`
printed).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import numpy as np
from scipy import stats

CONFIGS = Path(__file__).resolve().parents[1] / "validation" / "configs"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=1 << 17)
    ap.add_argument("--replicates", type=int, default=4)
    ap.add_argument("--amplitudes", default="1,2,3,4")
    ap.add_argument("--configs", default="activations_spike,activations_onehot")
    args = ap.parse_args()
    jax.config.update("jax_enable_x64", True)
    import headflow.dynamics as d
    from headflow.dynamics.expectations import get_expectation

    n = args.replicates
    print(f"{args.samples} QMC nodes, {n} scramblings; |z| < "
          f"{stats.t.ppf(0.975, n - 1):.2f} is agreement at 95% (t_crit, {n - 1} dof)")
    print("config               a   Bayes integral          construction            relative   z")
    for name in args.configs.split(","):
        for a in (float(x) for x in args.amplitudes.split(",")):
            cfg = d.load_config(CONFIGS / f"{name}.toml",
                                ["model.activation=bayes_softmax", f"prior.amplitude={a}"])
            model = cfg.build_model()
            ov, _ = d.bayes_construction(model)
            integral, construction = [], []
            for seed in range(n):
                nodes = get_expectation("qmc", args.samples, seed=seed)
                integral.append(float(d.bayes_risk(model, nodes)[0]))
                construction.append(float(d.population_risk(model, ov, nodes, manifold=True)[0]))
            b, c = np.asarray(integral), np.asarray(construction)
            eb, ec = b.std(ddof=1) / np.sqrt(n), c.std(ddof=1) / np.sqrt(n)
            z = (c.mean() - b.mean()) / np.hypot(eb, ec)
            print(f"{name:20s} {a:<3g} {b.mean():.6f} ± {eb:.1e}    {c.mean():.6f} ± {ec:.1e}"
                  f"    {100 * (c.mean() - b.mean()) / b.mean():+.3f}%  {z:+.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
