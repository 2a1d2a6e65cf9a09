"""`headflow sweep CONFIG --grid section.key=v1,v2,...`: a vectorized grid of ODE runs."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ._common import (add_config_args, checked, config_from_args, describe_model, out_dir,
                      positive_float, positive_int, replace_out, show_progress)
from ._light import ESCAPE_THRESHOLD

if TYPE_CHECKING:
    import numpy as np


EXAMPLE = ("headflow sweep validation/configs/escape.toml --grid training.lr=0.5,1 "
           "--grid prior.amplitude=5,7")
"""Shown at the end of `--help`."""


def register(sub) -> None:
    p = sub.add_parser("sweep", help="vectorized grid of ODE runs (--grid section.key=v1,v2,"
                       "..., repeatable), sharded over the available devices",
                       description="Integrate the manifold ODE at every point of the cartesian "
                       "grid given by the --grid options, vectorized (jax.vmap) over the points "
                       "and sharded over the available devices; classify the phase reached at "
                       "t_max (no learning / unspecialized plateau / specialized / diverging). "
                       "Writes sweep.npz, sweep.json, sweep.png and, with two or more grid "
                       "axes, phase_diagram.png (first two axes). See docs/phases.md.")
    add_config_args(p)
    p.add_argument("--grid", metavar="SECTION.KEY=V1,V2,...", action="append", default=[],
                   required=True, help="one grid axis (repeatable); values in TOML syntax")
    p.add_argument("--max-steps", type=positive_int, dest="max_steps", default=None,
                   help="solver steps per point (default ode.max_steps)")
    p.add_argument("--diverge-at", type=positive_float, dest="diverge_at", default=1e3,
                   help="stop a point and mark it diverging when |q| or |s| exceeds this "
                   "(default 1000)")
    p.add_argument("--threshold", type=positive_float, default=ESCAPE_THRESHOLD,
                   help=f"alignment threshold θ of the classification (default "
                   f"{ESCAPE_THRESHOLD})")
    p.set_defaults(func=run)


def run(args) -> dict:
    from .._json import write as write_json
    from .._rundir import run_dir
    from ..experiments.phase_diagram import class_names, classify
    from ..experiments.sweep import STATUS, parse_grid, run_sweep

    cfg = config_from_args(args)
    axes = parse_grid(args.grid, cfg)
    out = out_dir(args, "sweep", cfg, extra=repr(axes) + f"{args.diverge_at}{args.threshold}")
    if args.check:
        return checked(args, out)
    with run_dir(out, replace=replace_out(args), command="sweep", config_toml=cfg.to_toml(),
                 meta={"grid": {k: v for k, v in axes}, "dtype": "float64"}) as rd:
        with rd.timed("sweep"):
            res = run_sweep(cfg, axes, max_steps=args.max_steps, diverge_at=args.diverge_at,
                            progress=show_progress())
        classes, escape = classify(res, args.threshold)
        final = res.risk[:, -1]
        rd.save_npz("sweep.npz", {
            "t": res.t, "risk": res.risk, "status": res.status, "phase": classes,
            "escape_time": escape, "steps": res.steps,
            **{f"axis_{i}": _axis_array(v) for i, (_, v) in enumerate(axes)}, **res.arrays})
        points = [{"overrides": p, "status": STATUS[int(s)], "phase": c,
                   "final_risk": _num(r), "escape_time": _num(e)}
                  for p, s, c, r, e in zip(res.overrides, res.status, class_names(classes),
                                           final, escape)]
        summary = {"axes": {k: v for k, v in axes}, "shape": list(res.shape),
                   "points": len(points), "final_risk": [_num(r) for r in final],
                   "phase": class_names(classes), "escape_time": [_num(e) for e in escape],
                   "status": [STATUS[int(s)] for s in res.status]}
        write_json(rd.path("sweep.json"), {**summary, "grid": points})
        numeric = [(k, v) for k, v in axes if _numeric(v)]
        with rd.timed("figures"):
            if len(numeric) == len(axes):
                _figures(rd, cfg, axes, res, final, classes, escape)
    counts = {name: class_names(classes).count(name) for name in sorted(set(class_names(classes)))}
    print(f"sweep: {len(points)} points; phases {counts}")
    return {**summary, "out": str(out)}


def _figures(rd, cfg, axes, res, final, classes, escape) -> None:
    """The risk at `t_max` over the grid and, for two or more axes, the phase diagram of the
    first two."""
    from ..plots.phases import plot_phase_diagram, plot_sweep

    plot_sweep(rd.path("sweep.png"), axes, final, label="risk at t_max")
    if len(axes) >= 2:
        (k1, v1), (k2, v2) = axes[:2]
        cls = classes.reshape(res.shape).reshape(len(v1), len(v2), -1)[..., 0]
        esc = escape.reshape(res.shape).reshape(len(v1), len(v2), -1)[..., 0]
        plot_phase_diagram(rd.path("phase_diagram.png"), k1, v1, k2, v2, cls, esc,
                           title=f"{describe_model(cfg)}, D = {cfg.sim.dim}, phase at t = "
                           f"{cfg.training.t_max:g}")


def _axis_array(values) -> np.ndarray:
    import numpy as np

    return (np.asarray(values, dtype=float) if _numeric(values)
            else np.asarray([str(x) for x in values]))


def _numeric(values) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def _num(x):
    x = float(x)
    return x if math.isfinite(x) else None
