"""`headflow prune CONFIG`: risk versus the number of pruned heads, per activation."""

from __future__ import annotations

import argparse
import dataclasses
import json

from ._common import (activation_list, add_config_args, checked, config_from_args, describe_mode,
                      MODE_HELP, mode_of, nonneg_int, out_dir, positive_float, positive_int,
                      replace_out, run_logger, sample_count)
from ._common import require_attention
from ._light import CRITERIA, PRUNABLE_TOLERANCE, STATIONARY_Z, known_activations


EXAMPLE = "headflow prune --set model.H=4 --criterion greedy"
"""Shown at the end of `--help`."""


def register(sub) -> None:
    p = sub.add_parser(
        "prune", help="risk vs number of pruned heads, per activation",
        description="Train H heads per activation (the long-time ODE state from a small random "
        "start, or online SGD weights with --source sgd), then remove heads one at a time "
        "without retraining, in the order of an importance criterion (greedy: the head whose "
        "removal raises the risk least; ablation: ranked once by single-head removal) and in "
        "random orders (control), evaluating the exact population risk of the remaining "
        f"heads. 'prunable' counts the heads removed before the risk exceeds "
        f"{1 + PRUNABLE_TOLERANCE:g} x the unpruned risk. " + MODE_HELP + " Writes prune.json, "
        "prune.npz and prune.png.", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_config_args(p)
    p.add_argument("--activations", type=activation_list, default=known_activations(),
                   metavar="A,B,...",
                   help="activations to compare")
    p.add_argument("--criterion", choices=CRITERIA, default="greedy",
                   help="importance criterion for the pruning order")
    p.add_argument("--random-orders", type=nonneg_int, default=8,
                   help="random removal orders (control); 0 for none")
    p.add_argument("--source", choices=("ode", "sgd"), default="ode",
                   help="trained heads: the long-time ODE state, or SGD weights at --dim "
                   "after training.t_max (pruned per seed, curves averaged)")
    p.add_argument("--t-max", type=positive_float, default=4000.0,
                   help="longest ODE integration time (--source ode)")
    p.add_argument("--t-first", type=positive_float, default=25.0, help="first ODE chunk")
    p.add_argument("--z", type=positive_float, default=STATIONARY_Z,
                   help="stationarity tolerance in units of the vector field's MC error")
    p.add_argument("--dim", type=positive_int, default=None,
                   help="D of the SGD runs (--source sgd; default sim.dim)")
    p.add_argument("--seeds", type=positive_int, default=None,
                   help="SGD seeds (--source sgd; default sim.seeds)")
    p.add_argument("--risk-samples", type=sample_count, default=1 << 16,
                   help="QMC nodes for the pruned risks")
    p.set_defaults(func=run)


def run(args) -> dict:
    import jax
    import numpy as np

    from headflow.dynamics import DivergenceError, HeadflowError
    from headflow.dynamics.expectations import get_expectation
    from headflow.sims import run_sgd

    from .._json import write as write_json
    from .._rundir import check_writable, run_dir
    from ..experiments.activations import long_time, mode_config
    from ..experiments.pruning import (PruneCurve, SubsetRisk, excess_over_tolerance,
                                       first_needed_jump, head_statistics, prunable_count,
                                       prunable_verdict, prune_curve, random_curves)
    from ..plots import activations as plots

    cfg = config_from_args(args)
    require_attention(cfg, "prune",
                      "it prunes attention heads")
    if args.random_orders < 0:
        raise HeadflowError(f"--random-orders {args.random_orders}: must be >= 0")
    mode = mode_of(args)
    H = cfg.model.H
    extra = json.dumps({k: v for k, v in vars(args).items()
                        if k not in ("func", "out", "json", "config", "set")}, default=str)
    out = out_dir(args, "prune", cfg, extra=extra + mode)
    check_writable(out)
    if args.source == "ode":
        print(describe_mode(mode), flush=True)
    ev = get_expectation("qmc", args.risk_samples, seed=cfg.ode.seed + 1)
    log = run_logger(args)
    curves, randoms, stats, errs, trained, extra_info = {}, {}, {}, {}, {}, {}
    verdicts = {}
    if args.check:
        return checked(args, out)
    with run_dir(out, replace=replace_out(args), command="prune", config_toml=cfg.to_toml(),
                 meta={"mode": mode, "source": args.source, "criterion": args.criterion}) as rd:
        for act in args.activations:
            c = cfg.replace(**{"model.activation": act})
            model = c.build_model()
            lt = None
            if args.source == "ode":
                with rd.timed(f"train_{act}"):
                    lt = long_time(mode_config(c, mode), t_max=args.t_max, t_first=args.t_first,
                                   eval_backend=ev, z=args.z)
                log(lt)
                states, manifold = [lt.overlaps], True
                trained[act] = lt.summary()
            else:
                with rd.timed(f"train_{act}"):
                    try:
                        res = run_sgd(c, dim=args.dim, seeds=args.seeds,
                                      times=np.linspace(0.0, c.training.t_max, 11))
                    except DivergenceError as exc:     # blown-up weights: no pruning curve
                        raise DivergenceError(f"{act}: {exc}") from None
                states = [jax.tree.map(lambda x, i=i: x[i, -1], res.overlaps)
                          for i in range(len(res.seeds))]
                manifold = False
                trained[act] = {"dim": res.dim, "seeds": list(res.seeds),
                                "t": float(res.t[-1]),
                                "risk_final": np.asarray(res.risk[:, -1]).tolist(),
                                "risk_final_err": np.asarray(res.risk_err[:, -1]).tolist()}
            with rd.timed(f"prune_{act}"):
                cs, rs = [], []
                for i, ov in enumerate(states):
                    sub = SubsetRisk(model, ov, ev, manifold=manifold)
                    cs.append(prune_curve(model, ov, ev, criterion=args.criterion,
                                          manifold=manifold, sub=sub))
                    rs += random_curves(sub, args.random_orders, seed=cfg.sim.seed + i)
                stats[act] = {k: np.asarray(v).tolist() for k, v in
                              head_statistics(model, states[0], ev, manifold=manifold).items()}
            risk = np.mean([cv.risk for cv in cs], axis=0)
            err = (np.sqrt(np.mean([cv.risk_err**2 for cv in cs], axis=0) / len(cs))
                   if len(cs) == 1 else np.std([cv.risk for cv in cs], axis=0, ddof=1)
                   / np.sqrt(len(cs)))
            curves[act] = {"criterion": args.criterion, "risk": risk.tolist(),
                           "risk_err": err.tolist(), "orders": [list(cv.order) for cv in cs],
                           "per_seed": [cv.risk.tolist() for cv in cs],
                           "per_seed_err": [cv.risk_err.tolist() for cv in cs]}
            randoms[act] = [cv.risk.tolist() for cv in rs]
            errs[act] = err.tolist()
            mean_curve = PruneCurve(criterion=args.criterion, order=cs[0].order, risk=risk,
                                    risk_err=err)
            if lt is not None:
                # the node check: the same pruning of the final segment's rerun on 4x nodes
                check = None
                if lt.fine is not None and lt.risk_check is not None:
                    fine = prune_curve(model, lt.fine.overlaps, ev, criterion=args.criterion,
                                       manifold=True)
                    check = dataclasses.replace(
                        lt.risk_check, quantity="pruning curve minus (1 + tol) x unpruned risk",
                        value=excess_over_tolerance(cs[0].risk),
                        value_fine=excess_over_tolerance(fine.risk))
                verdicts[act] = prunable_verdict(act, cs[0].risk, check, H - cfg.model.F,
                                                 risk_err=cs[0].risk_err)
            extra_info[act] = {
                "first_needed": first_needed_jump(mean_curve) if len(cs) == 1 else
                [first_needed_jump(cv) for cv in cs],
                "prunable_per_seed": [cv.prunable() for cv in cs],
                "prunable_random_mean": float(np.mean([cv.prunable() for cv in rs]))
                if rs else None,
            }
        pruned = list(range(H + 1))
        summary = {
            "pruned": pruned,
            "risk": {a: curves[a]["risk"] for a in curves},
            "risk_err": errs,
            "prunable": {a: prunable_count(curves[a]["risk"]) for a in curves},
            "prunable_tolerance": PRUNABLE_TOLERANCE,
            "criterion": args.criterion, "source": args.source,
            "mode": mode if args.source == "ode" else "sgd",
            "H": H, "F": cfg.model.F, "null_risk": cfg.model.noise**2 + cfg.model.rho,
            "orders": {a: curves[a]["orders"] for a in curves},
            "risk_per_run": {a: curves[a]["per_seed"] for a in curves},
            "risk_per_run_err": {a: curves[a]["per_seed_err"] for a in curves},
            "random_risk_mean": {a: np.mean(randoms[a], axis=0).tolist() if randoms[a] else None
                                 for a in curves},
            "first_needed": {a: extra_info[a]["first_needed"] for a in curves},
            "prunable_random_mean": {a: extra_info[a]["prunable_random_mean"] for a in curves},
            "prunable_per_seed": {a: extra_info[a]["prunable_per_seed"] for a in curves},
            "heads": stats, "trained": trained,
            "verdicts": {a: v.summary() for a, v in verdicts.items()},
        }
        rd.save_npz("prune.npz", {
            "pruned": np.asarray(pruned),
            **{f"risk_{a}": np.asarray(curves[a]["risk"]) for a in curves},
            **{f"random_{a}": np.asarray(randoms[a]) for a in curves if randoms[a]}})
        write_json(rd.path("prune.json"), summary)
        plots.plot_pruning(rd.path("prune.png"), curves, randoms,
                           null_risk=summary["null_risk"],
                           title=f"pruning {H} heads ({args.source}"
                           f"{', ' + mode.replace('_', ' ') if args.source == 'ode' else ''}), "
                           f"{cfg.prior.kind} prior, F={cfg.model.F}")
    _print_summary(summary)
    for v in verdicts.values():
        print("  " + v.line())
    return {**summary, "out": str(out)}


def _print_summary(s: dict) -> None:
    print(f"pruned heads: {s['pruned']} ({s['criterion']} order; prunable = removable within "
          f"{100 * s['prunable_tolerance']:g}% of the unpruned risk)")
    for a, r in s["risk"].items():
        jump = s["first_needed"][a]
        j = (f"; first needed head: R {jump['risk_before']:.4f} -> {jump['risk_after']:.4f} "
             f"({100 * jump['jump_rel']:+.1f}%)" if isinstance(jump, dict) else "")
        print(f"  {a:13s} risk: " + ", ".join(f"{x:.4f}" for x in r)
              + f"  prunable {s['prunable'][a]}" + j)
