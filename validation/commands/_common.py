"""Pieces shared by the commands: config arguments, the run folder, progress, summaries.

Light on import (the parser is built from it): `dynamics`, numpy and the experiments are
imported inside the functions that run a command (see `headflow.validation.commands._light`)."""

from __future__ import annotations

import argparse
import math
import sys
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING

from ._light import MIN_SAMPLES, known_activations

if TYPE_CHECKING:
    from headflow.dynamics import Config


def add_config_args(p: argparse.ArgumentParser, *, config_required: bool = False) -> None:
    """`CONFIG`, `--set section.key=value` (repeatable), `--out DIR`, `--json`."""
    p.add_argument("config", metavar="CONFIG", nargs=None if config_required else "?",
                   help="TOML configuration file (defaults for every missing key)")
    add_set_arg(p)
    add_out_args(p)


def add_set_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--set", metavar="SECTION.KEY=VALUE", action="append", default=[],
                   help="override one config key (repeatable); VALUE in TOML syntax")


def out_path(text: str) -> Path:
    """`--out`: a non-empty path."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a folder, got an empty string")
    return Path(text)


def add_out_args(p: argparse.ArgumentParser) -> None:
    """`--out DIR`, `--force`, `--json`."""
    p.add_argument("--out", metavar="DIR", type=out_path, default=None,
                   help="result folder (default: runs/<command>-<config hash>); written "
                   "atomically, nothing is left if the run fails or is interrupted")
    p.add_argument("--force", action="store_true",
                   help="replace --out if it exists and is not empty (the default folder of "
                   "a config is always replaced)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON summary object as the last line of stdout")
    p.add_argument("--check", action="store_true",
                   help="validate everything (configuration, arguments, output folder, memory "
                   "needed) and exit without computing")


def checked(args: argparse.Namespace, out: Path) -> dict:
    """The summary of a `--check` run: the inputs are valid, the output folder usable."""
    from headflow.dynamics import HeadflowError

    from .._rundir import check_writable

    check_writable(out)
    if out.is_dir() and any(out.iterdir()) and not replace_out(args):
        raise HeadflowError(f"--out {out}: exists and is not empty; pass --force to replace it")
    print(f"inputs valid; results would go to {out}")
    return {"checked": True, "out": str(out)}


def replace_out(args: argparse.Namespace) -> bool:
    """Whether the run may replace an existing non-empty output folder: with `--force`, or
    for the default folder (named by the config's hash, so it holds the same experiment)."""
    return bool(getattr(args, "force", False)) or getattr(args, "out", None) is None


def config_from_args(args: argparse.Namespace, **flag_keys: str) -> Config:
    """Load `args.config` with the `--set` overrides, then the command's own flags, given as
    `attribute="section.key"` (e.g. `dim="sim.dim"`), when set."""
    from headflow.dynamics import ConfigError, load_config
    from headflow.dynamics.config import parse_value

    overrides = list(args.set)
    given = {item.partition("=")[0].strip(): item for item in overrides}
    for attr, dotted in flag_keys.items():
        value = getattr(args, attr, None)
        if value is not None:
            # one key, two different values: neither may win silently
            if dotted in given and parse_value(given[dotted].partition("=")[2].strip()) != value:
                raise ConfigError(f"--set {given[dotted]} and --{attr.replace('_', '-')} "
                                  f"{value} both set {dotted}; give one")
            overrides.append(f"{dotted}={value}")
    return load_config(args.config, overrides)


def out_dir(args: argparse.Namespace, command: str, cfg: Config | None, extra: str = "") -> Path:
    from .._rundir import default_out

    if args.out is not None:
        return args.out
    return default_out(command, (cfg.to_toml() if cfg is not None else "") + extra)


def check_dims(cfg: Config, dims) -> None:
    """Every dimension of `dims` (`--dims` and friends) is one `sim.dim` could be: for the
    attention model it exceeds `model.F`; for another model the config validates with it (e.g.
    `sim.space = "overlaps"` needs `D ≥ N + B + 1`)."""
    from headflow.dynamics import ConfigError

    if cfg.model_kind == "attention":
        small = [d for d in dims if d < cfg.model.F + 1]
        if small:
            raise ConfigError(f"dimension {small[0]}: must exceed model.F = {cfg.model.F} (the "
                              "teacher needs F + 1 orthogonal directions)")
        return
    for d in dims:
        try:
            cfg.replace(**{"sim.dim": int(d)})
        except ConfigError as err:
            raise ConfigError(f"dimension {d}: {err}") from None


def require_units(cfg: Config, needs: str, at_least: int = 2) -> None:
    """A one-line error unless the model has `at_least` exchangeable student units (attention
    heads, `model.H`; committee hidden units, `model.K`); `needs` is the start of the reason,
    e.g. `"phases need"`."""
    from headflow.dynamics import ConfigError

    if cfg.model_kind == "attention":
        n, key, what = cfg.model.H, "model.H", "heads"
    else:
        n = cfg.build_model().n_students
        key = "model.K" if hasattr(cfg.model, "K") else f"model.kind = {cfg.model_kind!r}: units"
        what = "student units"
    if n < at_least:
        raise ConfigError(f"{key} = {n}: {needs} at least {at_least} {what}")


def show_progress() -> bool:
    """Progress bars only on a terminal."""
    return sys.stderr.isatty()


MAX_COUNT = 2**31 - 1
"""The largest count an option takes (paths, seeds, samples, dimensions, steps, ...): an array
or a loop of more items than this is beyond what a command can run on one machine."""

MAX_VALUE = 1e9
"""The largest magnitude of a real-valued option (times, learning rates, thresholds,
amplitudes, ...): none of them means anything beyond it (a time of 10⁹ is 10¹² SGD steps at
D = 1000), and a larger one is a typo or an overflow."""


def _number_parser(kind: type, ok, what: str):
    """An argparse `type=` that parses `kind` and accepts values with `ok(v)` (and, for
    integers, at most [`MAX_COUNT`][]; for reals, finite and at most [`MAX_VALUE`][] in
    magnitude), else names the expectation `what` in a one-line error."""
    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not ok(v):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        if not in_range(v):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r} (beyond "
                                             f"{MAX_COUNT if kind is int else MAX_VALUE:g})")
        return v
    return parse


def in_range(v: float) -> bool:
    """Whether a parsed option value is finite and within [`MAX_COUNT`][] (integers) or
    [`MAX_VALUE`][] (reals)."""
    if isinstance(v, int):
        return abs(v) <= MAX_COUNT
    return math.isfinite(v) and abs(v) <= MAX_VALUE


def split_items(text: str, what: str, *, allow_empty: bool = False) -> list[str]:
    """The comma-separated items of a list option; an empty item (`"1,,2"`, `","`) is an
    error, and so is an empty list unless `allow_empty` (then `""` is the empty list)."""
    if allow_empty and not text.strip():
        return []
    items = [x.strip() for x in text.split(",")]
    if not text.strip() or not all(items):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r} (an empty item)")
    return items


def no_repeats(values, text: str):
    """`values` unchanged, or a one-line error naming the repeated item."""
    seen: list = []
    for v in values:
        if v in seen:
            raise argparse.ArgumentTypeError(f"{v!r} is repeated in {text!r}")
        seen.append(v)
    return values


positive_int = _number_parser(int, lambda v: v >= 1, "a positive integer")
nonneg_int = _number_parser(int, lambda v: v >= 0, "an integer ≥ 0")
positive_float = _number_parser(float, lambda v: math.isfinite(v) and v > 0, "a positive number")
sample_count = _number_parser(int, lambda v: v >= MIN_SAMPLES,
                              f"a number of samples >= {MIN_SAMPLES} (fewer give no reliable "
                              "error bar)")


MODE_HELP = ("Mode: the ODE is integrated as gradient flow (the η² SGD-noise terms dropped; "
             "τ = ηt) unless the config sets [ode] sgd_noise = true explicitly (in CONFIG or "
             "with --set ode.sgd_noise=true); the config default (true) does not count. The "
             "output says which.")


def explicit_sgd_noise(config: str | Path | None, sets: list[str]) -> bool | None:
    """The value of `[ode] sgd_noise` when the user set it explicitly (in the TOML file or by
    `--set`, the last one winning), else None (the config default does not count)."""
    from headflow.dynamics.config import parse_value

    value = None
    if config is not None:
        try:
            raw = tomllib.loads(Path(config).read_text())
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            raw = {}  # load_config reports the problem
        ode = raw.get("ode", {})
        if isinstance(ode, dict) and "sgd_noise" in ode:
            value = ode["sgd_noise"]
    for item in sets:
        dotted, eq, text = item.partition("=")
        if eq and dotted.strip() == "ode.sgd_noise":
            value = parse_value(text.strip())
    return value if isinstance(value, bool) else None


def mode_of(args) -> str:
    return "sgd_noise" if explicit_sgd_noise(args.config, args.set) else "gradient_flow"


def describe_mode(mode: str) -> str:
    if mode == "sgd_noise":
        return ("mode: ODE with SGD noise (η² terms kept; [ode] sgd_noise = true was set "
                "explicitly)")
    return ("mode: gradient-flow ODE (η² SGD-noise terms dropped; set [ode] sgd_noise = true "
            "explicitly to keep them)")


def run_logger(args):
    quiet = getattr(args, "json", False) and not sys.stderr.isatty()

    def log(run) -> None:
        fp = run.fixed_point
        msg = (f"  {run.activation:13s} a={run.amplitude:<7.4g} H={run.H} η={run.lr:g} "
               f"[{run.mode}]: R = {run.risk:.5f} ± {run.risk_err:.1e} at t = {fp.t:.4g} "
               f"({'stationary' if fp.stationary else 'NOT stationary'}, ratio "
               f"{fp.check.ratio:.2g})")
        print(msg, file=sys.stderr if quiet else sys.stdout, flush=True)

    return log


def float_list(text: str) -> tuple[float, ...]:
    """`"0.5,1,2"` → `(0.5, 1.0, 2.0)`: finite numbers within [`MAX_VALUE`][], no empty or
    repeated item."""
    try:
        vals = tuple(float(x) for x in split_items(text, "comma-separated numbers"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}"
                                         ) from None
    if not all(in_range(v) for v in vals):
        raise argparse.ArgumentTypeError(f"expected comma-separated finite numbers of "
                                         f"magnitude <= {MAX_VALUE:g}, got {text!r}")
    return no_repeats(vals, text)


def int_list(text: str) -> tuple[int, ...]:
    """`"1,2,4"` → `(1, 2, 4)`: positive integers within [`MAX_COUNT`][], no empty or repeated
    item."""
    try:
        vals = tuple(int(x) for x in split_items(text, "comma-separated integers"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}"
                                         ) from None
    if min(vals) < 1 or not all(in_range(v) for v in vals):
        raise argparse.ArgumentTypeError(f"expected positive integers <= {MAX_COUNT}, got "
                                         f"{text!r}")
    return no_repeats(vals, text)


def activation_list(text: str) -> tuple[str, ...]:
    names = tuple(split_items(text, "comma-separated activation names"))
    known = known_activations()
    bad = [n for n in names if n not in known]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown activation(s) {bad}; choose from "
                                         f"{', '.join(known)}")
    return no_repeats(names, text)


def write_comparison(rd, cfg, *, theory: str = "ode", paths: int | None = None,
                     title: str = "", limit: bool = False, weight_seeds: int = 0) -> dict:
    """Run a comparison of SGD with `theory` (`"ode"`, `"ode-per-seed"` or `"sde"`,
    [`headflow.validation.experiments.compare.compare`][]; `paths` SDE paths, default `[sde]
    paths`) and write its files into the run folder `rd`: `sgd.npz`, the theory's arrays (`ode.npz`;
    `ode_per_seed.npz` or `sde.npz` with a run axis and each run's `escape` time, NaN when it
    never escapes), for ensembles `ensemble.npz` ([`ensemble_series`][]), `report.json` and
    `compare.png`. Returns the report.

    For ensembles, `limit` adds the D → ∞ ODE from the SGD seeds' mean start to the figure and
    the report (`limit`; `limit.npz`), and `weight_seeds > 0` runs that many seeds of SGD in
    weight space (`sgd_weights.npz`; `weight_space` in the report) and draws them too: with
    `sim.space = "overlaps"` the compared seeds come from the exact overlap chain and these are
    the weight-space runs it stands for."""
    import numpy as np

    from headflow.dynamics.ode import ODEResult
    from headflow.dynamics.sde import SDEResult

    from .._json import write as write_json
    from ..experiments.compare import (canonical_arrays, canonicalize, canonicalize_seeds,
                                       compare, ensemble_series, escapes_of,
                                       ode_from_seed_mean)
    from ..plots.fan import plot_fan
    from ..plots.trajectories import plot_trajectories

    with rd.timed("compare"):
        sgd, res, report = compare(cfg, theory=theory, paths=paths, progress=show_progress())
    rd.save_npz("sgd.npz", sgd.arrays())
    model = cfg.build_model()
    layout, observable = model.layout, model.escape_observable
    s, o = canonical_arrays(sgd, res, layout)
    if isinstance(res, ODEResult):
        rd.meta["ode_solver_steps"] = res.num_steps
        rd.save_npz("ode.npz", res.arrays())
        write_json(rd.path("report.json"), report)
        plot_trajectories(rd.path("compare.png"), s["t"], sgd=s, ode=o, title=title or (
            f"ODE (dashed) vs SGD seed mean ± std (units in canonical order), D={sgd.dim}, "
            f"{len(sgd.seeds)} seeds, {describe_model(cfg)}"))
        return report
    escapes = np.array([np.nan if e is None else e for e in report["escape"]["theory"]])
    if isinstance(res, SDEResult):
        rd.meta["sde"] = {**res.info, "paths_invalid": report["sde"]["paths_invalid"]}
        if report["sde"]["paths_invalid"]:
            print(f"headflow: warning: {report['sde']['paths_invalid']} of {report['paths']} "
                  "SDE paths left the PSD domain (first at t = "
                  f"{report['sde']['first_invalid_t']:.4g}); they are kept, see valid / "
                  "first_invalid in sde.npz", file=sys.stderr)
        what = f"SDE, {report['paths']} paths"
    else:
        rd.meta["ode_solver_steps"] = list(res.num_steps)
        what = ("ODE per seed" + (f" ({cfg.ode.form} form)" if cfg.model_kind == "attention"
                                  else ""))
    name = "sde.npz" if isinstance(res, SDEResult) else "ode_per_seed.npz"
    rd.save_npz(name, {**res.arrays(), "escape": escapes})
    rd.save_npz("ensemble.npz", ensemble_series(s, {**o, "t": s["t"]}, layout))
    curve = weights = None
    if limit:
        with rd.timed("limit"):
            ode = ode_from_seed_mean(cfg, sgd, progress=show_progress())
        rd.save_npz("limit.npz", ode.arrays())
        curve = canonicalize(ode.arrays(), layout)
        esc = escapes_of(s["t"], {k: v[None] for k, v in curve.items() if k != "t"}, layout,
                         observable=observable)[0]
        report["limit"] = {"risk_final": float(curve["risk"][-1]), "escape": esc}
    if weight_seeds:
        from headflow.sims import run_sgd

        with rd.timed("sgd_weights"):
            ws = run_sgd(cfg.replace(**{"sim.space": "weights"}), seeds=weight_seeds,
                         progress=show_progress())
        rd.save_npz("sgd_weights.npz", ws.arrays())
        weights = canonicalize_seeds(ws.arrays(), layout)
        final = weights["risk"][:, -1]
        report["weight_space"] = {
            "seeds": int(weight_seeds), "dtype": cfg.sim.dtype,
            "escape": escapes_of(weights["t"], weights, layout, observable=observable),
            "risk_final": float(final.mean()),
            "risk_final_sem": float(final.std(ddof=1) / np.sqrt(len(final)))
            if len(final) > 1 else None}
    write_json(rd.path("report.json"), report)
    sgd_escapes = [np.nan if e is None else e for e in report["escape"]["sgd"]]
    space = "overlap chain" if cfg.sim.space == "overlaps" else "weight space"
    plot_fan(rd.path("compare.png"), s["t"], o, overlay=s,
             escapes=(np.asarray(sgd_escapes, dtype=float), escapes),
             labels=(what, f"SGD ({space}), {len(sgd.seeds)} seeds"), title=title or (
                 f"theory vs SGD at D={sgd.dim}, {describe_model(cfg)}, units in canonical "
                 "order"), curve=curve, seeds=weights)
    return report


def require_attention(cfg: Config, command: str, reason: str | None = None) -> None:
    """A one-line error unless `cfg` is the attention model: `reason` says why `command` does
    not apply to another `model.kind`; without one, the command is not yet written for it."""
    from headflow.dynamics import ConfigError

    if cfg.model_kind == "attention":
        return
    if reason is not None:
        raise ConfigError(f"{command} does not apply to model.kind = "
                          f"{cfg.model_kind!r}: {reason}")
    raise ConfigError(f"{command} is not available for model.kind = {cfg.model_kind!r} yet; "
                      "for it use sgd, ode, sde, compare, sweep, schedule, fit, phases, escape "
                      "and scaling (docs/models.md)")


def describe_model(cfg: Config) -> str:
    """A few words naming the model of `cfg`, for figure titles."""
    if cfg.model_kind == "attention":
        return f"{cfg.model.activation}"
    if cfg.model_kind == "committee":
        m = cfg.model
        layers = "both layers" if m.train_second_layer else "first layer"
        return f"committee K={m.K}, M={m.M}, {m.activation}, {layers} trained, σ={m.noise:g}"
    return f"model.kind = {cfg.model_kind}"
