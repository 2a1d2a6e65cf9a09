"""Benchmark of the ODE engine (issue 3). Prints times and ratios measured in one run:

1. the ODE trajectory of the default config against the 16-seed SGD run it predicts at D=4000
   (target: ODE ≤ 1/100 of the SGD wall time);
2. the same right-hand side in numpy driven by `scipy.integrate.solve_ivp` at the same tolerance
   (target: JAX/diffrax ≥ 10× faster; compile time excluded and reported separately).

Both are measured for each right-hand side in `--rhs` (default: `autodiff`, the generic
autodiff field, and `symbolic`, the code generated from the sympy derivation; the two compute the
same vector field to round-off, see `tests/test_symbolic.py`).

Usage: `python benchmarks/bench_ode.py [--t-max 100] [--dim 4000] [--seeds 16]
[--numpy-samples 16384] [--rhs autodiff,symbolic] [--skip-sgd]`.
"""

from __future__ import annotations

import argparse
import time

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import scipy.integrate

import headflow.dynamics as d
from headflow.dynamics.ode import Integrator, build_field, initial_state, solve
from headflow.sims.attention import simulate

from _numpy_ode import NumpyManifoldRHS

jax.config.update("jax_enable_x64", True)


def _flat(ov):
    return np.concatenate([np.asarray(x).ravel() for x in (ov.m, ov.q, ov.n, ov.s, ov.b)])


def time_ode(cfg, ts):
    """Compile (first call) and run (second call) times of the diffrax integration."""
    model = cfg.build_model()
    field = build_field(cfg, model)
    ov0 = initial_state(cfg, model)
    args = (dfx.ODETerm(field), ov0, jnp.asarray(ts), Integrator.from_config(cfg.ode))
    t0 = time.perf_counter()
    jax.block_until_ready(solve(*args))
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    sol = jax.block_until_ready(solve(*args))
    run = time.perf_counter() - t0
    return first - run, run, sol, field, ov0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--t-max", type=float, default=100.0)
    p.add_argument("--dim", type=int, default=4000)
    p.add_argument("--seeds", type=int, default=16)
    p.add_argument("--numpy-samples", type=int, default=16384)
    p.add_argument("--rhs", default="autodiff,symbolic",
                   help="comma-separated right-hand sides to time ([ode] rhs)")
    p.add_argument("--skip-sgd", action="store_true")
    args = p.parse_args()
    print(f"devices: {jax.devices()}")
    rhs_kinds = [r.strip() for r in args.rhs.split(",") if r.strip()]
    base = d.load_config(None, [f"training.t_max={args.t_max}", "output.n_save=101"])
    ts = base.save_times()
    ode_s = {}
    for rhs in rhs_kinds:
        cfg = base.replace(**{"ode.rhs": rhs})
        compile_s, run_s, sol, _, _ = time_ode(cfg, ts)
        ode_s[rhs] = run_s
        print(f"[1] ODE ({rhs} RHS), default config ({cfg.ode.samples} {cfg.ode.expectation} "
              f"nodes, {cfg.ode.solver}, rtol={cfg.ode.rtol}), t_max={args.t_max}: "
              f"run {run_s:.2f} s, compile {compile_s:.2f} s, {int(sol.stats['num_steps'])} "
              "steps")
    cfg = base
    if not args.skip_sgd:
        model = cfg.build_model()
        tr = cfg.training
        hp = d.StepSizes.from_config(tr)
        kw = dict(dim=args.dim, seeds=list(range(args.seeds)), init_std=(
            tr.init_key_std, tr.init_value_std, tr.init_bias))
        t0 = time.perf_counter()
        simulate(model, hp, times=ts[:2], **kw)  # compile (same shapes)
        sgd_compile = time.perf_counter() - t0
        t0 = time.perf_counter()
        run = simulate(model, hp, times=ts, **kw)
        jax.block_until_ready(run.overlaps.m)
        sgd_s = time.perf_counter() - t0
        print(f"    SGD, D={args.dim}, {args.seeds} seeds, {int(run.steps[-1])} steps: "
              f"{sgd_s:.1f} s (compile ≈ {sgd_compile:.1f} s)")
        for rhs, run_s in ode_s.items():
            print(f"    ratio ODE ({rhs})/SGD = 1/{sgd_s / run_s:.0f} (target ≤ 1/100)")

    # [2] numpy + solve_ivp, same nodes, same tolerance
    for rhs in rhs_kinds:
        _numpy_vs_jax(base.replace(**{"ode.samples": args.numpy_samples, "ode.rhs": rhs}), ts,
                      args.numpy_samples)


def _numpy_vs_jax(ncfg, ts, samples):
    compile_s, run_s, sol, field, ov0 = time_ode(ncfg, ts)
    model = field.model
    prior = model.prior
    ref = NumpyManifoldRHS(activation=ncfg.model.activation, L=model.L, H=model.H, F=model.F,
                           points=np.asarray(prior.points), weights=np.asarray(prior.weights),
                           noise=model.noise, rho=model.rho, lr=ncfg.training.lr,
                           lr_bias=ncfg.training.lr_bias,
                           weight_decay=ncfg.training.weight_decay, batch=ncfg.training.batch,
                           sgd_noise=ncfg.ode.sgd_noise, nodes=np.asarray(field.nodes.x))
    y0 = _flat(ov0)
    jax_rhs = _flat(eqx.filter_jit(lambda f, o: f(0.0, o))(field, ov0))
    agree = np.max(np.abs(ref(0.0, y0) - jax_rhs))
    t0 = time.perf_counter()
    ref(0.0, y0)
    np_rhs = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = scipy.integrate.solve_ivp(ref, (ts[0], ts[-1]), y0, method="RK45", t_eval=ts,
                                    rtol=ncfg.ode.rtol, atol=ncfg.ode.atol)
    np_s = time.perf_counter() - t0
    diff = np.max(np.abs(out.y[:, -1] - _flat(jax.tree.map(lambda x: x[-1], sol.ys))))
    print(f"[2] same RHS as {ncfg.ode.rhs} ({samples} nodes): max |numpy − JAX| at t=0: "
          f"{agree:.1e}; "
          f"numpy RHS {np_rhs * 1e3:.0f} ms/call")
    print(f"    scipy solve_ivp(RK45): {np_s:.1f} s, {out.nfev} RHS calls; diffrax Tsit5: "
          f"{run_s:.2f} s (compile {compile_s:.1f} s, excluded), "
          f"{int(sol.stats['num_steps'])} steps; final states differ by {diff:.1e}")
    print(f"    ratio numpy/JAX = {np_s / run_s:.1f}x (target ≥ 10x)")


if __name__ == "__main__":
    main()
