"""`headflow scaling CONFIG`: the distance of single SGD runs from the ODE against D, and its
slope in log-log (finite-size scaling)."""

from __future__ import annotations

from ._common import (add_config_args, check_dims, checked, config_from_args, out_dir, positive_int,
                      replace_out, show_progress)
from .escape import dims_list

EXAMPLE = ("headflow scaling validation/configs/theory_vs_sgd.toml --dims 250,500,1000,2000 "
           "--seeds 16")
"""Shown at the end of `--help`."""


def register(sub) -> None:
    p = sub.add_parser("scaling", help="ODE–SGD deviation vs D and its log-log slope (--dims)",
                       description="At every D of --dims, run SGD over --seeds and the ODE from "
                       "the seed mean of the measured initial overlaps; measure the RMS "
                       "distance of single runs' order parameters (those of the model's "
                       "layout: m, q, n, s, b for attention; Q, R, v for the committee) from "
                       "the ODE before the "
                       "escape (the pre-escape window of the smallest D, t > 0), fit its slope "
                       "in log D with a 95% interval and test it against -1/2. Writes "
                       "scaling.json, scaling.npz, scaling.png. See docs/ode.md.")
    add_config_args(p)
    p.add_argument("--dims", type=dims_list, default=[250, 500, 1000, 2000, 4000],
                   help="comma-separated dimensions D, at least three (default "
                   "250,500,1000,2000,4000)")
    p.add_argument("--seeds", type=positive_int, help="seeds per D (overrides sim.seeds)")
    p.add_argument("--weights-up-to", type=positive_int, dest="weights_up_to", metavar="D",
                   help="run SGD in weight space up to this D and as the exact overlap chain "
                   "above (default: the config's sim.space at every D)")
    p.set_defaults(func=run)


def run(args) -> dict:
    from headflow.dynamics import ConfigError

    from .._json import write as write_json
    from .._rundir import run_dir
    from ..experiments.scaling import scaling_study
    from ..plots.scaling import plot_scaling

    cfg = config_from_args(args, seeds="sim.seeds")
    if len(args.dims) < 3:
        raise ConfigError(f"--dims: need at least three dimensions for a slope interval, got "
                          f"{','.join(map(str, args.dims))}")
    check_dims(cfg, args.dims)
    if cfg.sim.seeds < 2:
        raise ConfigError("sim.seeds = 1: the deviation's spread and error bars need at least "
                          "2 seeds")
    out = out_dir(args, "scaling", cfg, extra=f"{args.dims}{args.weights_up_to}")
    if args.check:
        return checked(args, out)

    def on_dim(D: int, row: dict) -> None:
        print(f"D = {D} ({row['space']}): {row['sgd_escaped']}/{cfg.sim.seeds} seeds escaped; "
              f"final risk ODE {row['final_risk_ode']:.4f}, SGD {row['final_risk_sgd']:.4f} ± "
              f"{row['final_risk_sgd_sem']:.4f}; {row['wall_s']:.0f} s", flush=True)

    with run_dir(out, replace=replace_out(args), command="scaling", config_toml=cfg.to_toml(),
                 meta={"dims": args.dims, "seeds": cfg.sim.seeds,
                       "weights_up_to": args.weights_up_to,
                       "dtype": {"sgd": cfg.sim.run_dtype, "ode": "float64"}}) as rd:
        with rd.timed("scaling"):
            report, arrays = scaling_study(cfg, args.dims, weights_up_to=args.weights_up_to,
                                           progress=show_progress(), on_dim=on_dim)
        rd.save_npz("scaling.npz", arrays)
        write_json(rd.path("scaling.json"), report)
        plot_scaling(rd.path("scaling.png"), report, arrays)
    for line in summary_lines(report):
        print(line)
    return {**report, "out": str(out)}


def summary_lines(report: dict, *, verdict: bool = True) -> list[str]:
    """The text report: δ per D with its split, the slopes and (with `verdict`) the verdict."""
    from ..experiments.scaling import SLOPE_EXPECTED

    lines = []
    for i, D in enumerate(report["dims"]):
        lines.append(f"  D = {D}: delta {report['delta'][i]:.4e} ± {report['delta_se'][i]:.1e} "
                     f"= sqrt(bias² + spread²), bias {report['bias'][i]:.3e} (noise level "
                     f"{report['noise_level'][i]:.1e}), spread {report['spread'][i]:.3e}; RMS "
                     f"rel. risk deviation {report['risk_rms'][i]:.3e}; "
                     f"{report['points'][i]} saved times")
    lo, hi = report["slope_ci"]
    lines.append(f"slope of delta in ln D: {report['slope']:.3f} [{lo:.3f}, {hi:.3f}] "
                 f"({100 * report['level']:.0f}%), expected {SLOPE_EXPECTED:g}; window "
                 f"0 < t <= {report['t_window']:.4g}")
    slopes = [f"{name} {f['slope']:.3f} [{f['ci'][0]:.3f}, {f['ci'][1]:.3f}]"
              for name, f in (("RMS rel. risk deviation", report["fits"]["risk_rms"]),
                              ("spread", report["fits"]["spread"]),
                              ("bias", report["fits"]["bias"]))]
    lines.append("diagnostics (not the verdict), slopes: " + "; ".join(slopes))
    law = report["law"]
    lines.append(f"diagnostic (not the verdict), with the bootstrap errors of delta: weighted "
                 f"slope {law['weighted_slope']:.3f} ± {law['weighted_stderr']:.3f}; the law "
                 f"D^{SLOPE_EXPECTED:g} gives chi² = {law['chi2']:.2f} on {law['dof']} degrees "
                 f"of freedom, p = {law['p']:.2g}")
    if not verdict:
        return lines
    lines.append(f"verdict: the RMS distance of single SGD runs from the ODE falls as "
                 f"D^{SLOPE_EXPECTED:g} before the escape: "
                 f"{'reproduced' if report['reproduced'] else 'not reproduced'}")
    return lines
