"""Benchmark of the finite-D methods on a single-index model: what one unit of time `t = n/D`
costs as D grows, for the three simulators of the same model.

The model: a matched spherical `He_2` student under the correlation loss (`docs/index-models.md`),
the setting of the k = 2 escape law, whose D → ∞ ODE never leaves `R = 0`.

- **SDE** (`headflow.dynamics.sde.run_sde`): its cost per unit t does not depend on D (D only
  sets the noise amplitude); timed at every D of `--dims`.
- **Overlap chain** (`sim.space = "overlaps"`): exact SGD on the Gram matrix; its cost per step
  does not depend on D, so a unit of t costs D steps; timed at every D of `--dims` over
  `--chain-steps` steps.
- **Weight-space SGD** (`sim.space = "weights"`): `O(D)` per step, so `O(D²)` per unit t; timed
  at `--weight-dim` only.

Every run is compiled first (a call at a tiny t) and then timed, so the figures are costs per
unit of compiled work. It prints one row per method and D: seconds per step, per unit t, and
the ratio to the SDE at the same D. Usage:
`python benchmarks/bench_index_models.py [--dims 1000,1000000] [--weight-dim 10000]
[--paths 64] [--seeds 64] [--chain-steps 20000]`.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("EQX_ON_ERROR", "nan")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

from headflow import sims  # noqa: E402
from headflow.dynamics import load_config  # noqa: E402
from headflow.dynamics.sde import run_sde  # noqa: E402

MODEL = ['model.kind="single_index"', 'model.activation="he2"', 'model.loss="correlation"',
         "model.spherical=true", "training.lr=0.2", "output.n_save=3", "sde.dt=0.05"]


def _timed(fn, cfg, warm_cfg) -> float:
    fn(warm_cfg)                               # compile (the same programs, a shorter run)
    start = time.perf_counter()
    fn(cfg)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dims", default="1000,1000000")
    ap.add_argument("--weight-dim", type=int, default=10_000)
    ap.add_argument("--paths", type=int, default=64)
    ap.add_argument("--seeds", type=int, default=64)
    ap.add_argument("--chain-steps", type=int, default=20_000)
    ap.add_argument("--sde-t", type=float, default=10.0)
    args = ap.parse_args()
    rows = []
    for D in (int(d) for d in args.dims.split(",")):
        sde = load_config(None, [*MODEL, f"sim.dim={D}", f"sde.paths={args.paths}",
                                 f"training.t_max={args.sde_t}"])
        s = _timed(run_sde, sde, sde.replace(**{"training.t_max": 0.5}))
        steps = args.sde_t / sde.sde.dt
        rows.append(("SDE", D, s / steps, s / args.sde_t))
        t_chain = args.chain_steps / D
        chain = load_config(None, [*MODEL, f"sim.dim={D}", f"sim.seeds={args.seeds}",
                                   "sim.space=overlaps", f"training.t_max={t_chain}"])
        s = _timed(sims.run_sgd, chain, chain.replace(**{"training.t_max": t_chain / 10}))
        rows.append(("overlap chain", D, s / args.chain_steps, s / t_chain))
    D = args.weight_dim
    t_w = args.chain_steps / D
    weights = load_config(None, [*MODEL, f"sim.dim={D}", f"sim.seeds={args.seeds}",
                                 "sim.space=weights", f"training.t_max={t_w}"])
    s = _timed(sims.run_sgd, weights, weights.replace(**{"training.t_max": t_w / 10}))
    rows.append(("weight SGD", D, s / args.chain_steps, s / t_w))
    sde_at = {D: per_t for name, D, _, per_t in rows if name == "SDE"}
    print(f"{'method':14s} {'D':>9s} {'s/step':>11s} {'s per unit t':>13s} {'÷ SDE':>9s}  "
          f"({args.paths} SDE paths, {args.seeds} SGD seeds)")
    for name, D, per_step, per_t in rows:
        ref = sde_at.get(D, sde_at[max(sde_at)])
        print(f"{name:14s} {D:9d} {per_step:11.3e} {per_t:13.3e} {per_t / ref:9.3g}")


if __name__ == "__main__":
    main()
