"""`headflow demo`: the main job, theory versus SGD on the default experiment."""

from __future__ import annotations

import math
from importlib import resources

from .compare import verdict_lines
from ._common import (add_out_args, add_set_arg, checked, nonneg_int, out_dir, replace_out,
                      write_comparison)


EXAMPLE = "headflow demo --set sim.seeds=4 --set sde.paths=8"
"""Shown at the end of `--help`."""


WEIGHT_SEEDS = 8
"""Weight-space SGD seeds drawn in the figure by default."""

SIZES = ("training.t_max=30", "output.n_save=31", 'sim.space="overlaps"', "sim.seeds=256",
         "sde.paths=128", "sim.risk_samples=1024", "ode.samples=4096")
"""The demo's sizes, applied to `validation/configs/demo.toml` before the user's `--set`, chosen
by what resolves the verdicts:

- t ≤ 30: the run stops after the escapes (90% of the runs escape by t ≈ 20).
- 256 seeds of the exact overlap chain against 128 SDE paths. The tightest verdict is the
  escape-time distribution (KS bound ≈ 0.19 against its tolerance 0.2), then the spread (bound
  ≈ 0.19 against 0.223). A bound lies above the observed statistic by a multiple of
  `√(1/seeds + 1/paths)`: halving either side widens that by 15% or more and leaves the escape
  times unresolved, so neither is cut.
- The SDE keeps the `[sde]` table: `drift_heun` at `dt = 0.25` on 1024 drift nodes. Euler at the
  same step (half the drift evaluations, the drift being most of the cost) escapes about one
  time unit later and leaves every verdict unresolved (docs/sde.md, `--set
  sde.solver='"euler"'`).
- 31 saves (one per unit of time) and the recorded risk on 1024 Monte Carlo nodes: the nodes are
  common to SGD and the SDE, so their error (`risk_mc_err` in report.json, ≈ 0.008) cancels in
  the verdicts and only shifts both absolute risks alike.
- The D → ∞ ODE, a drawn curve, on 4096 nodes: its final risk within 10⁻⁴ of 16384 nodes', the
  same escape time."""


BAYES_SAMPLES = 1 << 15
"""Monte Carlo nodes of the Bayes-optimal risk quoted in the summary (its error ≈ 6·10⁻⁴)."""


def register(sub) -> None:
    p = sub.add_parser("demo", help="the main job: theory vs SGD on the default experiment",
                       description="The SDE ensemble of the order parameters at the run's D "
                       "against online SGD on the default experiment "
                       "(validation/configs/demo.toml): the SGD seeds come from the exact "
                       "overlap chain (the law of weight-space SGD at that D), compared as "
                       "distributions (mean, spread, escape times), each verdict agree, "
                       "disagree or not resolved at this size; a few weight-space SGD seeds "
                       "and the D → ∞ ODE are drawn with them. Writes compare.png, "
                       "report.json and summary.md, in under three minutes on two CPU cores. "
                       "Sizes (before --set): " + " ".join(SIZES) + ".")
    add_set_arg(p)
    p.add_argument("--weight-seeds", type=nonneg_int, default=WEIGHT_SEEDS,
                   help=f"weight-space SGD seeds drawn in the figure (default {WEIGHT_SEEDS}; "
                   "0: none)")
    add_out_args(p)
    p.set_defaults(func=run)


def demo_config_text() -> str:
    return resources.files("headflow.validation").joinpath("configs/demo.toml").read_text()


def bayes_summary(cfg, samples: int) -> dict:
    """[`headflow.validation.experiments.bayes.bayes_summary`][], imported on first use."""
    from ..experiments.bayes import bayes_summary as summary

    return summary(cfg, samples)


def run(args) -> dict:
    from headflow.dynamics import Config, ConfigError
    from headflow.dynamics.config import parse_value

    from .._json import write as write_json
    from .._rundir import run_dir

    kinds = [x for x in args.set if x.partition("=")[0].strip() == "model.kind"]
    if kinds and parse_value(kinds[-1].partition("=")[2].strip()) != "attention":
        raise ConfigError("demo runs the attention model of validation/configs/demo.toml; for "
                          "another model.kind use headflow compare with its config "
                          "(docs/models.md)")
    cfg = Config.from_toml(demo_config_text(), [*SIZES, *args.set])
    out = args.out if args.out is not None else out_dir(args, "demo", cfg)
    if args.check:
        return checked(args, out)
    with run_dir(out, replace=replace_out(args), command="demo", config_toml=cfg.to_toml(),
                 meta={"theory": "sde"}) as rd:
        report = write_comparison(rd, cfg, theory="sde", limit=True,
                                  weight_seeds=args.weight_seeds)
        with rd.timed("bayes"):
            bayes = bayes_summary(cfg, BAYES_SAMPLES)
        summary = {**report, "bayes": bayes}
        write_json(rd.path("summary.json"), summary)
        rd.path("summary.md").write_text(_markdown(cfg, report, bayes))
    print(_markdown(cfg, report, bayes))
    print(f"results in {out}/ (compare.png, report.json, summary.md)")
    return {**report, "bayes_risk": bayes["bayes_risk"], "out": str(out)}


def _fmt(x: float | None) -> str:
    return "never" if x is None or not math.isfinite(x) else f"{x:.1f}"


def _quantiles(q: dict, escaped: int, runs: int) -> str:
    return (f"{_fmt(q['0.1'])} / {_fmt(q['0.5'])} / {_fmt(q['0.9'])} ({escaped}/{runs} "
            "escaped)")


def _markdown(cfg, rep: dict, bayes: dict) -> str:
    esc, v, sde = rep["escape"], rep["verdicts"], rep["sde"]
    space = ("the exact overlap-space chain (the law of weight-space SGD at this D)"
             if cfg.sim.space == "overlaps" else "weight-space SGD")
    qt = _quantiles(esc["theory_quantiles"], esc["theory_escaped"], rep["paths"])
    qs = _quantiles(esc["sgd_quantiles"], esc["sgd_escaped"], rep["seeds"])
    lines = [
        "# headflow demo: SDE theory vs online SGD",
        "",
        f"- model: {cfg.model.H} {cfg.model.activation} heads, L = {cfg.model.L}, prior "
        f"{cfg.prior.kind} (amplitude {cfg.prior.amplitude}), η = {cfg.training.lr}",
        f"- SGD: D = {rep['dim']}, {rep['seeds']} seeds of {space}; theory: {rep['paths']} "
        f"paths of the overlaps' SDE at the same D, each from its own random start "
        f"({sde['solver']}, dt = {sde['dt']:g}, {sde['samples_drift']} drift and "
        f"{sde['samples_noise']} noise nodes; {sde['paths_invalid']} paths left the PSD "
        "domain)",
        f"- overall: **theory and simulation {v['all']}** (each verdict: agree, disagree, or "
        "not resolved at this size, from a permutation test and a bootstrap bound over seeds "
        f"and paths at level {v['mean']['level']:g})",
        "",
        *(f"- {line}" for line in verdict_lines(rep)[:3]),
        "",
        f"- escape time 10/50/90%: SDE {qt}; SGD {qs}; a run that never escapes counts as "
        "+inf",
        f"- risk: sup |SDE mean − SGD mean| = {rep['risk_sup_abs']:.4f} "
        f"({100 * rep['risk_sup_rel']:.1f}% relative) over t ≤ {rep['t_max']:g}",
    ]
    if "weight_space" in rep:
        w = rep["weight_space"]
        found = sorted(e for e in w["escape"] if e is not None)
        sem = f" ± {w['risk_final_sem']:.4f}" if w["risk_final_sem"] is not None else ""
        lines.append(f"- weight-space SGD ({w['seeds']} seeds, {w['dtype']}, drawn in the "
                     f"figure): final risk {w['risk_final']:.4f}{sem}; escape times "
                     f"{', '.join(f'{e:.1f}' for e in found) or 'none'}"
                     f"{'' if len(found) == w['seeds'] else ' (the others never escaped)'}")
    if "limit" in rep:
        lim = rep["limit"]
        lines.append(f"- D → ∞ ODE from the seeds' mean start: final risk "
                     f"{lim['risk_final']:.4f}, escape at t = {_fmt(lim['escape'])} (at finite "
                     "D the fluctuations of SGD start the escape)")
    lines += [
        f"- Bayes-optimal risk {bayes['bayes_risk']:.4f}"
        + (f" ± {bayes['bayes_risk_err']:.4f}" if "bayes_risk_err" in bayes else ""),
        "- figure: compare.png (SDE fan: median, 50% and 90% bands; SGD seeds as thin lines, "
        "their median dashed; weight-space seeds thin black; the D → ∞ ODE dotted; escape-time "
        "distribution functions of both ensembles)",
        "",
    ]
    return "\n".join(lines)
