"""What one point of an attention sweep costs, against one `headflow ode` run of the same
point. Every ratio is between times measured in this one run.

    python benchmarks/bench_sweep.py [--config validation/configs/demo.toml] [--t-max 20]
        [--points 4,16,64] [--lr 0.6,1.2]

For each grid size n of `--points`: `headflow sweep CONFIG --grid training.lr=...` (n learning
rates evenly spaced in `--lr`), end to end in a fresh process, with an empty cache folder
("cold") and again with the cache it left ("warm": the compiled programs come from the cache,
the results do not, since the config file differs by a comment). Against it: one
`headflow ode` run of the config end to end, cold and warm the same way. It prints

- the sweep per point, end to end and its vectorized solve (`meta.json`'s `wall_s.sweep`,
  and the same less JAX's tracing, lowering, compiling and cache loading), against one run end
  to end and its arithmetic (`wall_s["ode.integrate"]` and `wall_s["ode.risk"]`): a sweep pays
  when a point costs less than a run;
- the lockstep: the points of a vectorized solve advance together, so each pays for the
  steps of the one that needs most (largest over mean steps);
- the flop limit of a point: the right-hand-side evaluations its steps made (6 a tsit5 step)
  times the flops of one evaluation (XLA's count) over the machine's float64 peak (a dense
  matrix product timed in this run), and the same with each transcendental function at the
  measured cost of an `exp`, against the solve per point less JAX's front end.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import numpy as np

from _cost import (ROOT, cold_and_warm, elementwise_s, flop_limits, machine_line, peak_flops,
                   rhs_cost)


def _values(text: str) -> list[float]:
    return [float(v) for v in text.split(",")]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=str(ROOT / "validation" / "configs" / "demo.toml"))
    p.add_argument("--t-max", type=float, default=20.0)
    p.add_argument("--points", type=lambda v: [int(x) for x in v.split(",")],
                   default=[4, 16, 64], help="grid sizes (default 4,16,64)")
    p.add_argument("--lr", type=_values, default=[0.6, 1.2],
                   help="the range of training.lr the points span (default 0.6,1.2)")
    args = p.parse_args()

    import jax

    jax.config.update("jax_enable_x64", True)
    import headflow.dynamics as d
    from headflow.dynamics.ode import build

    work = Path(tempfile.mkdtemp(prefix="bench_sweep_"))
    text = Path(args.config).read_text()
    sets = ["--set", f"training.t_max={args.t_max}"]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}

    cfg = d.load_config(args.config, [f"training.t_max={args.t_max}"])
    flops, trans = rhs_cost(build(cfg), batch=8)
    peak, exp_s = peak_flops(), elementwise_s("exp")
    print(f"config: {Path(args.config).name}, t = {args.t_max}, {cfg.ode.samples} nodes "
          f"({cfg.ode.expectation}), rtol {cfg.ode.rtol}; "
          + machine_line(flops, trans, peak, "exp", exp_s), flush=True)

    one = cold_and_warm("ode", text, work, "ode", sets,
                        {**env, "HEADFLOW_CACHE_DIR": str(work / "cache_ode")})
    meta = json.loads((work / "ode_warm" / "meta.json").read_text())["wall_s"]
    # the run's arithmetic: the compiled solve, and the risk along its saved states (which the
    # sweep's vectorized program computes too)
    arithmetic = meta["ode.integrate"] + meta["ode.risk"]
    print(f"one headflow ode: end to end {one['cold']:.2f} s cold, {one['warm']:.2f} s warm; "
          f"its integration {meta['ode.integrate']:.3f} s and risk {meta['ode.risk']:.3f} s",
          flush=True)

    for n in args.points:
        lrs = np.round(np.linspace(*args.lr, n), 5).tolist()
        grid = ["--grid", "training.lr=" + ",".join(map(str, lrs))]
        wall = cold_and_warm("sweep", text, work, f"sweep_{n}", [*sets, *grid],
                             {**env, "HEADFLOW_CACHE_DIR": str(work / f"cache_{n}")})
        warm = work / f"sweep_{n}_warm"
        phases = json.loads((warm / "meta.json").read_text())["wall_s"]
        # the solve less JAX's front end: tracing, lowering and compiling (`compile` includes
        # reading a program back from the cache, `cache_load`)
        point = (phases["sweep"] - sum(phases[k] for k in ("trace", "lower", "compile"))) / n
        with np.load(warm / "sweep.npz") as data:
            steps, status = data["steps"], data["status"]
        limit, limit_t = flop_limits(steps, flops, trans, peak, exp_s)   # the second: at an exp
        print(f"{n} points: sweep end to end {wall['cold']:.1f} s cold, {wall['warm']:.1f} s warm"
              f" ({wall['warm'] / n:.3f} s a point); its solve {phases['sweep']:.2f} s "
              f"({phases['sweep'] / n:.3f} s a point; less JAX's front end {point:.3f} s); one run"
              f" / a point: end to end {one['warm'] / (wall['warm'] / n):.1f} warm, arithmetic "
              f"(integration and risk) {arithmetic / point:.2f}", flush=True)
        print(f"    steps a point: mean {steps.mean():.0f}, largest {steps.max()} (lockstep "
              f"{steps.max() / steps.mean():.2f}× the mean); {int((status != 0).sum())} points "
              f"not ok; flop limit {1e3 * limit:.2f} ms a point ({1e3 * limit_t:.2f} ms with "
              f"each transcendental at an exp's cost); the solve less JAX's front end a point / "
              f"limit {point / limit:.1f} ({point / limit_t:.1f})",
              flush=True)


if __name__ == "__main__":
    main()
