"""Benchmark of the differentiable learning curve: the cost of the gradient of one
ODE solve against the solve itself, both measured in this run (target: gradient ≤ 5× the
solve).

For the config (default `validation/configs/demo.toml`), it times, after compilation (reported
separately), the best of `--repeat` runs of:

1. the learning curve `LearningCurve(params)` (the solve and the risk on the save grid);
2. `jax.grad` of the risk at T with respect to every differentiable parameter the config has
   (`headflow.dynamics.models.attention.PARAMS`), with the recursive-checkpoint adjoint (default)
   and, with `--backsolve`, the backsolve adjoint.

`--split` also times, for the default adjoint, where the gradient's time goes: the solve alone
(no risk on the save grid), the gradient of the risk of the final state alone, and one
evaluation of the right-hand side at the initial state without and with its vector–Jacobian
product (the pull-back every step of the gradient pays), once as separately jitted calls and
once inside a compiled loop of 20 (as the solver calls them, without per-call dispatch), with
the lower bound on the gradient's ratio that the loop figure implies.

Usage: `python benchmarks/bench_grad.py [CONFIG] [--set section.key=value ...] [--repeat 3]
[--backsolve] [--checkpoints 128,none,...] [--split]`.
"""

from __future__ import annotations

import argparse
import time

import equinox as eqx
import jax

import headflow.dynamics as d
from headflow.dynamics.ode import final_risk
from headflow.dynamics.ode import LearningCurve

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
    p.add_argument("--split", action="store_true",
                   help="also time the solve alone, the gradient of the final state's risk and "
                   "one right-hand side with and without its vector-Jacobian product")
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
    if a.split:
        split(LearningCurve.from_config(cfg), a.repeat)


def split(curve: LearningCurve, repeat: int) -> None:
    """The pieces of one gradient, each after compilation, best of `repeat`."""
    params = curve.defaults()
    solve = eqx.filter_jit(lambda c, q: c.overlaps(q)[0])

    def last_risk(c, q):
        field, _ = c.field_and_start(q)
        ys, _ = c.overlaps(q)
        last = jax.tree.map(lambda x: x[-1], ys)
        return d.population_risk(field.model, last, c.nodes, manifold=c.manifold)[0]

    grad_last = eqx.filter_jit(lambda c, q: jax.grad(lambda q: last_risk(c, q))(q))
    _, t_solve = timed(solve, curve, params, repeat=repeat)
    _, t_last = timed(grad_last, curve, params, repeat=repeat)
    print(f"split: solve alone {t_solve:.3f} s; gradient of the final state's risk {t_last:.3f} s "
          f"({t_last / t_solve:.2f}x the solve)")
    field, ov0 = curve.field_and_start(params)
    rhs = eqx.filter_jit(lambda f, y: f(0.0, y, None))

    def pulled_back(f, y):
        out, vjp = jax.vjp(lambda y: f(0.0, y, None), y)
        return vjp(out)

    _, t_rhs = timed(rhs, field, ov0, repeat=max(repeat, 5))
    _, t_vjp = timed(eqx.filter_jit(pulled_back), field, ov0, repeat=max(repeat, 5))
    print(f"split: one right-hand side {1e3 * t_rhs:.2f} ms, with its vector-Jacobian product "
          f"{1e3 * t_vjp:.2f} ms ({t_vjp / t_rhs:.2f}x)")
    # The same two inside a compiled loop, as the solver calls them: a separately jitted call
    # also pays its dispatch, which the solver's loop does not.
    n = 20

    def chained(f, y, pull: bool):
        def body(c, _):
            d = pulled_back(f, c)[0] if pull else f(0.0, c, None)
            return jax.tree.map(lambda a, b: a + 1e-3 * b, c, d), None
        return jax.lax.scan(body, y, None, length=n)[0]

    _, l_rhs = timed(eqx.filter_jit(lambda f, y: chained(f, y, False)), field, ov0, repeat=repeat)
    _, l_vjp = timed(eqx.filter_jit(lambda f, y: chained(f, y, True)), field, ov0, repeat=repeat)
    r = l_vjp / l_rhs
    print(f"split: in a loop of {n}, one right-hand side {1e3 * l_rhs / n:.2f} ms, with its "
          f"vector-Jacobian product {1e3 * l_vjp / n:.2f} ms (r = {r:.2f}x); reverse mode "
          f"through the solve costs at least the solve, its recomputation and the pull-backs: "
          f"2 + (r - 1) = {1 + r:.2f}x the solve")


if __name__ == "__main__":
    main()
