"""`headflow sgd CONFIG`: finite-D online SGD over seeds."""

from __future__ import annotations

from ._common import (add_config_args, checked, config_from_args, describe_model, out_dir,
                      positive_int, replace_out, show_progress)


EXAMPLE = "headflow sgd validation/configs/demo.toml --dim 500 --seeds 4"
"""Shown at the end of `--help`."""


def register(sub) -> None:
    p = sub.add_parser("sgd", help="finite-D online SGD (--dim, --seeds)",
                       description="Online SGD of the configured model (the attention model, or "
                       "[model] kind = 'committee') at dimension D over several seeds, in "
                       "weight space or exactly in overlap space (sim.space); writes sgd.npz, "
                       "a figure, config.toml and meta.json.")
    add_config_args(p)
    p.add_argument("--dim", type=positive_int, help="D (overrides sim.dim)")
    p.add_argument("--seeds", type=positive_int, help="number of seeds (overrides sim.seeds)")
    p.set_defaults(func=run)


def run(args) -> dict:
    import numpy as np

    from headflow.sims import run_sgd

    from .._rundir import run_dir
    from ..plots.trajectories import plot_trajectories

    cfg = config_from_args(args, dim="sim.dim", seeds="sim.seeds")
    out = out_dir(args, "sgd", cfg)
    if args.check:
        return checked(args, out)
    with run_dir(out, replace=replace_out(args), command="sgd", config_toml=cfg.to_toml(),
                 meta={"dtype": cfg.sim.run_dtype, "seeds": list(range(cfg.sim.seed, cfg.sim.seed
                                                                    + cfg.sim.seeds))}) as rd:
        with rd.timed("sgd"):
            res = run_sgd(cfg, progress=show_progress())
        arrays = res.arrays()
        rd.save_npz("sgd.npz", arrays)
        plot_trajectories(rd.path("sgd.png"), arrays["t"], sgd=arrays,
                          title=f"online SGD, D={res.dim}, {len(res.seeds)} seeds, "
                          f"{describe_model(cfg)}")
    final = arrays["risk"][:, -1]
    return {"risk_final": float(final.mean()),
            "risk_final_sem": float(final.std(ddof=1) / np.sqrt(len(final)))
            if len(final) > 1 else float(arrays["risk_err"][0, -1]),
            "dim": res.dim, "seeds": len(res.seeds), "out": str(out)}
