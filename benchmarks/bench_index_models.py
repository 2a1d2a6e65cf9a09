"""Benchmark of the finite-D methods on a single-index model: what one unit of time `t = n/D`
costs as D grows, for the three simulators of the same model.

The model: a matched spherical `He_2` student under the correlation loss (`docs/index-models.md`),
the setting of the k = 2 escape law, whose D → ∞ ODE never leaves `R = 0`.

- **SDE** (`headflow.dynamics.sde.run_sde`): its cost per unit t does not depend on D (D only
  sets the noise amplitude, and the start is drawn from the Wishart law, not from the
  weights); timed at every D of `--dims`, with the diffusion factored by `eigh` (one Brownian
  coordinate per order parameter; `--noise nodes` for one per node of the rule).
- **Overlap chain** (`sim.space = "overlaps"`): exact SGD on the Gram matrix; its cost per step
  does not depend on D, so a unit of t costs D steps; timed at every D of `--dims` as the
  difference between runs of `2n` and `n` steps (`n = --chain-steps`), which leaves out the
  start (the Gram matrix of D-dimensional weights, drawn once per seed).
- **Weight-space SGD** (`sim.space = "weights"`): `O(D)` per step, so `O(D²)` per unit t; timed
  at `--weight-dim` only, as the chain is.

Every run is made twice with the same settings and the second is timed, so the figures are
costs of compiled work; the first call of each, compilation included, is printed too. It prints
one row per method and D: seconds per step, per unit t, and the ratio to the SDE at the same D.
Usage: `python benchmarks/bench_index_models.py [--dims 1000,1000000] [--weight-dim 10000]
[--paths 64] [--seeds 64] [--chain-steps 20000] [--noise eigh|nodes]`.
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


def _timed(fn, cfg) -> tuple[float, float]:
    """`(first call, second call)` in seconds: compilation and run, then the run alone."""
    out = []
    for _ in range(2):
        start = time.perf_counter()
        fn(cfg)
        out.append(time.perf_counter() - start)
    return out[0], out[1]


def _sgd_steps(space: str, D: int, args) -> tuple[float, float, float]:
    """`(first call, s/step, s per unit t)` of SGD in `space` at D: the cost of a step is the
    difference between runs of `2n` and `n` steps (`n = --chain-steps`), so that the start,
    drawn from D-dimensional weights once per seed, is not counted in it."""
    n = args.chain_steps

    def cfg(steps):
        return load_config(None, [*MODEL, f"sim.dim={D}", f"sim.seeds={args.seeds}",
                                  f"sim.space={space}", f"training.t_max={steps / D}"])

    first, short = _timed(sims.run_sgd, cfg(n))
    start = time.perf_counter()
    sims.run_sgd(cfg(2 * n))
    per_step = (time.perf_counter() - start - short) / n
    return first, per_step, per_step * D


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dims", default="1000,1000000")
    ap.add_argument("--weight-dim", type=int, default=10_000)
    ap.add_argument("--paths", type=int, default=64)
    ap.add_argument("--seeds", type=int, default=64)
    ap.add_argument("--chain-steps", type=int, default=20_000)
    ap.add_argument("--sde-t", type=float, default=10.0)
    ap.add_argument("--noise", choices=("eigh", "nodes"), default="eigh")
    args = ap.parse_args()
    rows = []
    for D in (int(d) for d in args.dims.split(",")):
        sde = load_config(None, [*MODEL, f"sim.dim={D}", f"sde.paths={args.paths}",
                                 f"training.t_max={args.sde_t}", f'sde.noise="{args.noise}"'])
        first, s = _timed(run_sde, sde)
        steps = args.sde_t / sde.sde.dt
        rows.append(("SDE", D, first, s / steps, s / args.sde_t))
        rows.append(("overlap chain", D, *_sgd_steps("overlaps", D, args)))
    rows.append(("weight SGD", args.weight_dim, *_sgd_steps("weights", args.weight_dim, args)))
    sde_at = {D: per_t for name, D, _, _, per_t in rows if name == "SDE"}
    print(f"{'method':14s} {'D':>9s} {'compile+run s':>14s} {'s/step':>11s} "
          f"{'s per unit t':>13s} {'÷ SDE':>9s}  ({args.paths} SDE paths with {args.noise} "
          f"noise, {args.seeds} SGD seeds)")
    for name, D, first, per_step, per_t in rows:
        ref = sde_at.get(D, sde_at[max(sde_at)])
        print(f"{name:14s} {D:9d} {first:14.2f} {per_step:11.3e} {per_t:13.3e} "
              f"{per_t / ref:9.3g}")


if __name__ == "__main__":
    main()
