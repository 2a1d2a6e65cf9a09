"""`headflow phases CONFIG`: the phases and specialization stages of one run, ODE and SGD."""

from __future__ import annotations

from ._common import (add_config_args, checked, config_from_args, describe_model, out_dir,
                      positive_float, positive_int, replace_out, require_units, show_progress)
from ._light import ESCAPE_THRESHOLD


EXAMPLE = "headflow phases validation/configs/staged.toml"
"""Shown at the end of `--help`."""


def register(sub) -> None:
    p = sub.add_parser("phases", help="phases and specialization stages of one run (ODE and "
                       "SGD)",
                       description="Run online SGD at --dim over --seeds and the ODE started "
                       "from the measured initial overlaps of the first seed; detect the "
                       "unspecialized plateau (entry, exit), the specialization stages (time, "
                       "feature, which heads went which way) and the excursions of each run "
                       "(phases.json, phases_ode.png, phases_sgd.png, sgd.npz, ode.npz). "
                       "Heads are the model's student units and features the teacher's "
                       "directions (committee: hidden units, alignment R/√Q). Definitions: "
                       "docs/phases.md, docs/committee.md.")
    add_config_args(p)
    p.add_argument("--dim", type=positive_int, help="D (overrides sim.dim)")
    p.add_argument("--seeds", type=positive_int, help="number of seeds (overrides sim.seeds)")
    p.add_argument("--threshold", type=positive_float, default=ESCAPE_THRESHOLD,
                   help=f"alignment-difference threshold θ (default {ESCAPE_THRESHOLD})")
    p.add_argument("--no-sgd", action="store_true",
                   help="ODE only, from a random start at sim.dim ([ode] init)")
    p.add_argument("--engine-field", action="store_true",
                   help="integrate with the engine's nodes instead of head-permutation-closed "
                   "ones (see docs/phases.md; attention model only)")
    p.set_defaults(func=run)


def run(args) -> dict:
    import jax

    from headflow.dynamics import ConfigError
    from headflow.dynamics.measures import alignment
    from headflow.sims import run_sgd

    from .._json import write as write_json
    from .._rundir import run_dir
    from ..experiments.phases import layout_phases, ode_phases_checked, seed_summary
    from ..plots.phases import alignment_labels, plot_phases

    cfg = config_from_args(args, dim="sim.dim", seeds="sim.seeds")
    require_units(cfg, "phases need")
    attention = cfg.model_kind == "attention"
    if attention and cfg.ode.form != "manifold":
        raise ConfigError("phases integrates the manifold ODE (ode.form = 'manifold')")
    if not attention and args.engine_field:
        raise ConfigError("--engine-field: chooses the nodes of the attention model's manifold "
                          f"field; model.kind = {cfg.model_kind!r} integrates its configured "
                          "field ([ode] expectation)")
    model = cfg.build_model()
    layout = model.layout
    a_name, g_name = layout.alignment
    _, feature, _ = alignment_labels(layout)
    theta = args.threshold
    out = out_dir(args, "phases", cfg, extra=f"{theta}{args.no_sgd}{args.engine_field}")
    times = cfg.save_times()
    summary: dict = {"threshold": theta, "dim": cfg.sim.dim}
    if attention:
        summary["equivariant_field"] = not args.engine_field
    else:
        summary.update(model_kind=cfg.model_kind, alignment=[a_name, g_name],
                       ode_expectation=cfg.ode.expectation)
    units = (f"{cfg.model.H} {cfg.model.activation} heads" if attention
             else describe_model(cfg))
    if args.check:
        return checked(args, out)
    with run_dir(out, replace=replace_out(args), command="phases", config_toml=cfg.to_toml(),
                 meta={"dtype": {"sgd": cfg.sim.run_dtype, "ode": "float64"}}) as rd:
        ov0 = None
        if not args.no_sgd:
            with rd.timed("sgd"):
                sgd = run_sgd(cfg, progress=show_progress(), times=times)
            sa = sgd.arrays()
            rd.save_npz("sgd.npz", sa)
            ov0 = jax.tree.map(lambda x: x[0, 0], sgd.overlaps)
            per_seed = [layout_phases(sa["t"], {k: v[i] for k, v in sa.items()
                                                if k not in ("t", "steps", "seeds")},
                                      layout, threshold=theta,
                                      observable=model.escape_observable)
                        for i in range(len(sgd.seeds))]
            summary["sgd"] = {**seed_summary(per_seed), "seeds_list": list(sgd.seeds),
                              "per_seed": [p.to_dict() for p in per_seed]}
            plot_phases(rd.path("phases_sgd.png"), sa["t"], sa["risk"][0],
                        alignment(sa[a_name][0], sa[g_name][0]), per_seed[0],
                        title=f"SGD seed {sgd.seeds[0]}, D = {sgd.dim}, {units}", layout=layout)
        with rd.timed("ode"):
            oa, ph, verdict = ode_phases_checked(cfg, ov0, times,
                                                 equivariant=not args.engine_field,
                                                 threshold=theta, progress=show_progress())
        rd.save_npz("ode.npz", oa)
        summary["ode"] = ph.to_dict()
        if verdict is not None:
            summary["ode_stage_order_verdict"] = verdict.summary()
        start = "SGD seed 0's measured initial overlaps" if ov0 is not None else \
            f"a random start at D = {cfg.sim.dim}"
        plot_phases(rd.path("phases_ode.png"), oa["t"], oa["risk"],
                    alignment(oa[a_name], oa[g_name]), ph, title=f"ODE from {start}, {units}",
                    layout=layout)
        write_json(rd.path("phases.json"), summary)
    o = summary["ode"]
    line = (f"ODE: plateau {_fmt(o['plateau_entry'])} → {_fmt(o['plateau_exit'])}, stages "
            + (", ".join(f"{feature}{s['feature']} at t={s['time']:.2f} (+{s['plus']} / "
                         f"−{s['minus']})" for s in o["stages"]) or "none"))
    print(line)
    if verdict is not None:
        print("ODE " + verdict.line())
    if "sgd" in summary:
        s = summary["sgd"]
        print(f"SGD: {s['escaped']}/{s['seeds']} seeds escaped, exit "
              f"{_fmt(s['plateau_exit_mean'])} ± {_fmt(s['plateau_exit_sem'])}; stage orders "
              f"{s['stage_orders']}")
    compact = {k: v for k, v in summary.items() if k != "sgd"}
    if "sgd" in summary:
        compact["sgd"] = {k: v for k, v in summary["sgd"].items() if k != "per_seed"}
    return {**compact, "stage_order_ode": o["stage_order"], "out": str(out)}


def _fmt(x) -> str:
    return "–" if x is None else f"{x:.2f}"
