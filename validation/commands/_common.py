"""Pieces shared by the commands: config arguments, the run folder, progress, summaries."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from dynamics import Config, load_config

from .._rundir import default_out


def add_config_args(p: argparse.ArgumentParser, *, config_required: bool = False) -> None:
    """`CONFIG`, `--set section.key=value` (repeatable), `--out DIR`, `--json`."""
    p.add_argument("config", metavar="CONFIG", nargs=None if config_required else "?",
                   help="TOML configuration file (defaults for every missing key)")
    add_set_arg(p)
    add_out_args(p)


def add_set_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--set", metavar="SECTION.KEY=VALUE", action="append", default=[],
                   help="override one config key (repeatable); VALUE in TOML syntax")


def add_out_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", metavar="DIR", type=Path, default=None,
                   help="result folder (default: runs/<command>-<config hash>)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON summary object as the last line of stdout")


def config_from_args(args: argparse.Namespace, **flag_keys: str) -> Config:
    """Load `args.config` with the `--set` overrides, then the command's own flags, given as
    `attribute="section.key"` (e.g. `dim="sim.dim"`), when set."""
    overrides = list(args.set)
    for attr, dotted in flag_keys.items():
        value = getattr(args, attr, None)
        if value is not None:
            overrides.append(f"{dotted}={value}")
    return load_config(args.config, overrides)


def out_dir(args: argparse.Namespace, command: str, cfg: Config | None, extra: str = "") -> Path:
    if args.out is not None:
        return args.out
    return default_out(command, (cfg.to_toml() if cfg is not None else "") + extra)


def show_progress() -> bool:
    """Progress bars only on a terminal."""
    return sys.stderr.isatty()


def _number_parser(kind: type, ok, what: str):
    """An argparse `type=` that parses `kind` and accepts values with `ok(v)`, else names the
    expectation `what` in a one-line error."""
    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not ok(v):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return v
    return parse


positive_int = _number_parser(int, lambda v: v >= 1, "a positive integer")
nonneg_int = _number_parser(int, lambda v: v >= 0, "an integer ≥ 0")
positive_float = _number_parser(float, lambda v: math.isfinite(v) and v > 0, "a positive number")


def json_default(obj):
    """`json.dumps(default=...)` for what results hold besides plain Python: numpy scalars and
    arrays, paths."""
    import numpy as np

    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if hasattr(obj, "__fspath__"):
        return str(obj)
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")
