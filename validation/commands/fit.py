"""`headflow fit CONFIG --curve FILE.npz --params training.lr,model.noise [--model sde]`:
hyperparameters fitted to an observed risk curve through the ODE or the SDE ensemble's mean."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

from ._common import (add_config_args, checked, config_from_args, no_repeats, out_dir,
                      positive_int, replace_out, split_items)
from ._light import MODELS

if TYPE_CHECKING:
    import numpy as np

EXAMPLE = ("headflow fit validation/configs/demo.toml --curve runs/sgd-XXXX/sgd.npz "
           "--params training.lr,model.noise")
"""Shown at the end of `--help`."""


def _names(text: str) -> tuple[str, ...]:
    return no_repeats(tuple(split_items(text, "comma-separated config keys")), text)


def register(sub) -> None:
    p = sub.add_parser("fit", help="fit hyperparameters to an observed risk curve through the "
                       "ODE (--curve, --params)",
                       description="Least squares through the differentiable ODE, or the "
                       "mean of an SDE ensemble with --model sde "
                       "(optimistix Levenberg-Marquardt): fit the listed config keys to an "
                       "observed risk curve (arrays t and risk of an npz file; a risk with a "
                       "seed axis, as in sgd.npz, is averaged over it). Reports the values, "
                       "their standard errors from the Gauss-Newton curvature and the "
                       "residual; writes fit.json, fit.npz, fit.png, config.toml and meta.json.")
    add_config_args(p)
    p.add_argument("--curve", type=Path, required=True, metavar="FILE.npz",
                   help="the observed curve: arrays t (T) and risk (T or S x T)")
    p.add_argument("--params", type=_names, required=True, metavar="KEY,KEY",
                   help="config keys to fit, e.g. training.lr,model.noise (the config gives "
                   "their starting values)")
    p.add_argument("--model", choices=MODELS, default="ode",
                   help="the model of the curve: the ODE (default), or the mean of an SDE "
                   "ensemble at sim.dim (the model of an SGD seed mean whose escapes spread)")
    p.add_argument("--paths", type=positive_int, default=None, metavar="N",
                   help="SDE paths of --model sde (default: sde.paths)")
    p.set_defaults(func=run)


def read_curve(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """`(t, risk)` of an npz file; a seed axis of `risk` is averaged over."""
    import numpy as np

    from headflow.dynamics import HeadflowError

    try:
        with np.load(path) as data:
            missing = [k for k in ("t", "risk") if k not in data]
            if missing:
                raise HeadflowError(f"--curve {path}: no array {', '.join(missing)} (need t "
                                    "and risk)")
            t, risk = np.asarray(data["t"], float), np.asarray(data["risk"], float)
    except FileNotFoundError:
        raise HeadflowError(f"--curve {path}: file not found") from None
    except (OSError, ValueError, zipfile.BadZipFile) as err:
        raise HeadflowError(f"--curve {path}: not a readable npz file ({err})") from None
    if risk.ndim == 2:
        risk = risk.mean(axis=0)
    if t.ndim != 1 or risk.shape != t.shape:
        raise HeadflowError(f"--curve {path}: t must be 1-D and risk (T) or (S, T) with the "
                            f"same T (got {t.shape}, {risk.shape})")
    return t, risk


def run(args) -> dict:
    from headflow.dynamics import HeadflowError
    from headflow.dynamics.ode import differentiable_keys

    from .._json import write as write_json
    from .._rundir import run_dir
    from ..experiments.fit import check_names, fit_curve

    cfg = config_from_args(args)
    check_names(args.params, differentiable_keys(cfg))
    t, risk = read_curve(args.curve)
    if args.paths is not None and args.model != "sde":
        raise HeadflowError("--paths: only with --model sde")
    out = out_dir(args, "fit", cfg,
                  f"{args.curve.resolve()} {args.params} {args.model} {args.paths}")
    if args.check:
        return checked(args, out)
    with run_dir(out, replace=replace_out(args), command="fit", config_toml=cfg.to_toml(),
                 meta={"dtype": "float64", "curve": str(args.curve), "model": args.model}
                 ) as rd:
        with rd.timed("fit"):
            fit = fit_curve(cfg, t, risk, args.params, model=args.model, paths=args.paths)
        paths = (args.paths or cfg.sde.paths) if args.model == "sde" else None
        summary = {"model": args.model, "paths": paths, "values": fit.values, "se": fit.se,
                   "start": fit.start, "rss": fit.rss,
                   "residual_rms": fit.residual_rms, "dof": fit.dof,
                   "converged": fit.converged, "solver_steps": fit.steps, "out": str(out)}
        rd.save_npz("fit.npz", {"t": fit.t, "risk_observed": fit.observed,
                                "risk_fitted": fit.fitted})
        write_json(rd.path("fit.json"), summary)
        from ..plots import pyplot as plt

        fig, ax = plt.subplots(figsize=(6.5, 4.5))
        ax.plot(fit.t, fit.observed, "o", ms=3, label="observed")
        what = "ODE" if args.model == "ode" else f"SDE mean ({paths} paths)"
        ax.plot(fit.t, fit.fitted, "-", label=f"{what}, fitted: " + ", ".join(
            f"{k} = {v:.4g} ± {fit.se[k]:.2g}" for k, v in fit.values.items()))
        ax.set_xlabel("t = steps / D")
        ax.set_ylabel("population risk")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(rd.path("fit.png"), dpi=110)
        plt.close(fig)
    quiet = args.json and not sys.stderr.isatty()
    for k, v in fit.values.items():
        print(f"{k} = {v:.6g} ± {fit.se[k]:.2g} (start {fit.start[k]:.6g})",
              file=sys.stderr if quiet else sys.stdout)
    print(f"residual rms {fit.residual_rms:.3g}{'' if fit.converged else ' (NOT converged)'}",
          file=sys.stderr if quiet else sys.stdout)
    return summary
