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


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {v}")
    return v


def nonneg_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer ≥ 0, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected an integer ≥ 0, got {v}")
    return v


def positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return v
