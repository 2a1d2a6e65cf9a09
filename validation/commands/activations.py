"""`headflow activations CONFIG`: long-time risk versus signal strength for the activations,
against the Bayes risk; optionally the SGD-noise excess versus η and the risk versus H."""

from __future__ import annotations

import argparse
import json

from ._common import (activation_list, add_config_args, checked, config_from_args, describe_mode,
                      float_list, int_list, MODE_HELP, mode_of, out_dir, positive_float,
                      positive_int, replace_out, run_logger, sample_count)
from ._common import require_attention
from ._light import STATIONARY_Z, known_activations


EXAMPLE = "headflow activations --set model.L=3 --amplitudes 2,3 --t-max 300"
"""Shown at the end of `--help`."""


def register(sub) -> None:
    p = sub.add_parser(
        "activations", help="final risk vs signal strength per activation, against Bayes",
        description="Long-time risk of the order-parameter ODE (fixed points reached by "
        "integration from a small random start at sim.dim, accelerated by a Newton polish "
        "and, on slow manifolds, a pseudo-transient continuation, checked for stationarity: "
        f"|RHS_i| <= z*err_i + atol with z = {STATIONARY_Z} by default; a state that is not "
        "stationary is reported with its drift max|RHS_i|/err_i) for each activation "
        "over a grid of signal amplitudes, against R_Bayes; optional SGD points, the "
        "SGD-noise excess of Bayes-softmax versus the learning rate, and the risk versus the "
        "number of heads. " + MODE_HELP + " Writes activations.json, activations.npz, "
        "final_risk.png, risk_curves.png (and eta.png, heads.png when asked).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_config_args(p)
    p.add_argument("--amplitudes", type=float_list, default=None, metavar="A1,A2,...",
                   help="values of prior.amplitude (the spike amplitude √ν; a factor on "
                   "discrete points and on the Gaussian mean and standard deviations); "
                   "default: the config's amplitude times 1/3, 2/3, 1, 4/3")
    p.add_argument("--activations", type=activation_list, default=known_activations(),
                   metavar="A,B,...",
                   help="activations to compare")
    p.add_argument("--t-max", type=positive_float, default=4000.0,
                   help="longest integration time (t = steps/D at training.lr)")
    p.add_argument("--t-first", type=positive_float, default=25.0,
                   help="first integration chunk; later chunks double the elapsed time")
    p.add_argument("--z", type=positive_float, default=STATIONARY_Z,
                   help="stationarity tolerance in units of the vector field's MC error")
    p.add_argument("--risk-samples", type=sample_count, default=1 << 16,
                   help="QMC nodes for the final risks")
    p.add_argument("--bayes-samples", type=sample_count, default=1 << 17,
                   help="QMC nodes for R_Bayes")
    p.add_argument("--sgd-amplitudes", type=float_list, default=(), metavar="A1,...",
                   help="amplitudes (among --amplitudes) at which to add online-SGD points")
    p.add_argument("--sgd-dim", type=positive_int, default=2000, help="D of the SGD points")
    p.add_argument("--sgd-seeds", type=positive_int, default=4, help="seeds of the SGD points")
    p.add_argument("--sgd-t", type=positive_float, default=None,
                   help="time of the SGD points (default training.t_max); the risk is "
                   "averaged over the last quarter of the run and over seeds, and compared "
                   "with the ODE with SGD noise at the same η over the same window")
    p.add_argument("--sgd-lr", type=positive_float, default=None,
                   help="η of the SGD points (default training.lr; η_b scaled alike)")
    p.add_argument("--etas", type=float_list, default=(), metavar="E1,...",
                   help="Bayes-softmax at the config's amplitude and H: stationary risk of "
                   "the ODE with SGD noise at these learning rates (η_b scaled alike), "
                   "started from the gradient-flow fixed point; excess over R_Bayes")
    p.add_argument("--tau-max", type=positive_float, default=2000.0,
                   help="longest τ = ηt of the --etas runs")
    p.add_argument("--sgd-etas", type=float_list, default=(), metavar="E1,...",
                   help="learning rates (among --etas) with SGD at --sgd-dim, started from "
                   "weights with the gradient-flow fixed point's overlaps")
    p.add_argument("--sgd-tau", type=positive_float, default=100.0,
                   help="τ = ηt of the --sgd-etas runs")
    p.add_argument("--heads", type=int_list, default=(), metavar="H1,...",
                   help="risk versus the number of heads at the config's amplitude")
    p.set_defaults(func=run)


def run(args) -> dict:
    import numpy as np

    from headflow.dynamics import ConfigError, HeadflowError
    from headflow.dynamics.activations import activation_names
    from headflow.dynamics.expectations import get_expectation

    from .._json import write as write_json
    from .._rundir import check_writable, run_dir
    from ..experiments.activations import (activation_verdicts, amplitude_sweep, bayes_risks,
                                           mode_config, ode_tail_risk, sgd_point, support_size,
                                           with_lr)
    from ..plots import activations as plots

    cfg = config_from_args(args)
    require_attention(cfg, "activations",
                      "it compares the attention activations against the Bayes risk "
                      "of the attention model's prior")
    mode = mode_of(args)
    amps = (list(args.amplitudes) if args.amplitudes is not None
            else [cfg.prior.amplitude * f for f in (1 / 3, 2 / 3, 1.0, 4 / 3)])
    for a in amps:
        if not np.isfinite(a) or a < 0:
            raise ConfigError(f"--amplitudes: {a} must be a finite number >= 0")
    missing = [a for a in args.sgd_amplitudes if not any(abs(a - b) < 1e-12 for b in amps)]
    if missing:
        raise HeadflowError(f"--sgd-amplitudes {missing} are not among --amplitudes {amps}")
    missing = [e for e in args.sgd_etas if not any(abs(e - b) < 1e-12 for b in args.etas)]
    if missing:
        raise HeadflowError(f"--sgd-etas {missing} are not among --etas {list(args.etas)}")
    if args.sgd_amplitudes and args.sgd_dim < 3 * cfg.model.H + cfg.model.F + 1:
        raise HeadflowError(f"--sgd-dim {args.sgd_dim}: too small for H = {cfg.model.H}")
    S = support_size(cfg)
    if args.etas and "bayes_softmax" not in activation_names():  # pragma: no cover
        raise HeadflowError("--etas needs the bayes_softmax activation")
    if args.etas and any(e <= 0 for e in args.etas):
        raise HeadflowError(f"--etas {list(args.etas)}: learning rates must be > 0")
    # validate every configuration before any long computation
    for a in amps:
        cfg.replace(**{"prior.amplitude": float(a)})
    for H in args.heads:
        cfg.replace(**{"model.H": int(H)})
    sgd_t = args.sgd_t if args.sgd_t is not None else cfg.training.t_max
    extra = json.dumps({k: v for k, v in vars(args).items()
                        if k not in ("func", "out", "json", "config", "set")}, default=str)
    out = out_dir(args, "activations", cfg, extra=extra + mode)
    check_writable(out)
    print(describe_mode(mode), flush=True)
    ev = get_expectation("qmc", args.risk_samples, seed=cfg.ode.seed + 1)
    log = run_logger(args)
    meta = {"mode": mode, "amplitudes": amps, "t_max": args.t_max, "z": args.z,
            "risk_samples": args.risk_samples}
    if args.check:
        return checked(args, out)
    with run_dir(out, replace=replace_out(args), command="activations",
                 config_toml=cfg.to_toml(), meta=meta) as rd:
        with rd.timed("bayes"):
            bayes, bayes_err = bayes_risks(cfg, amps, args.bayes_samples)
        with rd.timed("ode"):
            runs = amplitude_sweep(cfg, amps, args.activations, mode=mode, t_max=args.t_max,
                                   t_first=args.t_first, eval_backend=ev, on_run=log)
        summary: dict = {
            "amplitudes": [float(a) for a in amps],
            "final_risk": {a: [r.risk for r in runs[a]] for a in args.activations},
            "final_risk_err": {a: [r.risk_err for r in runs[a]] for a in args.activations},
            "bayes_risk": bayes, "bayes_risk_err": bayes_err, "mode": mode,
            "null_risk": cfg.model.noise**2 + cfg.model.rho,
            "stationary": {a: [r.fixed_point.stationary for r in runs[a]]
                           for a in args.activations},
            "stationarity_ratio": {a: [r.fixed_point.check.ratio for r in runs[a]]
                                   for a in args.activations},
            "residual": {a: [r.fixed_point.check.residual for r in runs[a]]
                         for a in args.activations},
            "drift": {a: [r.fixed_point.check.drift for r in runs[a]]
                      for a in args.activations},
            "t_reached": {a: [r.fixed_point.t for r in runs[a]] for a in args.activations},
            "risk_drift_last_chunk": {a: [r.risk_drift() for r in runs[a]]
                                      for a in args.activations},
            "H": cfg.model.H, "support_size": S,
            "node_checks": {a: [{k: c.summary() for k, c in r.node_checks.items()}
                                for r in runs[a]] for a in args.activations},
        }
        verdicts = activation_verdicts(runs, bayes, bayes_err, S)
        summary["verdicts"] = [v.summary() for v in verdicts]
        sgd = []
        if args.sgd_amplitudes:
            with rd.timed("sgd"):
                for a in args.sgd_amplitudes:
                    for act in args.activations:
                        c = cfg.replace(**{"model.activation": act, "prior.amplitude": a})
                        if args.sgd_lr is not None:
                            c = with_lr(c, args.sgd_lr)
                        p = sgd_point(c, dim=args.sgd_dim, seeds=args.sgd_seeds, t=sgd_t)
                        # theory for the same run: the ODE with the η² terms at SGD's η, from
                        # the same kind of start, over the same window
                        ode_noise = ode_tail_risk(mode_config(c, "sgd_noise"), t=sgd_t)
                        sgd.append({**p.summary(), "ode_sgd_noise_risk": ode_noise})
                        print(f"  SGD {act:13s} a={a:g}: R = {p.risk:.5f} ± {p.risk_sem:.1e} "
                              f"(D={p.dim}, η={p.lr:g}, last quarter of t <= {p.t:g}); ODE "
                              f"with SGD noise, same window: {ode_noise:.5f}", flush=True)
        summary["sgd"] = sgd
        # runs of the sweep at the config's own amplitude are reused by the other studies
        i_cfg = next((i for i, a in enumerate(amps)
                      if abs(a - cfg.prior.amplitude) <= 1e-12 * max(1.0, a)), None)
        same = ({} if i_cfg is None else
                {(act, cfg.model.H): runs[act][i_cfg] for act in args.activations})
        if args.etas:
            with rd.timed("eta"):
                gf = same.get(("bayes_softmax", cfg.model.H)) if mode == "gradient_flow" else None
                summary["eta"] = _eta_study(cfg, args, ev, rd, log, gf)
        if args.heads:
            with rd.timed("heads"):
                summary["heads"] = _heads_study(cfg, args, mode, ev, rd, log, S, same)
        arrays = {"amplitudes": np.asarray(amps), "bayes_risk": np.asarray(bayes)}
        for act in args.activations:
            arrays[f"final_risk_{act}"] = np.asarray(summary["final_risk"][act])
            arrays[f"final_risk_err_{act}"] = np.asarray(summary["final_risk_err"][act])
            for i, r in enumerate(runs[act]):
                arrays[f"t_{act}_{i}"] = r.ts
                arrays[f"risk_{act}_{i}"] = r.risk_t
        rd.save_npz("activations.npz", arrays)
        runs_json = {a: [r.summary() for r in runs[a]] for a in args.activations}
        write_json(rd.path("runs.json"), runs_json)
        write_json(rd.path("activations.json"), summary)
        plots.plot_final_risk(rd.path("final_risk.png"), amps, summary["final_risk"],
                              summary["final_risk_err"], bayes, bayes_err, mode=mode, sgd=sgd,
                              null_risk=summary["null_risk"], stationary=summary["stationary"],
                              drift=summary["drift"],
                              title=f"{cfg.prior.kind} prior, L={cfg.model.L}, "
                              f"H={cfg.model.H}: long-time risk ({mode.replace('_', ' ')})")
        plots.plot_risk_curves(rd.path("risk_curves.png"), runs, dict(zip(amps, bayes)),
                               title=f"ODE risk vs t ({mode.replace('_', ' ')}); dotted: "
                               "R_Bayes")
    _print_table(summary)
    for v in verdicts:
        print(v.line())
    return {**summary, "out": str(out)}


def _eta_study(cfg, args, ev, rd, log, gf=None) -> dict:
    """Bayes-softmax at the config's amplitude and H: gradient flow, then the η² ODE per η."""
    import numpy as np

    from ..experiments.activations import (bayes_risks, bayes_verdict, long_time, mode_config,
                                           noise_excess, power_law_slope)
    from ..plots import activations as plots

    c = cfg.replace(**{"model.activation": "bayes_softmax"})
    if gf is None:
        gf = long_time(mode_config(c, "gradient_flow"), t_max=args.t_max,
                       t_first=args.t_first, eval_backend=ev)
        log(gf)
    (rb,), (rb_err,) = bayes_risks(c, [c.prior.amplitude], args.bayes_samples)
    pts = noise_excess(c, args.etas, gf, tau_max=args.tau_max, eval_backend=ev,
                       sgd_etas=args.sgd_etas, sgd_dim=args.sgd_dim, sgd_seeds=args.sgd_seeds,
                       sgd_tau=args.sgd_tau, on_run=lambda p: log(p.run))
    excess = [p.run.risk - rb for p in pts]
    err = [float(np.hypot(p.run.risk_err, rb_err)) for p in pts]
    sgd = [{**p.sgd.summary(), "excess": p.sgd.risk - rb} for p in pts if p.sgd is not None]
    slope = power_law_slope(args.etas, excess)
    res = {"amplitude": float(c.prior.amplitude), "H": c.model.H, "bayes_risk": rb,
           "bayes_risk_err": rb_err, "gradient_flow": gf.summary(),
           "gradient_flow_rel_gap": (gf.risk - rb) / rb,
           "gradient_flow_verdict": bayes_verdict(gf, rb, rb_err).summary(),
           "etas": [float(e) for e in args.etas],
           "stationary_risk": [p.run.risk for p in pts],
           "stationary_risk_err": [p.run.risk_err for p in pts], "excess": excess,
           "excess_err": err, "stationary": [p.run.fixed_point.stationary for p in pts],
           "slope": slope, "sgd": sgd, "runs": [p.run.summary() for p in pts]}
    plots.plot_excess_eta(rd.path("eta.png"), args.etas, excess, err, sgd=sgd, slope=slope,
                          bayes=rb, gf_excess=gf.risk - rb,
                          title=f"Bayes-softmax, H={c.model.H}, {c.prior.kind} "
                          f"a={c.prior.amplitude:g}: stationary excess risk vs η")
    print(f"gradient flow (Bayes-softmax, H={c.model.H}): R = {gf.risk:.5f} vs R_Bayes = "
          f"{rb:.5f} (relative gap {100 * (gf.risk - rb) / rb:+.2f}%)", flush=True)
    print("  " + bayes_verdict(gf, rb, rb_err).line(), flush=True)
    for e, x, p in zip(args.etas, excess, pts):
        print(f"  η = {e:g}: stationary R = {p.run.risk:.5f}, excess {x:+.2e}"
              + (f"; SGD D={p.sgd.dim}: {p.sgd.risk:.5f} ± {p.sgd.risk_sem:.1e}"
                 if p.sgd is not None else ""), flush=True)
    if slope is not None:
        print(f"  excess ∝ η^{slope:.2f}", flush=True)
    return res


def _heads_study(cfg, args, mode, ev, rd, log, S, reuse) -> dict:
    from ..experiments.activations import bayes_risks, heads_sweep
    from ..plots import activations as plots

    runs = heads_sweep(cfg, args.heads, args.activations, mode=mode, t_max=args.t_max,
                       t_first=args.t_first, eval_backend=ev, reuse=reuse, on_run=log)
    (rb,), (rb_err,) = bayes_risks(cfg, [cfg.prior.amplitude], args.bayes_samples)
    res = {"heads": [int(h) for h in args.heads], "amplitude": float(cfg.prior.amplitude),
           "bayes_risk": rb, "bayes_risk_err": rb_err, "support_size": S,
           "risk": {a: [r.risk for r in runs[a]] for a in runs},
           "risk_err": {a: [r.risk_err for r in runs[a]] for a in runs},
           "stationary": {a: [r.fixed_point.stationary for r in runs[a]] for a in runs},
           "runs": {a: [r.summary() for r in runs[a]] for a in runs}}
    plots.plot_risk_vs_heads(rd.path("heads.png"), args.heads, res["risk"], res["risk_err"],
                             bayes=rb, S=S, title=f"{cfg.prior.kind} a={cfg.prior.amplitude:g}"
                             f": long-time risk vs H ({mode.replace('_', ' ')})")
    print("risk vs H: " + "; ".join(
        f"{a}: " + ", ".join(f"H={h}: {r:.4f}" for h, r in zip(args.heads, res["risk"][a]))
        for a in runs), flush=True)
    return res


def _print_table(s: dict) -> None:
    acts = list(s["final_risk"])
    print("amplitude  R_Bayes    " + "  ".join(f"{a:>14s}" for a in acts))
    for i, a in enumerate(s["amplitudes"]):
        cells = []
        for act in acts:
            mark = "" if s["stationary"][act][i] else "*"
            cells.append(f"{s['final_risk'][act][i]:13.5f}{mark or ' '}")
        print(f"{a:9.4g}  {s['bayes_risk'][i]:.5f}  " + "  ".join(cells))
    for act in acts:
        for i, a in enumerate(s["amplitudes"]):
            if not s["stationary"][act][i]:
                print(f"* {act} a={a:g}: not stationary by --t-max: drift "
                      f"max|RHS_i|/err_i = {s['drift'][act][i]:.3g} (stationary needs "
                      f"<= z), risk change over the last chunk "
                      f"{s['risk_drift_last_chunk'][act][i]:+.2e}")
