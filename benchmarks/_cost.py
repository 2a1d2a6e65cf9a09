"""Shared pieces of the cost benchmarks: running a command end to end in a fresh process, the
machine's float64 peak, and the flops of one evaluation of a problem's right-hand side (XLA's
count). No headflow code is imported here."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PEAK_N = 2048
"""The side of the dense matrix product whose speed is taken as the machine's peak."""


def run(cmd: list[str], env: dict) -> tuple[float, str]:
    """Run `cmd` from the repository root; its wall time in seconds and its standard output.
    Exits with the command's output when it fails."""
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return wall, p.stdout


def headflow(args: list[str]) -> list[str]:
    """The command line `headflow ARGS` in this interpreter."""
    return [sys.executable, "-m", "headflow.validation", *args]


def cold_and_warm(command: str, text: str, work: Path, stem: str, extra: list[str],
                  env: dict) -> dict[str, float]:
    """Wall seconds of `headflow COMMAND CONFIG EXTRA --out WORK/STEM_KIND` in fresh processes:
    `"cold"` with the cache folder of `env` empty, then `"warm"` with what the cold run left.
    Each reads a copy of the config `text` with a comment naming the run: the results cache,
    keyed on the config's bytes, would otherwise replay the cold run's folder without
    computing, while the compiled programs are still read back."""
    wall = {}
    for kind in ("cold", "warm"):
        path = work / f"{stem}_{kind}.toml"
        path.write_text(text + f"\n# the {kind} run\n")
        wall[kind], _ = run(headflow([command, str(path), *extra, "--out",
                                      str(work / f"{stem}_{kind}")]), env)
    return wall


def best_s(fn, *args, repeat: int = 5) -> float:
    """The shortest of `repeat` timed calls of the jitted `fn(*args)`, after one that compiles
    it."""
    import jax

    f = jax.jit(fn)
    f(*args).block_until_ready()
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        f(*args).block_until_ready()
        best = min(best, time.perf_counter() - t0)
    return best


def peak_flops() -> float:
    """The machine's float64 peak, as a dense `PEAK_N`² matrix product reaches it (FLOP/s,
    best of 5, compiled first)."""
    import jax.numpy as jnp

    a = jnp.asarray(np.random.default_rng(0).normal(size=(PEAK_N, PEAK_N)))
    return 2.0 * PEAK_N**3 / best_s(jnp.matmul, a, a)


def elementwise_s(name: str) -> float:
    """Seconds per float64 evaluation of the `jax.numpy` function `name` (`"arcsin"`, `"exp"`)
    on a long vector, best of 5: the cost of one of the transcendental functions XLA counts."""
    import jax.numpy as jnp

    x = jnp.linspace(-0.9, 0.9, 1 << 20)
    return best_s(getattr(jnp, name), x) / x.size


def machine_line(flops: float, trans: float, peak: float, name: str, unit_s: float) -> str:
    """One line describing a right-hand side's cost ([`rhs_cost`][]) and the machine's speed
    ([`peak_flops`][], and [`elementwise_s`][] of the transcendental function `name`)."""
    return (f"one right-hand side {flops:.3g} flops and {trans:.3g} transcendentals (XLA's count, "
            f"batched); float64 peak of this machine {peak / 1e9:.1f} GFLOP/s (dense {PEAK_N}² "
            f"matrix product, best of 5); one float64 {name} {1e9 * unit_s:.1f} ns "
            f"({unit_s * peak:.0f} flops at that peak)")


def flop_limits(steps, flops: float, trans: float, peak: float, unit_s: float
                ) -> tuple[float, float]:
    """The least seconds a point's solve can take: the right-hand-side evaluations its tsit5
    steps made (6 a step, accepted or rejected: first same as last), times the flops of one
    evaluation over the machine's `peak`; and the same with each transcendental function at
    `unit_s` seconds. `steps`: the solver steps of the points (their mean is used)."""
    evals = 6 * np.mean(steps) + 1
    return evals * flops / peak, evals * (flops / peak + trans * unit_s)


def rhs_cost(prob, batch: int = 256) -> tuple[float, float]:
    """The flops and transcendental functions of one evaluation of the right-hand side of
    `prob` (a built ODE problem: its `field` and `start`), counted by XLA on the field
    vectorized over `batch` copies of the start, per copy.

    XLA counts the body of a loop once, whatever its trip count, so a field on quadrature
    nodes (which sums them in a loop over chunks) is counted as the same weighted sum over all
    its nodes at once: `node_derivative` vectorized over the nodes."""
    import jax
    import jax.numpy as jnp

    field = prob.field
    ys = jax.tree.map(lambda x: jnp.broadcast_to(x, (batch, *jnp.shape(x))), prob.start)
    nodes = getattr(field, "nodes", None)
    if nodes is None:
        def rhs(y):
            return field(0.0, y)
    else:
        def rhs(y):
            per = jax.vmap(lambda x: field.node_derivative(y, x))(nodes.x)
            return jax.tree.map(lambda p: jnp.tensordot(nodes.w, p, axes=1), per)
    cost = jax.jit(jax.vmap(rhs)).lower(ys).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return cost["flops"] / batch, cost.get("transcendentals", 0.0) / batch
