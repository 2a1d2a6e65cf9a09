"""What the theory costs against the simulation it stands for, at a measured accuracy. Every
ratio is between times measured in this one run.

    python benchmarks/bench_theory_cost.py [--t-max 100] [--t-e2e 20] [--dim 4000] [--seeds 16]
        [--ref-samples 1048576] [--error-seeds 3] [--skip-e2e]

Baseline: a lean, independent JAX implementation of the same online SGD
(`benchmarks/_reference_sgd.py`, no headflow code), 16 seeds vmapped at D = 4000 on the default
config (two Bayes-softmax heads, flipped spike, L = 4, η = η_b = 1). Its cost per step and seed
is the difference of two run lengths (compilation and set-up excluded, so the baseline is the
cheapest the simulation can be); the cost of a span of t is that times `t·D` steps.

1. **Accuracy.** The true error of a vector field is measured against a reference field with
   `--ref-samples` scrambled-Sobol nodes, at 11 states along the trajectory: the largest
   absolute deviation over all components and states, relative to the largest component of the
   reference field. Measured for the field of the old default (Monte Carlo, 65536 nodes) and of
   the new default (`[ode]` defaults), for the manifold and the full form, each over
   `--error-seeds` node seeds.
2. **Cost of the ODE** to `t_max`: compile and run separately, manifold form (the default
   right-hand side and autodiff) and full form, at the default nodes; the old default too.
   Targets: manifold ≤ 1/100 and full ≤ 1/30 of the SGD.
3. **The analytic value integrals.** The full-form field with the value fields integrated out
   (`FullField`) against the same field with every field sampled (`SampledFullField`, the
   full form before), both Monte Carlo at the same nodes: time per call, true error, and the
   speed-up at equal error (Monte Carlo error ∝ n^{-1/2}, so equal error costs
   `(err_sampled / err_analytic)²` times the nodes).
4. **End to end**, as a user runs it: `headflow ode` on the default config to `--t-e2e`, in a
   fresh process with an empty cache folder, then again with its compiled programs cached (the
   second command sets `ode.seed` to its default, so the results cache does not replay the
   first). Targets: the SGD over the same span at least 30 times dearer at t = 20, 100 times at
   t = 100.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

jax.config.update("jax_enable_x64", True)

import headflow.dynamics as d  # noqa: E402
from headflow.dynamics.expectations import MonteCarlo, QuasiMonteCarlo  # noqa: E402
from headflow.dynamics.models.attention import FullField, SampledFullField  # noqa: E402
from headflow.dynamics.ode import Integrator, build_field, initial_state, integrate  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _reference_sgd import make_run  # noqa: E402

OLD = {"ode.expectation": "mc", "ode.samples": 65536, "ode.rhs": "autodiff"}
"""The `[ode]` defaults before this benchmark's issue."""


class Clock:
    """Wall and process CPU time (all threads); on a shared machine the CPU time is the
    steadier measure."""

    def __init__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def stop(self) -> np.ndarray:
        return np.array([time.perf_counter() - self.wall, time.process_time() - self.cpu])


def fmt(x: np.ndarray) -> str:
    return f"{x[0]:.3g} s wall / {x[1]:.3g} s cpu"


def sgd_cost(dim: int, seeds: int, cfg: d.Config, n1: int = 500, n2: int = 4500) -> dict:
    """Seconds per SGD step (all seeds together) of the lean reference: the difference of runs
    of `n2` and `n1` steps over `n2 − n1` (fewer steps where one costs seconds, at large D)."""
    tr, pr = cfg.training, cfg.prior
    run = make_run(dim, cfg.model.H, cfg.model.L, amplitude=pr.amplitude, p=pr.p, lr=tr.lr,
                   lr_bias=tr.lr_bias, init_std=tr.init_key_std)
    keys = jr.split(jr.key(0), seeds)
    c = Clock()
    jax.block_until_ready(run(keys, n1))
    first = c.stop()
    jax.block_until_ready(run(keys, n2))        # compile this length once
    c = Clock()
    jax.block_until_ready(run(keys, n1))
    t1 = c.stop()
    c = Clock()
    out = jax.block_until_ready(run(keys, n2))
    t2 = c.stop()
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in out)
    per_step = (t2 - t1) / (n2 - n1)
    return {"per_step": per_step, "compile": first - t1}


def flat(ov) -> jax.Array:
    return jnp.concatenate([jnp.ravel(x) for x in jax.tree.leaves(ov)])


@eqx.filter_jit
def fields_at(field, ovs):
    return jax.lax.map(lambda o: flat(field(0.0, o)), ovs)


def true_errors(cfg: d.Config, model, states, ref: np.ndarray, seeds: int, *,
                field_cls=None, backend=None) -> np.ndarray:
    """Relative true error of the configured field (or `field_cls` with `backend`'s nodes) for
    node seeds 1…`seeds` (the reference uses seed 0 and far more nodes)."""
    scale = np.max(np.abs(ref))
    out = []
    for s in range(1, seeds + 1):
        if field_cls is None:
            f = build_field(cfg.replace(**{"ode.seed": s}), model)
        else:
            f = field_cls.build(model, d.StepSizes.from_config(cfg.training),
                                dataclasses.replace(backend, seed=s))
        out.append(np.max(np.abs(np.asarray(fields_at(f, states)) - ref)) / scale)
    return np.asarray(out)


def trajectory(cfg: d.Config, model, t_max: float):
    ov0 = initial_state(cfg, model)
    sol = integrate(build_field(cfg, model), ov0, np.linspace(0.0, t_max, 11),
                    Integrator.from_config(cfg.ode))
    return sol.overlaps


def ode_time(cfg: d.Config, model, ts) -> tuple[float, float, float, int]:
    """Compile and run wall seconds of one integration to `ts[-1]`, the CPU seconds of both
    together, and its steps."""
    field, ov0 = build_field(cfg, model), initial_state(cfg, model)
    c = Clock()
    sol = integrate(field, ov0, ts, Integrator.from_config(cfg.ode))
    return sol.compile_s, sol.run_s, float(c.stop()[1]), sol.num_steps


def call_time(field, ov, reps: int = 5) -> float:
    f = eqx.filter_jit(lambda fl, o: flat(fl(0.0, o)))
    jax.block_until_ready(f(field, ov))
    t0 = time.perf_counter()
    for _ in range(reps):
        jax.block_until_ready(f(field, ov))
    return (time.perf_counter() - t0) / reps


def e2e(t_e2e: float) -> tuple[float, float, dict, dict]:
    """Wall seconds of `headflow ode` (default config) in a fresh process: first with an empty
    cache folder, then again with its compiled programs cached; and the two runs' meta.json.
    The second run also sets `ode.seed` to its default: the same computation under other
    arguments, which the results cache (keyed on the arguments) does not replay."""
    exe = Path(sys.executable).with_name("headflow")
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "HEADFLOW_CACHE_DIR": str(Path(tmp) / "cache"),
               "HEADFLOW_CACHE": "1"}
        walls, metas = [], []
        for i in range(2):
            out = Path(tmp) / f"run{i}"
            t0 = time.perf_counter()
            again = ["--set", "ode.seed=0"] if i else []
            subprocess.run([str(exe), "ode", "--set", f"training.t_max={t_e2e}", *again, "--out",
                            str(out)], check=True, env=env, stdout=subprocess.DEVNULL)
            walls.append(time.perf_counter() - t0)
            metas.append(json.loads((out / "meta.json").read_text()))
    return walls[0], walls[1], metas[0], metas[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--t-max", type=float, default=100.0)
    p.add_argument("--t-e2e", type=float, default=20.0)
    p.add_argument("--dim", type=int, default=4000)
    p.add_argument("--seeds", type=int, default=16)
    p.add_argument("--ref-samples", type=int, default=1 << 20)
    p.add_argument("--error-seeds", type=int, default=3)
    p.add_argument("--skip-e2e", action="store_true")
    p.add_argument("--only", default="accuracy,cost,e2e",
                   help="comma-separated sections to run: accuracy ([1], [3]), cost ([2]), e2e")
    a = p.parse_args()
    only = set(a.only.split(","))
    print(f"devices: {jax.devices()}; cores: {os.cpu_count()}")

    base = d.load_config(None, [f"training.t_max={a.t_max}", "output.n_save=101"])
    model = base.build_model()
    o = base.ode
    print(f"new [ode] defaults: expectation={o.expectation} samples={o.samples} rhs={o.rhs} "
          f"form={o.form} solver={o.solver} rtol={o.rtol}")

    sgd = sgd_cost(a.dim, a.seeds, base)
    sgd_t = {t: sgd["per_step"] * t * a.dim for t in (a.t_max, a.t_e2e)}
    print(f"[0] reference SGD, D={a.dim}, {a.seeds} seeds: "
          f"{sgd['per_step'][0] / a.seeds * 1e6:.1f} µs wall / "
          f"{sgd['per_step'][1] / a.seeds * 1e6:.1f} µs cpu per step and seed "
          f"(compile {sgd['compile'][0]:.1f} s); to t={a.t_max:g}: {fmt(sgd_t[a.t_max])}, "
          f"to t={a.t_e2e:g}: {fmt(sgd_t[a.t_e2e])}")

    # [1] accuracy
    for form in ("manifold", "full") if "accuracy" in only else ():
        cfg = base.replace(**{"ode.form": form})
        states = trajectory(cfg, model, a.t_max)
        ref_field = build_field(cfg, model, QuasiMonteCarlo(samples=a.ref_samples, seed=0))
        ref = np.asarray(fields_at(ref_field, states))
        new = true_errors(cfg, model, states, ref, a.error_seeds)
        old = true_errors(cfg.replace(**OLD), model, states, ref, a.error_seeds)
        print(f"[1] {form} form, true relative field error over {a.error_seeds} node seeds "
              f"(reference {a.ref_samples} QMC nodes): new default "
              f"{new.mean():.2e} (worst {new.max():.2e}); old default (MC 65536) "
              f"{old.mean():.2e} (worst {old.max():.2e})")
        if form == "full":
            sampled = true_errors(cfg, model, states, ref, a.error_seeds,
                                  field_cls=SampledFullField,
                                  backend=MonteCarlo(samples=65536))
            analytic = true_errors(cfg, model, states, ref, a.error_seeds,
                                   field_cls=FullField, backend=MonteCarlo(samples=65536))
            ov = jax.tree.map(lambda x: x[5], states)
            hp = d.StepSizes.from_config(cfg.training)
            ts = call_time(SampledFullField.build(model, hp, MonteCarlo(samples=65536)), ov)
            ta = call_time(FullField.build(model, hp, MonteCarlo(samples=65536)), ov)
            ratio = (sampled.mean() / analytic.mean()) ** 2
            print(f"[3] full form at 65536 MC nodes: sampled values {ts * 1e3:.1f} ms/call, "
                  f"error {sampled.mean():.2e}; analytic values {ta * 1e3:.1f} ms/call, error "
                  f"{analytic.mean():.2e}; at equal error the sampled field needs "
                  f"{ratio:.1f}x the nodes: speed-up {ratio * ts / ta:.1f}x")

    # [2] cost of the ODE
    ts = base.save_times()
    rows = [("manifold, default rhs", base),
            ("manifold, autodiff", base.replace(**{"ode.rhs": "autodiff"})),
            ("full, autodiff", base.replace(**{"ode.form": "full"})),
            ("old default (manifold, MC 65536, autodiff)", base.replace(**OLD))]
    for name, cfg in rows if "cost" in only else ():
        comp, run, cpu, steps = ode_time(cfg, model, ts)
        target = 30 if "full" in name else 100
        print(f"[2] ODE {name} to t={a.t_max:g}: run {run:.2f} s ({steps} steps), compile "
              f"{comp:.1f} s, cpu (both) {cpu:.1f} s; SGD/ODE = {sgd_t[a.t_max][0] / run:.0f} "
              f"(run), {sgd_t[a.t_max][0] / (run + comp):.0f} (with compile), "
              f"{sgd_t[a.t_max][1] / cpu:.0f} (cpu, with compile); target ≥ {target}")

    if "e2e" in only and not a.skip_e2e:
        first, again, m1, m2 = e2e(a.t_e2e)
        s = sgd_t[a.t_e2e][0]
        print(f"[4] `headflow ode` to t={a.t_e2e:g}, fresh process: first {first:.1f} s "
              f"(compile {m1['ode_compile_s']:.1f} s, integrate {m1['ode_run_s']:.2f} s), "
              f"repeated {again:.1f} s (compile {m2['ode_compile_s']:.1f} s, integrate "
              f"{m2['ode_run_s']:.2f} s); SGD over the same span {s:.0f} s: SGD / ODE "
              f"{s / first:.0f} first and {s / again:.0f} repeated (targets: 30 at t = 20, 100 at"
              " t = 100)")
        for name, m in (("first", m1), ("repeated", m2)):
            print(f"    {name}: meta.json wall_s " + ", ".join(
                f"{k} {v:.2f}" for k, v in m["wall_s"].items()))


if __name__ == "__main__":
    main()
