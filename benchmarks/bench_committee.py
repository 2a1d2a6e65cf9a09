"""Benchmark of the committee machine's ODE. Prints three ratios measured in one run, and the
floor of the first two:

(a) `headflow sweep` of square grids of (η, σ) points (`--sides 8,16,32`: 64, 256 and 1024
    points; K = 4, M = 2, erf, to t = 1000), end to end in a fresh process, against the same
    points integrated one after the other by a lean closed-form numpy +
    `scipy.integrate.solve_ivp` code (`_scipy_committee.py`, no headflow code), also end to end
    in a fresh process, at the same tolerances (rtol 1e-6, atol 1e-8) (target: sweep ≥ 20×
    faster). Beside each it prints the sweep's cost a point against its flop limit: the
    right-hand-side evaluations its points made (6 a tsit5 step, from the steps the sweep
    records), times the flops of one evaluation (XLA's count), over the machine's float64 peak
    (a dense matrix product timed in the same run) (target: within 5×). The final ε_g of both,
    and of a DOP853 run at rtol 1e-11 on every `--check-every`-th point of the last grid, are
    compared;
(b) one `headflow ode` run end to end (fresh process, start-up included) against one SciPy run
    end to end (fresh process) (target: within 3×); the warm run computes (the results cache
    does not replay it), only its compiled programs come from the cache;
(c) the ODE run against the weight-space SGD it predicts at D = 10⁴, one seed; the SGD is timed
    (compiled) over `--sgd-t` and its cost scaled linearly in the number of steps to t = 1000
    (the cost of an SGD step does not depend on t) (target: ≥ 100× cheaper).

Beside (a) and (b) it prints the floor of both: a fresh process that imports JAX and diffrax
and runs one jitted diffrax solve of a one-line ODE with its compiled program cached
(`_jax_floor.py`, no headflow code). No JAX program can take less, so that floor over one
SciPy run is the best ratio (b) can reach, and the SciPy loop over the floor the best (a) can.

Each `headflow` command runs twice: with an empty compilation cache ("cold") and again with the
cache it left ("warm"). Usage: `python benchmarks/bench_committee.py [--sides 8,16,32]
[--sgd-t 20] [--skip-sgd] [--check-every 8]`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _cost import (HERE, ROOT, cold_and_warm, elementwise_s, flop_limits, headflow,
                   machine_line, peak_flops, rhs_cost, run)

CONFIG = """[model]
kind = "committee"
K = 4
M = 2
activation = "erf"
noise = 0.1
[training]
lr = 0.5
t_max = 1000.0
[sim]
dim = 1000
[ode]
rtol = 1e-6
atol = 1e-8
[output]
n_save = 101
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sides", type=lambda v: [int(x) for x in v.split(",")],
                   default=[8, 16, 32],
                   help="grid sides of (a): side × side points each (default 8,16,32: 64, 256 "
                   "and 1024 points)")
    p.add_argument("--sgd-t", type=float, default=20.0)
    p.add_argument("--sgd-dim", type=int, default=10000)
    p.add_argument("--skip-sgd", action="store_true")
    p.add_argument("--check-every", type=int, default=8,
                   help="compare every n-th point with a tight DOP853 run (default 8)")
    args = p.parse_args()

    import jax

    jax.config.update("jax_enable_x64", True)
    import headflow.dynamics as d
    from headflow.dynamics.ode import build

    sys.path.insert(0, str(HERE))
    import _scipy_committee as sc

    work = Path(tempfile.mkdtemp(prefix="bench_committee_"))
    cfg_path = work / "k4.toml"
    cfg_path.write_text(CONFIG)
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "HEADFLOW_CACHE_DIR": str(work / "cache")}
    # the start every run shares ([ode] init = "random" at sim.dim, seed 0)
    cfg = d.load_config(str(cfg_path), [])
    prob = build(cfg)
    named = {k: np.asarray(v) for k, v in prob.model.named(prob.start).items()}
    start = work / "start.npz"
    np.savez(start, **named)

    # (a) the sweep against the SciPy loop, at every grid size
    rhs_flops, rhs_trans = rhs_cost(prob)
    peak, trans_s = peak_flops(), elementwise_s("arcsin")
    print("config: K = 4, M = 2, erf, t = 1000, rtol 1e-6, atol 1e-8; "
          + machine_line(rhs_flops, rhs_trans, peak, "arcsin", trans_s), flush=True)
    for side in args.sides:
        lrs = np.round(np.linspace(0.2, 1.6, side), 4).tolist()
        noises = np.round(np.linspace(0.0, 0.5, side), 4).tolist()
        n = side * side
        grid = ["--grid", "training.lr=" + ",".join(map(str, lrs)),
                "--grid", "model.noise=" + ",".join(map(str, noises))]
        sweep_s = {}
        env_a = {**env, "HEADFLOW_CACHE_DIR": str(work / f"cache_{n}")}
        for kind in ("cold", "warm"):
            out = work / f"sweep_{n}_{kind}"
            sweep_s[kind], _ = run(headflow(["sweep", str(cfg_path), *grid, "--out", str(out)]),
                                   env_a)
        warm = work / f"sweep_{n}_warm"
        data = np.load(warm / "sweep.npz")
        risk, steps = data["risk"][:, -1], data["steps"]
        solve_s = json.loads((warm / "meta.json").read_text())["wall_s"]["sweep"]
        scipy_out = work / f"scipy_{n}.npz"
        scipy_s, _ = run([sys.executable, str(HERE / "_scipy_committee.py"), str(start),
                          "--lr", *map(str, lrs), "--noise", *map(str, noises),
                          "--out", str(scipy_out)], env)
        ref = np.load(scipy_out)["eps"]
        # the second with each transcendental at the measured cost of an arcsin
        limit, limit_t = flop_limits(steps, rhs_flops, rhs_trans, peak, trans_s)
        print(f"(a) {n} points: headflow sweep end to end {sweep_s['cold']:.1f} s cold, "
              f"{sweep_s['warm']:.1f} s warm ({1e3 * sweep_s['warm'] / n:.1f} ms a point; the "
              f"vectorized solve {1e3 * solve_s / n:.1f} ms a point); {n} SciPy runs end to end "
              f"{scipy_s:.1f} s ({1e3 * scipy_s / n:.1f} ms a point); ratio SciPy/sweep "
              f"{scipy_s / sweep_s['cold']:.2f} cold, {scipy_s / sweep_s['warm']:.2f} warm "
              "(target ≥ 20)", flush=True)
        print(f"    steps a point: mean {steps.mean():.0f}, largest {steps.max()} (the group "
              f"advances in lockstep: {steps.max() / steps.mean():.2f}× the mean); flop limit "
              f"{1e3 * limit:.2f} ms a point ({1e3 * limit_t:.2f} ms with each transcendental "
              f"at an arcsin's cost); the sweep's solve / limit {solve_s / n / limit:.1f} "
              f"({solve_s / n / limit_t:.1f}), end to end warm / limit "
              f"{sweep_s['warm'] / n / limit:.1f} ({sweep_s['warm'] / n / limit_t:.1f}) "
              "(target ≤ 5)", flush=True)
        print(f"    final ε_g: sweep vs SciPy max |Δ| {np.max(np.abs(risk - ref)):.2e} "
              f"(ε_g from {ref.min():.3g} to {ref.max():.3g})", flush=True)
    # the accuracy of both against a tight DOP853 run, on every `--check-every`-th point of
    # the last grid
    pts = [(lr, s) for lr in lrs for s in noises][::args.check_every]
    idx = np.arange(n)[::args.check_every]
    tight = np.array([sc.integrate(named["Q"], named["R"], named["T"], named["v"], named["A"],
                                   lr=lr, noise=s, t_max=1000.0, rtol=1e-11, atol=1e-13,
                                   method="DOP853")[0] for lr, s in pts])
    print(f"final ε_g against DOP853 at rtol 1e-11 on {len(idx)} points: sweep "
          f"{np.max(np.abs(risk[idx] - tight)):.2e}, SciPy {np.max(np.abs(ref[idx] - tight)):.2e}",
          flush=True)

    # (b) one run each, fresh processes
    ode_s = cold_and_warm("ode", CONFIG, work, "ode", [],
                          {**env, "HEADFLOW_CACHE_DIR": str(work / "cache_b")})
    one_s, _ = run([sys.executable, str(HERE / "_scipy_committee.py"), str(start),
                    "--lr", "0.5", "--noise", "0.1"], env)
    print(f"(b) headflow ode end to end {ode_s['cold']:.1f} s cold, {ode_s['warm']:.1f} s warm; "
          f"one SciPy run end to end {one_s:.2f} s; ratio {ode_s['cold'] / one_s:.1f} cold, "
          f"{ode_s['warm'] / one_s:.1f} warm (target ≤ 3)", flush=True)

    # the floor of any JAX program: import JAX and diffrax, one jitted solve, cache warm
    floor_cmd = [sys.executable, str(HERE / "_jax_floor.py"), str(work / "cache_floor")]
    run(floor_cmd, env)                                              # fills the cache
    floor_s = min(run(floor_cmd, env)[0] for _ in range(3))
    print(f"(floor) a fresh process importing JAX and diffrax and running one jitted diffrax "
          f"solve of a one-line ODE, compilation cached (best of 3): {floor_s:.2f} s = "
          f"{floor_s / one_s:.1f} one SciPy run (the least (b) can reach), {scipy_s / floor_s:.1f}"
          f" times less than the {n} SciPy runs (the most (a) can reach)", flush=True)

    # (c) the ODE against weight-space SGD at D = 10⁴
    if args.skip_sgd:
        return
    import jax.numpy as jnp
    from headflow.sims import run_sgd

    c = cfg.replace(**{"sim.dim": args.sgd_dim, "training.t_max": args.sgd_t,
                       "sim.seeds": 1})
    times = np.array([0.0, args.sgd_t])
    run_sgd(c, times=np.array([0.0, args.sgd_t / 1000]))           # compile
    t0 = time.perf_counter()
    r = run_sgd(c, times=times)
    jax.block_until_ready(jnp.asarray(r.risk))
    sgd_s = time.perf_counter() - t0
    steps = int(args.sgd_t * args.sgd_dim)
    full = sgd_s * 1000.0 / args.sgd_t
    print(f"(c) weight-space SGD at D = {args.sgd_dim}, 1 seed: {steps} steps in {sgd_s:.1f} s "
          f"({1e6 * sgd_s / steps:.1f} µs per step), {full:.0f} s scaled to t = 1000 "
          f"({int(1000 * args.sgd_dim)} steps); ratio SGD/ODE end to end {full / ode_s['cold']:.0f}"
          f" cold, {full / ode_s['warm']:.0f} warm (target ≥ 100)")


if __name__ == "__main__":
    main()
