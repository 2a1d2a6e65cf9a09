"""`headflow compare CONFIG`: theory (the SDE ensemble, the ODE, or one ODE per seed) versus
SGD."""

from __future__ import annotations

from ._common import (add_config_args, checked, config_from_args, out_dir, positive_int,
                      replace_out, write_comparison)
from ._light import THEORIES


EXAMPLE = "headflow compare validation/configs/escape.toml --dim 1000 --seeds 8 --paths 32"
"""Shown at the end of `--help`."""


def register(sub) -> None:
    p = sub.add_parser("compare", help="theory (SDE ensemble, ODE, or ODE per seed) vs SGD",
                       description="Run SGD at --dim over --seeds and the theory on the same "
                       "time grid, and report their agreement (report.json, compare.png, "
                       "sgd.npz and the theory's arrays). --theory sde (default): --paths SDE "
                       "paths at the run's D, compared as distributions (ensemble mean and "
                       "std over time with standard errors, escape-time quantiles and a "
                       "two-sample KS test, verdicts; ensemble.npz, sde.npz). --theory ode: "
                       "the ODE from the seed mean of the measured initial overlaps (ode.npz). "
                       "--theory ode-per-seed: one ODE per seed from its own initial overlaps "
                       "(ode_per_seed.npz). See docs/sde.md.")
    add_config_args(p)
    p.add_argument("--dim", type=positive_int, help="D (overrides sim.dim)")
    p.add_argument("--seeds", type=positive_int, help="number of seeds (overrides sim.seeds)")
    p.add_argument("--theory", choices=THEORIES, default="sde",
                   help="what SGD is compared with (default: sde)")
    p.add_argument("--paths", type=positive_int,
                   help="SDE paths with --theory sde (overrides sde.paths)")
    p.set_defaults(func=run)


def run(args) -> dict:
    from dynamics import ConfigError

    from .._rundir import run_dir

    sde = args.theory == "sde"
    if args.paths is not None and not sde:
        raise ConfigError(f"--paths applies to --theory sde only (got --theory {args.theory})")
    cfg = config_from_args(args, dim="sim.dim", seeds="sim.seeds",
                           **({"paths": "sde.paths"} if sde else {}))
    out = out_dir(args, "compare", cfg, "" if args.theory == "ode" else args.theory)
    if args.check:
        return checked(args, out)
    dtype = {"sgd": cfg.sim.run_dtype, "sde" if sde else "ode": "float64"}
    with run_dir(out, replace=replace_out(args), command="compare", config_toml=cfg.to_toml(),
                 meta={"dtype": dtype, "theory": args.theory}) as rd:
        report = write_comparison(rd, cfg, theory=args.theory)
    print(describe(report))
    return {**report, "out": str(out)}


def describe(report: dict) -> str:
    """One line (ODE) or a few lines (ensembles) stating the agreement in words."""
    if report["theory"] == "ode":
        return (f"risk: sup |ODE − SGD mean| = {report['risk_sup_abs']:.4g} "
                f"({100 * report['risk_sup_rel']:.2f}% relative), seed spread "
                f"{report['risk_spread']:.3g}; final {report['final']['risk_ode']:.4f} (ODE) "
                f"vs {report['final']['risk_sgd']:.4f} (SGD)")
    return "\n".join(verdict_lines(report))


def _agree(v: bool | None) -> str:
    return "not assessed (fewer than two runs)" if v is None else ("AGREE" if v else
                                                                    "DISAGREE")


def verdict_lines(report: dict) -> list[str]:
    """The three verdicts of an ensemble report, one line each, and the overall one."""
    v, fin = report["verdicts"], report["final"]
    name = {"sde": "SDE", "ode-per-seed": "ODE per seed"}[report["theory"]]
    z = v["mean"]["z_max"]
    ratio = v["std"]["ratio_mean"]
    return [
        f"mean risk: {_agree(v['mean']['agree'])}: largest |{name} − SGD| over time = "
        + (f"{z:.2f}" if z is not None else "n/a")
        + f" combined standard errors (at t = {v['mean']['t_z_max']:.3g}; agree if ≤ "
        f"{v['mean']['threshold']:g}); final {fin['risk_theory']:.4f} ± "
        f"{fin['risk_theory_sem']:.4f} ({name}) vs {fin['risk_sgd']:.4f} ± "
        f"{fin['risk_sgd_sem']:.4f} (SGD)",
        f"std of the risk: {_agree(v['std']['agree'])}: {name}/SGD averaged over t > 0 = "
        f"{ratio:.3f} (agree if within {100 * v['std']['tolerance']:.0f}% of 1)",
        f"escape times: {_agree(v['escape']['agree'])}: two-sample KS p = "
        f"{v['escape']['ks_p']:.3g} (agree if ≥ {v['escape']['level']:g}); escaped "
        f"{report['escape']['theory_escaped']}/{report['paths']} ({name}), "
        f"{report['escape']['sgd_escaped']}/{report['seeds']} (SGD); never-escaped runs "
        "count as +inf",
        f"overall: theory and simulation {'agree' if v['all'] else 'DISAGREE'}",
    ]
