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
                       "std over time with standard errors, escape-time quantiles and "
                       "KS distance; each verdict agree, disagree or not resolved at this "
                       "size; ensemble.npz, sde.npz). --theory ode: "
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
    from headflow.dynamics import ConfigError

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


def _why(v: dict) -> str:
    """The numbers behind one verdict: its confidence interval against the tolerance and the
    p-value of the same law."""
    if v["needs"] is None and v["word"] == "not resolved":
        return "fewer than two runs on a side"
    return (f"{100 * (1 - 2 * v['level']):.0f}% interval [{v['lower']:.3g}, {v['upper']:.3g}] "
            f"vs tolerance {v['tolerance']:.3g}, same-law p = {v['p']:.3g}")


def verdict_lines(report: dict) -> list[str]:
    """The three verdicts of an ensemble report, one line each in plain words with their
    numbers, and the overall one."""
    v, fin, esc = report["verdicts"], report["final"], report["escape"]
    name = {"sde": "SDE", "ode-per-seed": "ODE per seed"}[report["theory"]]
    m, s, e = v["mean"], v["std"], v["escape"]
    at = f" (at t = {m['t_gap']:.3g})" if m["t_gap"] is not None else ""
    ratio = f"{s['ratio']:.3f}" if s["ratio"] is not None else "n/a"
    return [
        f"mean risk: {m['phrase']}: the means differ by at most {m['statistic']:.3g} standard "
        f"deviations of a run{at}; {_why(m)}; final {fin['risk_theory']:.4f} ± "
        f"{fin['risk_theory_sem']:.4f} ({name}) vs {fin['risk_sgd']:.4f} ± "
        f"{fin['risk_sgd_sem']:.4f} (SGD)",
        f"spread of the risk: {s['phrase']}: {name}/SGD standard deviation {ratio} "
        f"(geometric mean over time; |log ratio| {s['statistic']:.3g}); {_why(s)}",
        f"escape times: {e['phrase']}: their distribution functions differ by at most "
        f"{e['statistic']:.3g} (KS distance); {_why(e)}; escaped "
        f"{esc['theory_escaped']}/{report['paths']} ({name}), "
        f"{esc['sgd_escaped']}/{report['seeds']} (SGD), a run that never escapes counting "
        "as +inf",
        f"overall: theory and simulation {v['all']}",
    ]
