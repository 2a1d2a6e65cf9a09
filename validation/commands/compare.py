"""`headflow compare CONFIG`: ODE versus SGD from matched initial conditions."""

from __future__ import annotations

from .._rundir import run_dir
from ._common import (add_config_args, checked, config_from_args, out_dir, positive_int,
                      replace_out, write_comparison)


EXAMPLE = "headflow compare validation/configs/escape.toml --dim 1000 --seeds 8"
"""Shown at the end of `--help`."""


def register(sub) -> None:
    p = sub.add_parser("compare", help="ODE vs SGD from matched initial conditions",
                       description="Run SGD at --dim over --seeds, start the ODE from the seed "
                       "mean of the measured initial overlaps, and report their agreement "
                       "(report.json, compare.png, sgd.npz, ode.npz).")
    add_config_args(p)
    p.add_argument("--dim", type=positive_int, help="D (overrides sim.dim)")
    p.add_argument("--seeds", type=positive_int, help="number of seeds (overrides sim.seeds)")
    p.set_defaults(func=run)


def run(args) -> dict:
    cfg = config_from_args(args, dim="sim.dim", seeds="sim.seeds")
    out = out_dir(args, "compare", cfg)
    if args.check:
        return checked(args, out)
    with run_dir(out, replace=replace_out(args), command="compare", config_toml=cfg.to_toml(),
                 meta={"dtype": {"sgd": cfg.sim.run_dtype, "ode": "float64"}}) as rd:
        report = write_comparison(rd, cfg)
    print(f"risk: sup |ODE − SGD mean| = {report['risk_sup_abs']:.4g} "
          f"({100 * report['risk_sup_rel']:.2f}% relative), seed spread "
          f"{report['risk_spread']:.3g}; final {report['final']['risk_ode']:.4f} (ODE) vs "
          f"{report['final']['risk_sgd']:.4f} (SGD)")
    return {**report, "out": str(out)}
