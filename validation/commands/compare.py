"""`headflow compare CONFIG`: ODE versus SGD from matched initial conditions."""

from __future__ import annotations

import json

import numpy as np

from .._rundir import run_dir
from ..compare import canonical_arrays, compare
from ..plots import plot_trajectories
from ._common import add_config_args, config_from_args, out_dir, positive_int, show_progress


def register(sub) -> None:
    p = sub.add_parser("compare", help="ODE vs SGD from matched initial conditions",
                       description="Run SGD at --dim over --seeds, start the ODE from the seed "
                       "mean of the measured initial overlaps, and report their agreement "
                       "(report.json, compare.png, sgd.npz, ode.npz).")
    add_config_args(p)
    p.add_argument("--dim", type=positive_int, help="D (overrides sim.dim)")
    p.add_argument("--seeds", type=positive_int, help="number of seeds (overrides sim.seeds)")
    p.set_defaults(func=run)


def run_compare_into(rd, cfg, *, title: str = "") -> dict:
    """Run a comparison and write its files into the run folder `rd`; returns the report."""
    with rd.timed("compare"):
        sgd, ode, report = compare(cfg, progress=show_progress())
    rd.meta["ode_solver_steps"] = ode.num_steps
    np.savez(rd.path("sgd.npz"), **sgd.arrays())
    np.savez(rd.path("ode.npz"), **ode.arrays())
    s, o = canonical_arrays(sgd, ode)
    rd.path("report.json").write_text(json.dumps(report, indent=2) + "\n")
    plot_trajectories(rd.path("compare.png"), s["t"], sgd=s, ode=o, title=title or (
        f"ODE (dashed) vs SGD seed mean ± std (heads in canonical order), D={sgd.dim}, {len(sgd.seeds)} seeds, "
        f"{cfg.model.activation}"))
    return report


def run(args) -> dict:
    cfg = config_from_args(args, dim="sim.dim", seeds="sim.seeds")
    out = out_dir(args, "compare", cfg)
    with run_dir(out, command="compare", config_toml=cfg.to_toml(),
                 meta={"dtype": {"sgd": cfg.sim.dtype, "ode": "float64"}}) as rd:
        report = run_compare_into(rd, cfg)
    print(f"risk: sup |ODE − SGD mean| = {report['risk_sup_abs']:.4g} "
          f"({100 * report['risk_sup_rel']:.2f}% relative), seed spread "
          f"{report['risk_spread']:.3g}; final {report['final']['risk_ode']:.4f} (ODE) vs "
          f"{report['final']['risk_sgd']:.4f} (SGD)")
    return {**report, "out": str(out)}
