"""`headflow ode CONFIG`: integrate the order-parameter ODEs."""

from __future__ import annotations

from ._common import (add_config_args, checked, config_from_args, describe_model, out_dir,
                      replace_out, show_progress)


EXAMPLE = "headflow ode validation/configs/demo.toml --set ode.rhs=symbolic"
"""Shown at the end of `--help`."""


def register(sub) -> None:
    p = sub.add_parser("ode", help="integrate the order-parameter ODEs",
                       description="Integrate the order-parameter ODEs (diffrax, float64) from "
                       "[ode] init; writes ode.npz, ode.png, config.toml and meta.json.")
    add_config_args(p)
    p.set_defaults(func=run, replay=True)     # a repeated run is copied (validation._results)


def run(args) -> dict:
    from headflow.dynamics.ode import run_ode

    from .._results import store
    from .._rundir import default_out, run_dir
    from ..plots.trajectories import plot_trajectories

    cfg = config_from_args(args)
    out = out_dir(args, "ode", cfg)
    if args.check:
        return checked(args, out)
    with run_dir(out, replace=replace_out(args), command="ode", config_toml=cfg.to_toml(),
                 meta={"dtype": "float64"}) as rd:
        with rd.timed("ode"):
            res = run_ode(cfg, progress=show_progress())
        rd.wall.update({f"ode.{k}": v for k, v in res.phases.items()})
        rd.meta["solver_steps"] = res.num_steps
        rd.meta["ode_compile_s"] = round(res.compile_s, 4)   # tracing + compilation
        rd.meta["ode_run_s"] = round(res.run_s, 4)           # the integration itself
        rd.meta["accuracy"] = res.accuracy                   # nodes and the field's error
        rd.meta["solver_rejected"] = res.num_rejected
        with rd.timed("write"):
            arrays = res.arrays()
            rd.save_npz("ode.npz", arrays)
        with rd.timed("figure"):
            plot_trajectories(rd.path("ode.png"), arrays["t"], ode=arrays,
                              title=f"order-parameter ODE, {describe_model(cfg)}"
                              + (f" ({cfg.ode.form} form)" if cfg.model_kind == "attention"
                                 else ""))
    summary = {"risk_final": float(arrays["risk"][-1]), "risk_final_err":
               float(arrays["risk_err"][-1]), "out": str(out)}
    store(args, out, summary, default_out("ode", cfg.to_toml()))
    return summary
