"""`headflow escape CONFIG`: escape times versus D against the linear-stability prediction."""

from __future__ import annotations

import argparse


from dynamics import ConfigError
from dynamics.measures import ESCAPE_THRESHOLD

from .._json import write as write_json
from .._rundir import run_dir
from ..experiments.escape import escape_study
from ..plots.phases import plot_escape
from ._common import (add_config_args, checked, config_from_args, out_dir, positive_float,
                      positive_int, replace_out, show_progress)


def dims_list(text: str) -> list[int]:
    """`"250,500,1000"` → `[250, 500, 1000]` (at least two distinct dimensions ≥ 2)."""
    try:
        dims = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") \
            from None
    if len(set(dims)) < 2 or min(dims) < 2:
        raise argparse.ArgumentTypeError(f"need at least two distinct dimensions >= 2, got "
                                         f"{text!r}")
    return sorted(set(dims))


EXAMPLE = "headflow escape validation/configs/escape.toml --dims 250,500,1000 --seeds 16"
"""Shown at the end of `--help`."""


def register(sub) -> None:
    p = sub.add_parser("escape", help="escape times vs D against the linear-stability "
                       "prediction (--dims, --seeds)",
                       description="Run online SGD at each D of --dims over --seeds, measure "
                       "the escape time from the unspecialized plateau of every run, fit its "
                       "slope in ln D with a 95%% interval, and compare it with the slope "
                       "predicted by the tangent-linear equation along the symmetric "
                       "trajectory (escape.json, escape.npz, escape.png). See docs/phases.md.")
    add_config_args(p)
    p.add_argument("--dims", type=dims_list, default=[250, 500, 1000, 2000, 4000],
                   help="comma-separated dimensions D (default 250,500,1000,2000,4000)")
    p.add_argument("--seeds", type=positive_int, help="seeds per D (overrides sim.seeds)")
    p.add_argument("--t-max", type=positive_float, dest="t_max",
                   help="how long to run (overrides training.t_max); runs that have not "
                   "escaped by then are reported as censored")
    p.add_argument("--threshold", type=positive_float, default=ESCAPE_THRESHOLD,
                   help=f"head-spread level of the escape (default {ESCAPE_THRESHOLD})")
    p.add_argument("--n-times", type=positive_int, default=121, dest="n_times",
                   help="save points of the linear-stability integration (default 121)")
    p.add_argument("--engine-field", action="store_true",
                   help="use the engine's Monte Carlo nodes instead of the head-permutation-"
                   "closed ones for the linear stability (not exactly equivariant)")
    p.set_defaults(func=run)


def run(args) -> dict:
    cfg = config_from_args(args, seeds="sim.seeds", t_max="training.t_max")
    if cfg.model.H < 2:
        raise ConfigError(f"model.H = {cfg.model.H}: escape times need at least 2 heads")
    out = out_dir(args, "escape", cfg, extra=f"{args.dims}{args.threshold}")
    if args.check:
        return checked(args, out)
    with run_dir(out, replace=replace_out(args), command="escape", config_toml=cfg.to_toml(),
                 meta={"dims": args.dims, "seeds": cfg.sim.seeds,
                       "dtype": {"sgd": cfg.sim.run_dtype, "ode": "float64"}}) as rd:
        with rd.timed("escape"):
            report, arrays = escape_study(cfg, args.dims, cfg.sim.seeds,
                                          threshold=args.threshold, n_times=args.n_times,
                                          equivariant=not args.engine_field,
                                          progress=show_progress())
        rd.save_npz("escape.npz", arrays)
        write_json(rd.path("escape.json"), report)
        plot_escape(rd.path("escape.png"), report, arrays)
    lo, hi = report["slope_ci"]
    lam = report["lambda"]
    print(f"escape slope in ln D: measured {report['slope_measured']:.3f} "
          f"[{lo:.3f}, {hi:.3f}] (95%), predicted {report['slope_predicted']:.3f} "
          f"(λ_eff = {'–' if lam is None else f'{lam:.3f}'}); censored runs per D: "
          f"{report['censored']}")
    if report["agrees"] is None:
        print(f"no verdict: {report['agrees_reason']}")
    if any(report["censored"]):
        print("warning: some runs had not escaped by t_max (left out of the fit, which biases "
              "the large-D means low); raise --t-max")
    return {**report, "out": str(out)}
