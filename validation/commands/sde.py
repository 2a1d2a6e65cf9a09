"""`headflow sde CONFIG --dim D --paths N`: an ensemble of paths of the overlaps' SDE."""

from __future__ import annotations

import sys

from ._common import (add_config_args, checked, config_from_args, describe_model, out_dir,
                      positive_int, replace_out, show_progress)

EXAMPLE = ("headflow sde validation/configs/demo.toml --dim 1000 --paths 64 "
           "--set sde.samples_drift=4096")
"""Shown at the end of `--help`."""


def register(sub) -> None:
    p = sub.add_parser("sde", help="ensemble of paths of the overlaps' SDE at dimension D "
                       "(--dim, --paths)",
                       description="Integrate the diffusion (SDE) limit of the order "
                       "parameters at dimension D: each path starts from its own random "
                       "initialization at D and follows dΩ = F dt + D^(-1/2) Σ^(1/2) dW "
                       "([sde] solver, dt and nodes); writes sde.npz, sde.png (fan chart), "
                       "config.toml and meta.json. See docs/sde.md.")
    add_config_args(p)
    p.add_argument("--dim", type=positive_int, help="D (overrides sim.dim)")
    p.add_argument("--paths", type=positive_int, help="number of paths (overrides sde.paths)")
    p.set_defaults(func=run)


def run(args) -> dict:
    import numpy as np

    from headflow.dynamics import ConfigError, DivergenceError
    from headflow.dynamics.measures import escape_quantiles
    from headflow.dynamics.ode import BLOWUP
    from headflow.dynamics.sde import run_sde

    from .._rundir import run_dir
    from ..plots.fan import plot_fan

    cfg = config_from_args(args, dim="sim.dim", paths="sde.paths")
    if cfg.sde.dt > cfg.training.t_max:     # checked here: other commands ignore [sde]
        raise ConfigError(f"sde.dt = {cfg.sde.dt}: must be <= training.t_max")
    out = out_dir(args, "sde", cfg)
    if args.check:
        return checked(args, out)
    with run_dir(out, replace=replace_out(args), command="sde", config_toml=cfg.to_toml(),
                 meta={"dtype": "float64"}) as rd:
        with rd.timed("sde"):
            res = run_sde(cfg, progress=show_progress())
        arrays = res.arrays()
        bounded = res.paths_bounded
        if not bounded.all():
            bad = np.flatnonzero(~bounded)
            raise DivergenceError(
                f"{len(bad)} of {len(bounded)} SDE paths diverged (NaN/inf or overlaps above "
                f"{BLOWUP:.0e}; first at t = "
                f"{np.nanmin(arrays['first_invalid'][bad]):.4g}, path {int(bad[0])}); try a "
                f"smaller sde.dt (now {cfg.sde.dt:g}) or training.lr")
        invalid = ~res.paths_valid
        first = arrays["first_invalid"]
        if invalid.any():
            print(f"headflow: warning: {int(invalid.sum())} of {len(invalid)} paths left the "
                  f"PSD domain (first at t = {np.nanmin(first):.4g}); they are kept, see "
                  "valid / first_invalid in sde.npz", file=sys.stderr)
        escapes = res.escape_times()
        rd.meta["sde"] = {**res.info, "paths_invalid": int(invalid.sum())}
        rd.save_npz("sde.npz", {**arrays, "escape": escapes})
        plot_fan(rd.path("sde.png"), arrays["t"], arrays,
                 title=f"SDE of the overlaps, D={res.dim}, {len(invalid)} paths, "
                 f"{describe_model(cfg)}")
    final = arrays["risk"][:, -1]
    n = len(final)
    std = float(final.std(ddof=1)) if n > 1 else float("nan")
    return {"risk_final_mean": float(final.mean()), "risk_final_std": std,
            "risk_final_sem": std / np.sqrt(n) if n > 1 else float("nan"),
            "escape_quantiles": escape_quantiles(escapes),
            "escaped": int(np.isfinite(escapes).sum()), "dim": res.dim, "paths": n,
            "paths_invalid": int(invalid.sum()),
            "first_invalid_t": float(np.nanmin(first)) if invalid.any() else None,
            "out": str(out)}
