"""Benchmark of the differentiable learning curve (issue 14): the cost of the gradient of one
ODE solve against the solve itself, both measured in this run (target: gradient ≤ 5× the
solve).

For the config (default `validation/configs/demo.toml`), it times, after compilation (reported
separately), the best of `--repeat` runs of:

1. the learning curve `LearningCurve(params)` (the solve and the risk on the save grid);
2. `jax.grad` of the risk at T with respect to every differentiable parameter the config has
   (`dynamics.ode.PARAMS`), with the recursive-checkpoint adjoint (default) and, with
   `--backsolve`, the backsolve adjoint.

Usage: `python benchmarks/bench_grad.py [CONFIG] [--set section.key=value ...] [--repeat 3]
[--backsolve]`.
"""

from __future__ import annotations

import argparse
import time

import equinox as eqx
import jax

import dynamics as d
from dynamics.ode import LearningCurve, final_risk

jax.config.update("jax_enable_x64", True)


def timed(fn, *args, repeat: int) -> tuple[float, float]:
    """(compile + first run − best run, best run) in seconds."""
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    first = time.perf_counter() - t0
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - t0)
    return first - best, best


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config", nargs="?", default="validation/configs/demo.toml")
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--backsolve", action="store_true")
    p.add_argument("--checkpoints", default=None,
                   help="comma-separated checkpoint counts of the recursive adjoint to time "
                   "(`none`: diffrax's log(max_steps); default: LearningCurve's default)")
    a = p.parse_args()
    cfg = d.load_config(a.config, a.set)
    print(f"config {a.config} {a.set}: t_max = {cfg.training.t_max}, ode.samples = "
          f"{cfg.ode.samples}, rhs = {cfg.ode.rhs}, rtol = {cfg.ode.rtol}")
    runs: list[tuple[str, dict]] = [("recursive", {})]
    if a.checkpoints:
        runs = [(f"recursive, checkpoints={c}", {"checkpoints": None if c == "none" else int(c)})
                for c in a.checkpoints.split(",")]
    if a.backsolve:
        runs.append(("backsolve", {"adjoint": "backsolve"}))
    value = eqx.filter_jit(lambda c, q: c(q))
    grad = eqx.filter_jit(lambda c, q: jax.grad(lambda q: final_risk(c(q)))(q))
    for name, kwargs in runs:
        curve = LearningCurve.from_config(cfg, **kwargs)
        params = curve.defaults()
        c_solve, t_solve = timed(value, curve, params, repeat=a.repeat)
        c_grad, t_grad = timed(grad, curve, params, repeat=a.repeat)
        print(f"{name}: solve {t_solve:.3f} s (compile {c_solve:.1f} s); gradient in "
              f"{len(params)} parameters {t_grad:.3f} s (compile {c_grad:.1f} s); ratio "
              f"{t_grad / t_solve:.2f}x (target <= 5x)")


if __name__ == "__main__":
    main()
