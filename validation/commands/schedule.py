"""`headflow schedule CONFIG --budget T`: a learning-rate schedule designed on the ODE and
checked in SGD against the best constant η."""

from __future__ import annotations

import argparse
import math
import sys

from ._common import (add_config_args, checked, config_from_args, in_range, out_dir,
                      positive_float, positive_int, replace_out, show_progress)

DIM, SEEDS = 2000, 8
"""Default dimension and seeds of the SGD check (`--dim`, `--seeds`)."""

EXAMPLE = "headflow schedule validation/configs/demo.toml --budget 100 --knots 6"
"""Shown at the end of `--help`."""


def _lr_range(text: str) -> tuple[float, float]:
    try:
        lo, hi = (float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LOW,HIGH (two numbers), got {text!r}"
                                         ) from None
    if not (0 < lo < hi < math.inf and in_range(hi)):
        raise argparse.ArgumentTypeError(f"expected 0 < LOW < HIGH, got {text!r}")
    return lo, hi


def register(sub) -> None:
    p = sub.add_parser("schedule", help="design a learning-rate schedule on the ODE, check it "
                       "in SGD (--budget T)",
                       description="Find the best constant η for the risk at t = T on the ODE "
                       "(bounded 1-D search), optimize a schedule η(t) (piecewise linear in "
                       "log t on K knots) through the differentiable ODE with Adam, then run "
                       "both in SGD at --dim over --seeds. Writes schedule.json, schedule.npz, "
                       "schedule.png, config.toml and meta.json. See docs/differentiable.md.")
    add_config_args(p)
    p.add_argument("--budget", type=positive_float, required=True,
                   help="T: the time (steps/D) at which the risk is minimized (sets "
                   "training.t_max)")
    p.add_argument("--knots", type=positive_int, default=6, help="K knots of the schedule "
                   "(log-spaced from T/100 to T; default 6)")
    p.add_argument("--dim", type=positive_int, default=None, help="D of the SGD check "
                   f"(default {DIM}, or sim.dim when given with --set)")
    p.add_argument("--seeds", type=positive_int, default=None, help=f"SGD seeds (default "
                   f"{SEEDS}, or sim.seeds when given with --set)")
    p.add_argument("--steps", type=positive_int, default=40,
                   help="Adam steps on the schedule (default 40)")
    p.add_argument("--design-samples", type=positive_int, default=2048, dest="design_samples",
                   help="ODE nodes during the design (default 2048; the final curves use "
                   "[ode] samples)")
    p.add_argument("--lr-range", type=_lr_range, default=None, dest="lr_range",
                   metavar="LOW,HIGH", help="bounds of the constant-η search (default "
                   "training.lr/100, 4·training.lr)")
    p.set_defaults(func=run)


def run(args) -> dict:
    import numpy as np

    from headflow.dynamics import HeadflowError

    from .._json import write as write_json
    from .._rundir import run_dir
    from ..experiments.schedule import design_schedule
    from ..plots.schedule import plot_schedule

    given = {item.partition("=")[0].strip() for item in args.set}
    for attr, key, default in (("dim", "sim.dim", DIM), ("seeds", "sim.seeds", SEEDS)):
        if getattr(args, attr) is None and key not in given:
            setattr(args, attr, default)
    cfg = config_from_args(args, budget="training.t_max", dim="sim.dim", seeds="sim.seeds")
    args.dim, args.seeds = cfg.sim.dim, cfg.sim.seeds
    if args.knots < 2:
        raise HeadflowError(f"--knots {args.knots}: need at least 2 knots")
    extra = f"budget={args.budget} knots={args.knots} steps={args.steps} " \
            f"design={args.design_samples} range={args.lr_range}"
    out = out_dir(args, "schedule", cfg, extra)
    if args.check:
        return checked(args, out)
    quiet = args.json and not sys.stderr.isatty()

    def log(msg: str) -> None:
        print(msg, file=sys.stderr if quiet else sys.stdout, flush=True)

    with run_dir(out, replace=replace_out(args), command="schedule", config_toml=cfg.to_toml(),
                 meta={"dtype": cfg.sim.run_dtype, "ode_dtype": "float64",
                       "seeds": list(range(cfg.sim.seed,
                                                               cfg.sim.seed + args.seeds))}
                 ) as rd:
        with rd.timed("schedule"):
            res = design_schedule(cfg, budget=args.budget, knots=args.knots, dim=args.dim,
                                  seeds=args.seeds, steps=args.steps,
                                  design_samples=args.design_samples, lr_range=args.lr_range,
                                  progress=show_progress(), log=log)
        summary = {**res.summary(), "budget": args.budget, "out": str(out)}
        eta = np.asarray([float(res.schedule(t)) for t in res.t])
        rd.save_npz("schedule.npz", {
            "t": res.t, "lr_schedule": eta, "knot_times": np.asarray(res.schedule.times),
            "knot_values": np.asarray(res.schedule.values), "ode_constant": res.ode_constant,
            "ode_schedule": res.ode_schedule, "sgd_constant": res.sgd_constant,
            "sgd_schedule": res.sgd_schedule, "history": res.history, "search": res.search})
        write_json(rd.path("schedule.json"), summary)
        plot_schedule(rd.path("schedule.png"), res.t, lr_constant=res.lr_constant,
                      lr_schedule=eta, ode_constant=res.ode_constant,
                      ode_schedule=res.ode_schedule, sgd_constant=res.sgd_constant,
                      sgd_schedule=res.sgd_schedule,
                      title=f"schedule vs best constant η, T = {args.budget:g}, SGD D = "
                      f"{res.dim}, {res.seeds} seeds")
    log(f"ODE risk at T: constant {summary['risk_constant_ode']:.6g}, schedule "
        f"{summary['risk_schedule_ode']:.6g}; SGD: constant {summary['sgd_risk_constant']:.6g}"
        f" ± {summary['sgd_risk_constant_sem']:.2g}, schedule "
        f"{summary['sgd_risk_schedule']:.6g} ± {summary['sgd_risk_schedule_sem']:.2g}")
    return summary
