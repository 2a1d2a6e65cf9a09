"""Benchmark: the SDE ensemble of the overlaps (`headflow.dynamics.sde`) against online SGD
simulated exactly in overlap space (`sims`, `[sim] space = "overlaps"`), and the cost of its two
noise factors.

    python benchmarks/bench_sde.py [CONFIG] [--dim 1000] [--paths 64] [--seeds 32]
        [--set section.key=value ...]
    python benchmarks/bench_sde.py --cost [CONFIG] [--dims 4000,1000000] [--paths 256] [--seeds 16]
    python benchmarks/bench_sde.py --factors [CONFIG]
    python benchmarks/bench_sde.py --solvers [CONFIG] [--dim 4000]
    python benchmarks/bench_sde.py --brownian [CONFIG] [--dim 1000] [--paths 64]

Ensemble mode (default): `--paths` SDE paths and `--seeds` SGD seeds at `--dim` on the same
config (default `validation/configs/demo.toml`), the risk recorded on the same nodes. Printed:
the largest |z| of the difference of the mean risks over the saved times (combined standard
errors), the ratio of the standard deviations of the risk across paths and across seeds
(averaged over the saved times after t = 0, and at each fifth of the run), the escape-time
quantiles of both with a two-sample KS p-value (`headflow.dynamics.measures.escape_time`), and the
wall times of both.

`--solvers`: the drift alone (noise switched off) from three random starts at `--dim`,
integrated by `tsit5` (`FullField`, 16384 and `[sde] samples_drift` nodes, `rtol = 10⁻⁶`) and
by the SDE solvers at several steps; printed: the escape time of each start. Euler's
first-order drift error delays the escape.

`--cost`: the issue's cost criterion. At each D of `--dims` (default 4000 and 10⁶), the wall
time of `--paths` SDE paths to `t_max` (`run_sde` as `headflow sde` calls it, compilation
included; printed whole and split into the integration of the paths and the risk recorded at
every saved state of every path) against `--seeds` seeds (default 16) of online SGD in weight
space to the same `t_max`, i.e. `t_max·D` steps. The SGD is the lean, independent reference of
`bench_theory_cost.py` (`benchmarks/_reference_sgd.py`, no headflow code, seeds vmapped; it
simulates Bayes-softmax heads on a flipped spike, the demo config's model, so only configs of
that model are a fair comparison), timed per step in this run as the difference of two run
lengths (its compilation excluded, so the baseline is the cheapest the simulation can be) and
multiplied by `t_max·D` steps: run to the end, it would take minutes at D = 4000 and more than
a year at 10⁶.

`--brownian`: the two ways of drawing the Brownian paths (`[sde] brownian`): `--paths` paths
at `--dim` with `"increments"` (one Gaussian draw per step) and with `"tree"` (diffrax's virtual
Brownian tree), each run twice in this process (the first call compiles, the second is the
integration alone); printed: the wall times, their ratio, and whether the two ensembles have one
law (the mean risks' largest |z| over the saved times, and the KS p-value of the escape times).

`--factors`: wall time of one evaluation of the drift (`FullField` at `[sde] samples_drift`
nodes) and of the diffusion factored from the centred increments (`"nodes"`) and by `eigh`
(`"eigh"`), at the initial state of one path; their `B Bᵀ` agree to round-off
(`tests/test_sde.py`).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import equinox as eqx
import jax
import numpy as np
import scipy.stats as st

jax.config.update("jax_enable_x64", True)

import headflow.dynamics as d  # noqa: E402
from headflow import sims  # noqa: E402
from headflow.dynamics.measures import escape_time  # noqa: E402
from headflow.dynamics.sde import build_sde, initial_states, path_keys, run_sde  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _escapes(t, m, q) -> np.ndarray:
    out = [escape_time(t, m[i], q[i]) for i in range(m.shape[0])]
    return np.array([np.nan if e is None else e for e in out])


def _quantiles(e: np.ndarray) -> str:
    e = np.where(np.isfinite(e), e, np.inf)
    qs = np.quantile(e, [0.1, 0.5, 0.9], method="inverted_cdf")
    return " / ".join(f"{x:.3g}" for x in qs)


def _mean_z(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The difference of the mean risks of two ensembles (runs × times) at each time, in
    combined standard errors."""
    se = np.sqrt(a.var(0, ddof=1) / len(a) + b.var(0, ddof=1) / len(b))
    return (a.mean(0) - b.mean(0)) / se


def _ks_p(ea: np.ndarray, eb: np.ndarray) -> float:
    """The two-sample KS p-value of the finite escape times (NaN with fewer than two a side)."""
    fa, fb = ea[np.isfinite(ea)], eb[np.isfinite(eb)]
    return st.ks_2samp(fa, fb).pvalue if len(fa) > 1 and len(fb) > 1 else np.nan


def ensemble(cfg: d.Config, dim: int, paths: int, seeds: int) -> None:
    t0 = time.perf_counter()
    sde = run_sde(cfg, dim=dim, paths=paths, progress=True)
    t_sde = time.perf_counter() - t0
    t0 = time.perf_counter()
    sgd = sims.run_sgd(cfg.replace(**{"sim.space": "overlaps"}), dim=dim, seeds=seeds,
                       progress=True)
    t_sgd = time.perf_counter() - t0
    t = np.asarray(sde.t)
    a, b = np.asarray(sde.risk), np.asarray(sgd.risk)
    z = _mean_z(a, b)
    ratio = a.std(0, ddof=1)[1:] / b.std(0, ddof=1)[1:]
    print(f"D = {dim}: {paths} SDE paths ({sde.info['steps']} steps of dt <= {cfg.sde.dt}, "
          f"drift {sde.info['samples_drift']} nodes, noise {sde.info['samples_noise']} nodes, "
          f"{int((~sde.paths_valid).sum())} paths left the domain) against {seeds} SGD seeds "
          "(exact overlap chain)")
    print(f"  mean risk: max |z| over {len(t)} times = {np.abs(z).max():.2f} "
          f"(at t = {t[np.argmax(np.abs(z))]:.3g})")
    print(f"  std of the risk, SDE/SGD: mean over t > 0 = {ratio.mean():.3f}; at t = " + ", ".join(
        f"{t[k]:.3g}: {a[:, k].std(ddof=1):.4f}/{b[:, k].std(ddof=1):.4f}"
        for k in np.linspace(len(t) // 5, len(t) - 1, 5).astype(int)))
    es, eg = sde.escape_times(), _escapes(t, np.asarray(sgd.overlaps.m),
                                          np.asarray(sgd.overlaps.q))
    fin_s, fin_g = es[np.isfinite(es)], eg[np.isfinite(eg)]
    p = _ks_p(es, eg)
    print(f"  escape times (10/50/90%): SDE {_quantiles(es)} ({len(fin_s)}/{len(es)} escaped), "
          f"SGD {_quantiles(eg)} ({len(fin_g)}/{len(eg)}); KS p = {p:.3g}")
    print(f"  wall: SDE {t_sde:.1f} s ({sde.info['first_group_s']:.1f} s first group, "
          f"compilation included), SGD {t_sgd:.1f} s")


def brownian(cfg: d.Config, dim: int, paths: int) -> None:
    runs, walls = {}, {}
    for name in ("increments", "tree"):
        c = cfg.replace(**{"sde.brownian": name})
        walls[name] = []
        for _ in range(2):
            t0 = time.perf_counter()
            runs[name] = run_sde(c, dim=dim, paths=paths)
            walls[name].append(time.perf_counter() - t0)
        print(f"  {name:>10s}: {walls[name][0]:.2f} s (compilation included), then "
              f"{walls[name][1]:.2f} s; {runs[name].info['brownian_dim']} Brownian components, "
              f"{runs[name].info['steps']} steps", flush=True)
    print(f"D = {dim}, {paths} paths: tree / increments = "
          f"{walls['tree'][1] / walls['increments'][1]:.2f} (second calls), "
          f"{walls['tree'][0] / walls['increments'][0]:.2f} (first calls)")
    a, b = np.asarray(runs["increments"].risk), np.asarray(runs["tree"].risk)
    z = np.abs(_mean_z(a, b))[1:]             # t = 0: both ensembles start from the same draws
    ea, eb = runs["increments"].escape_times(), runs["tree"].escape_times()
    p = _ks_p(ea, eb)
    print(f"  one law: mean risks max |z| = {z.max():.2f} over {len(z)} times; escape times "
          f"(10/50/90%) increments {_quantiles(ea)}, tree {_quantiles(eb)}, KS p = {p:.3g}")


def cost(cfg: d.Config, dims: list[int], paths: int, seeds: int) -> None:
    from bench_theory_cost import sgd_cost

    t_max = cfg.training.t_max
    for dim in dims:
        t0 = time.perf_counter()
        sde = run_sde(cfg, dim=dim, paths=paths)
        t_sde = time.perf_counter() - t0
        n1, n2 = (500, 4500) if dim <= 10**5 else (2, 12)
        per_step = float(sgd_cost(dim, seeds, cfg, n1, n2)["per_step"][0])
        t_sgd = per_step * t_max * dim
        t_solve = sde.info["solve_s"]
        print(f"D = {dim}: {paths} SDE paths to t = {t_max:g} took {t_sde:.1f} s wall "
              f"({'compilation included' if dim == dims[0] else 'compiled above'}, "
              f"{int((~sde.paths_valid).sum())} left the domain): integrating the paths "
              f"{t_solve:.1f} s ({1e3 * t_solve / (sde.info['steps'] * paths):.3g} ms per step "
              f"and path), the risk at the {sde.risk.size} saved states and the rest "
              f"{t_sde - t_solve:.1f} s; "
              f"{seeds}-seed SGD {per_step * 1e3:.3g} ms per step (from {n2 - n1} steps) x "
              f"{t_max * dim:.3g} steps = {t_sgd:.4g} s (no risk recorded); SDE/SGD = "
              f"{t_sde / t_sgd:.3g} with the risk, {t_solve / t_sgd:.3g} for the paths alone "
              f"(target < 1)", flush=True)


def factors(cfg: d.Config, dim: int) -> None:
    model = cfg.build_model()
    y0 = initial_states(cfg, model, path_keys(0, 1)[0], dim)[0]
    for noise in ("nodes", "eigh"):
        sde = build_sde(cfg.replace(**{"sde.noise": noise}), dim, model)
        for name, fn in (("drift", lambda s, y: s.drift_vf(0.0, y)),
                         (f"diffusion ({noise})", lambda s, y: s.diffusion_vf(0.0, y))):
            if name == "drift" and noise == "eigh":
                continue
            f = eqx.filter_jit(fn)
            jax.block_until_ready(f(sde, y0))
            t0 = time.perf_counter()
            for _ in range(10):
                out = jax.block_until_ready(f(sde, y0))
            print(f"  {name}: {1e3 * (time.perf_counter() - t0) / 10:.1f} ms per evaluation, "
                  f"output {tuple(out.shape)}")


def solvers(cfg: d.Config, dim: int) -> None:
    import equinox as eqx
    import jax.numpy as jnp

    from headflow.dynamics.ode import Integrator, build_field, integrate
    from headflow.dynamics.sde import get_brownian, get_sde_solver, solve_paths, step_grid
    from headflow.dynamics.models.attention import unflatten

    model = cfg.build_model()
    times = cfg.save_times()
    init_keys, bm_keys = path_keys(0, 3)
    y0 = initial_states(cfg, model, init_keys, dim)
    starts = [unflatten(y0[i], model.H, model.F) for i in range(3)]
    full = cfg.replace(**{"ode.form": "full", "ode.rhs": "autodiff"})
    for n in (16384, cfg.sde.samples_drift or 16384):
        c = full.replace(**{"ode.samples": n})
        field = build_field(c, model)
        es = []
        for ov in starts:
            sol = integrate(field, ov, times, Integrator.from_config(c.ode))
            es.append(escape_time(times, np.asarray(sol.overlaps.m), np.asarray(sol.overlaps.q)))
        print(f"  tsit5, {n} nodes: escape times " + ", ".join(f"{e:.2f}" for e in es),
              flush=True)
    sde = build_sde(cfg, dim, model)
    sde = eqx.tree_at(lambda s: s.inv_sqrt_dim, sde, jnp.asarray(0.0))   # the drift alone
    for name, dt in (("euler", 0.25), ("euler", 0.05), ("drift_heun", 0.5),
                     ("drift_heun", 0.25)):
        grid = step_grid(times, dt)
        ys = solve_paths(sde, get_sde_solver(name), y0, bm_keys, jnp.asarray(times),
                         jnp.asarray(grid), get_brownian(cfg.sde.brownian, grid))
        m = np.asarray(ys)
        ov = jax.vmap(jax.vmap(lambda v: unflatten(v, model.H, model.F)))(jnp.asarray(m))
        es = _escapes(times, np.asarray(ov.m), np.asarray(ov.q))
        print(f"  {name}, dt = {dt}, {sde.drift.nodes.size} nodes: escape times "
              + ", ".join(f"{e:.2f}" for e in es), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("config", nargs="?", default=str(ROOT / "validation/configs/demo.toml"))
    p.add_argument("--dim", type=int, default=1000)
    p.add_argument("--paths", type=int, default=64)
    p.add_argument("--seeds", type=int, default=None,
                   help="SGD seeds (default 32; with --cost, 16)")
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--factors", action="store_true")
    p.add_argument("--solvers", action="store_true")
    p.add_argument("--cost", action="store_true")
    p.add_argument("--brownian", action="store_true")
    p.add_argument("--dims", default="4000,1000000", help="with --cost")
    args = p.parse_args()
    cfg = d.load_config(args.config, args.set)
    if args.cost:
        cost(cfg, [int(x) for x in args.dims.split(",")], args.paths,
             16 if args.seeds is None else args.seeds)
    elif args.brownian:
        brownian(cfg, args.dim, args.paths)
    elif args.factors:
        factors(cfg, args.dim)
    elif args.solvers:
        solvers(cfg, args.dim)
    else:
        ensemble(cfg, args.dim, args.paths, 32 if args.seeds is None else args.seeds)


if __name__ == "__main__":
    main()
