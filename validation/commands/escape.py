"""`headflow escape CONFIG`: escape times versus D against the parameter-free SDE prediction
and the linear-stability prediction (calibrated, and parameter-free)."""

from __future__ import annotations

import argparse
import math

from ._common import (MAX_COUNT, add_config_args, check_dims, checked, config_from_args,
                      no_repeats, out_dir, positive_float, positive_int, replace_out,
                      require_units, show_progress, split_items)
from ._light import ESCAPE_THRESHOLD, EXTRAPOLATE


def dims_list(text: str) -> list[int]:
    """`"250,500,1000"` → `[250, 500, 1000]` (at least two distinct dimensions ≥ 2, at most
    `MAX_COUNT`; no empty or repeated item)."""
    try:
        dims = [int(x) for x in split_items(text, "comma-separated integers")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") \
            from None
    if len(set(dims)) < 2 or min(dims) < 2:
        raise argparse.ArgumentTypeError(f"need at least two distinct dimensions >= 2, got "
                                         f"{text!r}")
    if max(dims) > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"dimensions must be <= {MAX_COUNT}, got {text!r}")
    return sorted(no_repeats(dims, text))


def extrapolate_list(text: str) -> list[int]:
    """`"10000,100000"` → `[10000, 100000]`; `""` → `[]` (no extrapolation). Every dimension
    must be an integer ≥ 2 and at most `MAX_COUNT`; no empty or repeated item."""
    try:
        dims = [int(x) for x in split_items(text, "comma-separated integers (or nothing)",
                                            allow_empty=True)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers (or nothing), got "
                                         f"{text!r}") from None
    if dims and (min(dims) < 2 or max(dims) > MAX_COUNT):
        raise argparse.ArgumentTypeError(f"dimensions must be >= 2 and <= {MAX_COUNT}, got "
                                         f"{text!r}")
    return sorted(no_repeats(dims, text))


N_TIMES = 121
"""Default save points of the linear-stability integration (`--n-times`)."""

EXAMPLE = "headflow escape validation/configs/escape.toml --dims 250,500,1000 --seeds 16"
"""Shown at the end of `--help`."""


def register(sub) -> None:
    p = sub.add_parser("escape", help="escape times vs D against the SDE and the "
                       "linear-stability predictions (--dims, --seeds, --paths)",
                       description="Run online SGD at each D of --dims over --seeds, measure "
                       "the escape time from the unspecialized plateau of every run, fit its "
                       "slope in ln D with a 95% interval, and compare with the parameter-free "
                       "prediction of the overlaps' SDE (--paths paths at each D and at the "
                       "--extrapolate dimensions; no fitted constant) and with the "
                       "tangent-linear prediction along the symmetric trajectory (calibrated: "
                       "one fitted offset; parameter-free: from the initial perturbation "
                       "alone). Heads are the model's student units "
                       "(committee: hidden units, alignment R/√Q). Writes escape.json, "
                       "escape.npz, escape.png. With every default on "
                       "validation/configs/escape.toml (D = 250…4000, 16 seeds, 64 SDE paths at "
                       "each of 8 dimensions) it takes about 16 minutes on two CPU cores, 14 of "
                       "them for the SDE paths (--no-sde, fewer --paths or an empty "
                       "--extrapolate shorten it). See docs/phases.md, docs/sde.md and "
                       "docs/committee.md.")
    add_config_args(p)
    p.add_argument("--dims", type=dims_list, default=[250, 500, 1000, 2000, 4000],
                   help="comma-separated dimensions D (default 250,500,1000,2000,4000)")
    p.add_argument("--seeds", type=positive_int, help="seeds per D (overrides sim.seeds)")
    p.add_argument("--t-max", type=positive_float, dest="t_max",
                   help="how long to run (overrides training.t_max); runs that have not "
                   "escaped by then are reported as censored")
    p.add_argument("--threshold", type=positive_float, default=ESCAPE_THRESHOLD,
                   help=f"head-spread level of the escape (default {ESCAPE_THRESHOLD})")
    p.add_argument("--n-times", type=positive_int, default=None, dest="n_times",
                   help=f"save points of the linear-stability integration (default {N_TIMES})")
    p.add_argument("--paths", type=positive_int,
                   help="SDE paths per D (overrides sde.paths)")
    p.add_argument("--extrapolate", type=extrapolate_list,
                   default=list(EXTRAPOLATE), metavar="D1,D2,...",
                   help="dimensions beyond SGD's reach at which to run the SDE too (default "
                   + ",".join(str(d) for d in EXTRAPOLATE) + "; empty to skip)")
    p.add_argument("--no-sde", action="store_true", dest="no_sde",
                   help="skip the SDE prediction (only SGD and the linear stability)")
    p.add_argument("--engine-field", action="store_true",
                   help="use the engine's Monte Carlo nodes instead of the head-permutation-"
                   "closed ones for the linear stability (not exactly equivariant; attention "
                   "model only)")
    p.set_defaults(func=run)


def run(args) -> dict:
    from headflow.dynamics import ConfigError

    from .._json import write as write_json
    from .._rundir import run_dir
    from ..experiments.escape import escape_study, linear_theory_reason
    from ..plots.phases import plot_escape

    cfg = config_from_args(args, seeds="sim.seeds", t_max="training.t_max", paths="sde.paths")
    if cfg.model_kind == "attention":   # the head spread needs two heads; a single student of
        require_units(cfg, "escape times need")   # the family escapes by its alignment
    reason = linear_theory_reason(cfg)
    if reason is not None:
        for flag, given in (("--n-times", args.n_times is not None),
                            ("--engine-field", args.engine_field)):
            if given:
                raise ConfigError(f"{flag}: sets the linear-stability prediction, which is "
                                  f"not computed for model.kind = {cfg.model_kind!r}")
    if args.engine_field and cfg.model_kind != "attention":
        raise ConfigError("--engine-field: chooses the nodes of the attention model's manifold "
                          f"field; model.kind = {cfg.model_kind!r} uses its own field")
    n_times = N_TIMES if args.n_times is None else args.n_times
    sde = not args.no_sde
    extrapolate = args.extrapolate if sde else []
    check_dims(cfg, [*args.dims, *extrapolate])
    if sde and cfg.sde.dt > cfg.training.t_max:
        raise ConfigError(f"sde.dt = {cfg.sde.dt}: must be <= training.t_max")
    paths = cfg.sde.paths if sde else None
    out = out_dir(args, "escape", cfg, extra=f"{args.dims}{args.threshold}"
                  + (f"sde{extrapolate}" if sde else ""))
    if args.check:
        return checked(args, out)
    with run_dir(out, replace=replace_out(args), command="escape", config_toml=cfg.to_toml(),
                 meta={"dims": args.dims, "seeds": cfg.sim.seeds, "sde_paths": paths,
                       "extrapolate": extrapolate,
                       "dtype": {"sgd": cfg.sim.run_dtype, "ode": "float64",
                                 "sde": "float64"}}) as rd:
        with rd.timed("escape"):
            report, arrays = escape_study(cfg, args.dims, cfg.sim.seeds,
                                          threshold=args.threshold, n_times=n_times,
                                          equivariant=not args.engine_field,
                                          sde_paths=paths, extrapolate=extrapolate,
                                          progress=show_progress())
        if sde:
            rd.meta["sde"] = {**report["sde_settings"], "wall_s": report["wall_s"]["sde"]}
        rd.save_npz("escape.npz", arrays)
        write_json(rd.path("escape.json"), report)
        plot_escape(rd.path("escape.png"), report, arrays)
    for line in summary_lines(report):
        print(line)
    return {**report, "out": str(out)}


def _num(x: float | None, digits: int = 3) -> str:
    """A number for the text report; `–` for None, `>t_max` for +∞ (a censored quantile)."""
    if x is None:
        return "–"
    if math.isinf(x):
        return ">t_max"
    return f"{x:.{digits}f}"


def _interval(ci: list | None) -> str:
    return "[–]" if ci is None else f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def _yes(v: bool | None) -> str:
    return "–" if v is None else ("yes" if v else "NO")


def _stats_line(label: str, mean, q: dict, escaped_fraction, censored: int) -> str:
    return (f"  {label}: SDE mean {_num(mean)}, median {_num(q['0.5'])}, 10–90% "
            f"[{_num(q['0.1'])}, {_num(q['0.9'])}], escaped {escaped_fraction:.2f}"
            + (f" ({censored} censored)" if censored else ""))


def summary_lines(report: dict) -> list[str]:
    """The text report of an escape study (slopes, per-D statistics, verdict, warnings)."""
    lines = []
    lo, hi = report["slope_ci"]
    lam = report["lambda"]
    sde = report.get("sde", False)
    head = (f"escape slope in ln D: measured {report['slope_measured']:.3f} [{lo:.3f}, {hi:.3f}]"
            " (95%)")
    if sde:
        head += (f"; SDE (parameter-free) {_num(report['slope_sde'])} "
                 f"{_interval(report['slope_sde_ci'])} (95%, {report['paths_sde']} paths per D)")
    lines.append(head)
    linear = report.get("linear_stability", True)
    if linear:
        lines.append(f"  calibrated linear stability (offset c' = {report['offset']:.3f} fitted "
                     f"to the measured means): slope {report['slope_predicted']:.3f} "
                     f"(λ_eff = {'–' if lam is None else f'{lam:.3f}'})")
        pf = report.get("escape_predicted_initial") or []
        lines.append(f"  parameter-free linear stability (c' = 0, the initial perturbation "
                     f"alone): slope {_num(report.get('slope_predicted_initial'))}, escape times "
                     + ", ".join(_num(x) for x in pf))
    else:
        lines.append(f"  {report['linear_stability_reason']}")
    for i, D in enumerate(report["dims"]):
        line = (f"  D = {D}: measured mean {_num(report['escape_mean'][i])} "
                f"{_interval(report['escape_ci'][i])} (95%), censored {report['censored'][i]}"
                f" of {report['seeds']}")
        if sde:
            q = report["escape_sde_quantiles"][i]
            line += (f"; SDE mean {_num(report['escape_sde_mean'][i])}, median "
                     f"{_num(q['0.5'])}, 10–90% [{_num(q['0.1'])}, {_num(q['0.9'])}], escaped "
                     f"{report['escape_sde_escaped_fraction'][i]:.2f}; inside: "
                     f"{_yes(report['agrees_sde_mean'][i])}")
        lines.append(line)
    if sde and report["extrapolation"]:
        lines.append("extrapolation (SDE only"
                     + ("; calibrated linear prediction in brackets):" if linear else "):"))
        for e in report["extrapolation"]:
            lines.append(_stats_line(f"D = {e['dim']}", e["mean"], e["quantiles"],
                                     e["escaped_fraction"], e["censored"])
                         + (f" [calibrated {_num(e['calibrated'])}]" if linear else ""))
    if sde:
        n_in = sum(v is True for v in report["agrees_sde_mean"])
        lines.append(f"verdict: SDE mean inside the measured 95% interval of the mean at {n_in} "
                     f"of {len(report['dims'])} D; SDE slope inside the measured slope's 95% "
                     f"interval: {_yes(report['agrees_sde_slope'])}")
        if report["slope_sde"] is None:
            lines.append(f"no SDE slope: {report['slope_sde_reason']}")
    if linear and report["agrees"] is None:
        lines.append(f"no verdict for the calibrated prediction: {report['agrees_reason']}")
    if any(report["censored"]):
        lines.append("warning: some SGD runs had not escaped by t_max (left out of the fit, "
                     "which biases the large-D means low); raise --t-max")
    if sde:
        cens = [(D, c) for D, c in zip(report["dims"], report["escape_sde_censored"]) if c]
        cens += [(e["dim"], e["censored"]) for e in report["extrapolation"] if e["censored"]]
        if cens:
            where = ", ".join(f"{c} of {report['paths_sde']} at D = {D}" for D, c in cens)
            lines.append(f"warning: SDE paths had not escaped by t_max = {report['t_max']:g} "
                         f"({where}); they are left out of the means and fits, which biases "
                         "those means low; raise --t-max")
        bad = [(D, k) for D, k in zip(report["dims"], report["sde_paths_invalid"]) if k]
        bad += [(e["dim"], e["paths_invalid"]) for e in report["extrapolation"]
                if e["paths_invalid"]]
        if bad:
            where = ", ".join(f"{k} at D = {D}" for D, k in bad)
            lines.append(f"warning: SDE paths left the PSD domain ({where}); they are kept; a "
                         "smaller sde.dt reduces this")
    return lines
