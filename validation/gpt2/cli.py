"""`headflow gpt2 ...`: random checkpoints, extraction, the five bound experiments, training.

```
headflow gpt2 random-checkpoint [--layers 12 --heads 12 --width 768 --vocab 50257] --out DIR
headflow gpt2 extract --checkpoint DIR --text FILE --length L --out FILE.npz
headflow gpt2 bounds  --checkpoint DIR --text FILE [--length 1024] [--config FILE] [--set k=v]
headflow gpt2 train   --text FILE [--layers 3 --heads 4 --width 128 --context 1024 --steps 200]
```

The GPT-2 BPE files are read from `--tokenizer DIR`, else from the checkpoint folder, else from
`$HEADFLOW_GPT2_TOKENIZER`, else from `../shared/data/gpt2-tokenizer` next to the repository.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from dynamics import HeadflowError

from ..commands._common import nonneg_int, positive_float, positive_int

_TOKENIZER_ENV = "HEADFLOW_GPT2_TOKENIZER"


def _repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def default_tokenizer_dir() -> Path | None:
    """`$HEADFLOW_GPT2_TOKENIZER`, else `../shared/data/gpt2-tokenizer` beside the repository
    (or beside the working directory), if it exists."""
    candidates = []
    if os.environ.get(_TOKENIZER_ENV):
        candidates.append(Path(os.environ[_TOKENIZER_ENV]))
    for base in (_repo_root(), Path.cwd()):
        candidates.append(base.parent / "shared" / "data" / "gpt2-tokenizer")
    for c in candidates:
        if (c / "vocab.json").is_file() or (c / "tokenizer.json").is_file():
            return c
    return None


def _has_tokenizer(folder: Path) -> bool:
    return (folder / "tokenizer.json").is_file() or (folder / "vocab.json").is_file() \
        or (folder / "merges.txt").is_file()


def _tokenizer_dir(args, checkpoint: Path | None = None) -> Path:
    if getattr(args, "tokenizer", None) is not None:
        return Path(args.tokenizer)
    if checkpoint is not None and _has_tokenizer(checkpoint):
        return checkpoint
    found = default_tokenizer_dir()
    if found is None:
        where = f"{checkpoint} has no vocab.json/merges.txt and " if checkpoint else ""
        raise HeadflowError(f"no GPT-2 tokenizer found: {where}pass --tokenizer DIR (with "
                            f"vocab.json and merges.txt) or set {_TOKENIZER_ENV}")
    return found


def _fingerprint(*parts) -> str:
    text = "\n".join(str(p) for p in parts)
    return hashlib.sha256(text.encode()).hexdigest()


def _common(p: argparse.ArgumentParser, *, out_help: str) -> None:
    p.add_argument("--out", type=Path, default=None, metavar="DIR", help=out_help)
    p.add_argument("--json", action="store_true",
                   help="print one JSON summary object as the last line of stdout")


def register(subparsers) -> None:
    """Add `gpt2` and its sub-commands to the `headflow` parser."""
    parser_class = getattr(subparsers, "_parser_class", argparse.ArgumentParser)
    gp = subparsers.add_parser("gpt2", help="GPT-2 in JAX and the attention-normalization bounds",
                               description="GPT-2 with explicit attention, and the bounds of "
                               "'Limitations of Normalization in Attention' (arXiv 2508.17821) "
                               "checked on it.")
    sub = gp.add_subparsers(dest="gpt2_command", metavar="GPT2_COMMAND", parser_class=parser_class)
    sub.required = True

    p = sub.add_parser("random-checkpoint", help="write a random GPT-2 in the Hugging Face layout",
                       description="Write a randomly initialized GPT-2 (config.json, "
                       "model.safetensors, tokenizer files) that transformers loads too. "
                       "Default: the 124M shape.")
    p.add_argument("--layers", type=positive_int, default=12)
    p.add_argument("--heads", type=positive_int, default=12)
    p.add_argument("--width", type=positive_int, default=768, help="n_embd")
    p.add_argument("--vocab", type=positive_int, default=50257)
    p.add_argument("--positions", type=positive_int, default=1024, help="n_positions (context)")
    p.add_argument("--inner", type=positive_int, default=None, help="MLP width (default 4 × width)")
    p.add_argument("--std", type=positive_float, default=0.02, help="initializer_range")
    p.add_argument("--seed", type=nonneg_int, default=0)
    p.add_argument("--tokenizer", type=Path, default=None, metavar="DIR",
                   help="copy vocab.json/merges.txt (or tokenizer.json) from DIR "
                   "(default: the shared GPT-2 BPE files, when found)")
    _common(p, out_help="checkpoint folder (default: runs/gpt2-random-checkpoint-<hash>)")
    p.set_defaults(func=cmd_random_checkpoint)

    p = sub.add_parser("extract", help="per layer and head q, k, v and attention of one window",
                       description="Run the model on the first L tokens of a text (after "
                       "--offset) and save q, k, v (layers, heads, L, d_head), attn "
                       "(layers, heads, L, L) and tokens to an .npz file.")
    p.add_argument("--checkpoint", type=Path, required=True, metavar="DIR")
    p.add_argument("--text", type=Path, required=True, metavar="FILE")
    p.add_argument("--length", type=positive_int, required=True, metavar="L")
    p.add_argument("--offset", type=nonneg_int, default=0, help="tokens skipped first")
    p.add_argument("--tokenizer", type=Path, default=None, metavar="DIR")
    p.add_argument("--compress", action="store_true", help="np.savez_compressed")
    _common(p, out_help="output .npz file (default: runs/gpt2-extract-<hash>.npz)")
    p.set_defaults(func=cmd_extract)

    p = sub.add_parser("bounds", help="the five experiments of the bounds paper",
                       description="Distance vs L, distance vs N, critical top-N (KS test over "
                       "heads), separability N_s/N with Theorem 2's bounds, and gradient "
                       "sensitivity vs temperature; figures, report.json and curves.npz. Keys "
                       "of --config / --set: see docs/gpt2.md ([bounds] table).")
    p.add_argument("--checkpoint", type=Path, required=True, metavar="DIR")
    p.add_argument("--text", type=Path, required=True, metavar="FILE")
    p.add_argument("--tokenizer", type=Path, default=None, metavar="DIR")
    p.add_argument("--length", type=positive_int, default=None, metavar="L",
                   help="largest context length (default 1024, or the model's context if "
                   "smaller); lengths are the powers of two from 32 up to L")
    p.add_argument("--config", type=Path, default=None, metavar="FILE",
                   help="TOML file with a [bounds] table")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one [bounds] key (repeatable; TOML value)")
    p.add_argument("--windows", type=positive_int, default=None, help="consecutive text windows")
    p.add_argument("--offset", type=nonneg_int, default=None, help="tokens skipped first")
    p.add_argument("--vectors", choices=("value", "hidden"), default=None,
                   help="token vectors x: value vectors (default) or layer inputs")
    p.add_argument("--mc-samples", type=positive_int, default=None)
    p.add_argument("--seed", type=nonneg_int, default=None)
    p.add_argument("--no-plots", action="store_true", help="skip the figures")
    _common(p, out_help="result folder (default: runs/gpt2-bounds-<hash>)")
    p.set_defaults(func=cmd_bounds)

    p = sub.add_parser("train", help="train a small GPT-2 on a text (CPU, minutes)",
                       description="Train a small GPT-2-architecture model with the GPT-2 BPE on "
                       "a text and save it in the Hugging Face layout.")
    p.add_argument("--text", type=Path, required=True, metavar="FILE")
    p.add_argument("--tokenizer", type=Path, default=None, metavar="DIR")
    p.add_argument("--layers", type=positive_int, default=3)
    p.add_argument("--heads", type=positive_int, default=4)
    p.add_argument("--width", type=positive_int, default=128)
    p.add_argument("--context", type=positive_int, default=1024)
    p.add_argument("--steps", type=positive_int, default=200)
    p.add_argument("--batch", type=positive_int, default=2)
    p.add_argument("--lr", type=positive_float, default=3e-3)
    p.add_argument("--predict-fraction", type=positive_float, default=0.125,
                   help="fraction of positions whose next token is predicted each step")
    p.add_argument("--max-minutes", type=positive_float, default=None,
                   help="stop early after this many minutes of training")
    p.add_argument("--seed", type=nonneg_int, default=0)
    _common(p, out_help="checkpoint folder (default: runs/gpt2-train-<hash>)")
    p.set_defaults(func=cmd_train)


# ----------------------------------------------------------------------------------------------


def cmd_random_checkpoint(args) -> dict:
    import jax.random as jr
    import tomli_w

    from .._rundir import default_out, run_dir
    from ._checkpoint import save_checkpoint
    from ._config import GPT2Config
    from ._model import init_gpt2

    config = GPT2Config(vocab_size=args.vocab, n_positions=args.positions, n_embd=args.width,
                        n_layer=args.layers, n_head=args.heads, n_inner=args.inner)
    tokenizer = args.tokenizer if args.tokenizer is not None else default_tokenizer_dir()
    settings = {"random_checkpoint": {"layers": args.layers, "heads": args.heads,
                                      "width": args.width, "vocab": args.vocab,
                                      "positions": args.positions, "inner": args.inner or 0,
                                      "std": args.std, "seed": args.seed}}
    toml = tomli_w.dumps(settings)
    out = args.out or default_out("gpt2-random-checkpoint", toml)
    with run_dir(out, command="gpt2 random-checkpoint", config_toml=toml,
                 meta={"seed": args.seed, "dtype": "float32"}) as run:
        with run.timed("init"):
            model = init_gpt2(config, jr.key(args.seed), std=args.std)
        with run.timed("save"):
            save_checkpoint(model, run.tmp, tokenizer=tokenizer)
    return {"out": str(out), "parameters": config.num_params(), "n_layer": config.n_layer,
            "n_head": config.n_head, "n_embd": config.n_embd, "vocab_size": config.vocab_size,
            "tokenizer": str(tokenizer) if tokenizer is not None else None}


def _load_inputs(args, length: int, *, windows: int = 1, offset: int = 0):
    from ._checkpoint import load_checkpoint
    from ._tokenizer import load_tokenizer, read_text, text_tokens

    model = load_checkpoint(args.checkpoint)
    if length > model.config.n_positions:
        raise HeadflowError(f"--length {length} exceeds the model's context n_positions="
                            f"{model.config.n_positions}")
    tok_dir = _tokenizer_dir(args, Path(args.checkpoint))
    tokenizer = load_tokenizer(tok_dir)
    text = read_text(args.text)
    tokens = text_tokens(tokenizer, text, length, offset=offset, windows=windows,
                         source=f"text {args.text}", vocab_size=model.config.vocab_size)
    return model, tokens, tok_dir


def cmd_extract(args) -> dict:
    import jax.numpy as jnp
    import numpy as np

    from .._rundir import default_out
    from ._experiments import _extract

    out = args.out or default_out("gpt2-extract", _fingerprint(
        Path(args.checkpoint).resolve(), Path(args.text).resolve(), args.length,
        args.offset)).with_suffix(".npz")
    out = Path(out)
    if out.suffix != ".npz":
        out = out.with_name(out.name + ".npz")
    if out.exists() and out.is_dir():
        raise HeadflowError(f"--out {out}: is a folder; gpt2 extract writes a .npz file")
    model, tokens, _ = _load_inputs(args, args.length, offset=args.offset)
    t = time.perf_counter()
    res = _extract(model, jnp.asarray(tokens[0]), ("q", "k", "v", "attn"))
    arrays = {"q": np.asarray(res.q), "k": np.asarray(res.k), "v": np.asarray(res.v),
              "attn": np.asarray(res.attn), "tokens": np.asarray(tokens[0])}
    wall = time.perf_counter() - t
    try:
        out.absolute().parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.absolute().parent)
        try:
            with os.fdopen(fd, "wb") as f:
                (np.savez_compressed if args.compress else np.savez)(f, **arrays)
            os.replace(tmp, out)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except OSError as err:
        raise HeadflowError(f"--out {out}: cannot write ({err.strerror})") from None
    return {"out": str(out), "length": args.length, "layers": model.config.n_layer,
            "heads": model.config.n_head, "d_head": model.config.d_head,
            "forward_s": round(wall, 3)}


def _bounds_config(args, n_positions: int):
    from ._bounds_config import BoundsConfig, parse_override

    overrides = dict(parse_override(s) for s in args.set)
    for attr, key in (("windows", "windows"), ("offset", "offset"), ("vectors", "vectors"),
                      ("mc_samples", "mc_samples"), ("seed", "seed")):
        value = getattr(args, attr)
        if value is not None:
            overrides[key] = value
    text = ""
    if args.config is not None:
        try:
            text = Path(args.config).read_text()
        except OSError as err:
            raise HeadflowError(f"--config {args.config}: cannot read ({err.strerror})") from None
    base = BoundsConfig.from_toml(text, {})
    explicit = set(overrides) | set(_toml_keys(text))
    if "lengths" not in explicit:
        top = args.length or min(1024, n_positions)
        lengths = [2 ** p for p in range(5, 11) if 2 ** p < top] + [top]
        lengths = [v for v in lengths if v >= 2]
        overrides["lengths"] = lengths
        if "critical_grid" not in explicit:
            overrides["critical_grid"] = []
        biggest = max(lengths)
        for key, default in (("n_values", base.n_values), ("separability_n", base.separability_n)):
            if key not in explicit:
                overrides[key] = [n for n in default if n < biggest] or [1]
        if "n_fixed" not in explicit and base.n_fixed >= min(lengths):
            overrides["n_fixed"] = max(1, min(lengths) // 2)
    elif args.length is not None:
        raise HeadflowError("give either --length or bounds.lengths, not both")
    return BoundsConfig.from_toml(text, overrides)


def _toml_keys(text: str) -> list[str]:
    import tomllib

    if not text:
        return []
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return []
    return list(data.get("bounds", {}).keys()) + [k for k, v in data.items() if not isinstance(v, dict)]


def cmd_bounds(args) -> dict:
    import numpy as np

    from .._rundir import check_writable, default_out, run_dir
    from ._config import GPT2Config
    from ._experiments import run_bounds
    from ._plots import plot_bounds

    t0 = time.perf_counter()
    n_positions = GPT2Config.from_json(Path(args.checkpoint) / "config.json").n_positions \
        if Path(args.checkpoint).is_dir() else 1024
    config = _bounds_config(args, n_positions)
    toml = config.to_toml()
    out = args.out or default_out("gpt2-bounds", _fingerprint(
        toml, Path(args.checkpoint).resolve(), Path(args.text).resolve(), args.tokenizer))
    check_writable(out)
    model, tokens, tok_dir = _load_inputs(args, config.length, windows=config.windows,
                                          offset=config.offset)
    with run_dir(out, command="gpt2 bounds", config_toml=toml,
                 meta={"seed": config.seed, "dtype": "float32",
                       "checkpoint": str(Path(args.checkpoint).resolve()),
                       "text": str(Path(args.text).resolve()), "tokenizer": str(tok_dir)}) as run:
        with run.timed("experiments"):
            result = run_bounds(model, tokens, config)
        report = dict(result.report)
        report["checkpoint"] = str(Path(args.checkpoint).resolve())
        report["text"] = str(Path(args.text).resolve())
        report["wall_s"]["command_total"] = round(time.perf_counter() - t0, 3)
        if not args.no_plots:
            with run.timed("plots"):
                report["figures"] = plot_bounds(report, result.curves, run.tmp)
        np.savez(run.path("curves.npz"), **result.curves)
        run.path("report.json").write_text(json.dumps(report, indent=2, default=_jsonable) + "\n")
    return {"critical_n_over_L": report["critical_n_over_L"],
            "critical_N": dict(zip(map(str, report["critical_topn"]["L"]),
                                   report["critical_topn"]["critical_N"])),
            "critical_N_stable": dict(zip(map(str, report["critical_topn"]["L"]),
                                          report["critical_topn"]["critical_N_stable"])),
            "separability_plateau": report["separability_plateau"],
            "rigorous_violations": report["rigorous_violations"],
            "gradient_slope_T_below_0.1": report["gradient"]["slope_T_below_0.1"]["jacobian_norm"],
            "gradient_drop_orders_T_ge_1": report["gradient"]["drop_orders_T_ge_1"]["jacobian_norm"],
            "wall_s": round(time.perf_counter() - t0, 3), "out": str(out)}


def _jsonable(obj):
    import numpy as np

    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return str(obj)


def cmd_train(args) -> dict:
    import tomli_w

    from .._rundir import default_out, run_dir
    from ._checkpoint import save_checkpoint
    from ._tokenizer import encode, load_tokenizer, read_text
    from ._train import TrainConfig, train_gpt2

    cfg = TrainConfig(n_layer=args.layers, n_head=args.heads, n_embd=args.width,
                      context=args.context, steps=args.steps, batch=args.batch, lr=args.lr,
                      predict_fraction=args.predict_fraction,
                      max_minutes=args.max_minutes or 0.0, seed=args.seed)
    settings = {"train": {name: getattr(cfg, name) for name in cfg.__dataclass_fields__}}
    toml = tomli_w.dumps(settings)
    out = args.out or default_out("gpt2-train", toml + str(Path(args.text).resolve()))
    tok_dir = _tokenizer_dir(args)
    tokenizer = load_tokenizer(tok_dir)
    tokens = encode(tokenizer, read_text(args.text))
    vocab = tokenizer.get_vocab_size()
    with run_dir(out, command="gpt2 train", config_toml=toml,
                 meta={"seed": args.seed, "dtype": "float32", "text": str(Path(args.text).resolve()),
                       "tokenizer": str(tok_dir)}) as run:
        with run.timed("train"):
            model, log = train_gpt2(tokens, cfg, vocab_size=vocab)
        with run.timed("save"):
            save_checkpoint(model, run.tmp, tokenizer=tok_dir)
        run.path("train_log.json").write_text(json.dumps(log, indent=1) + "\n")
    return {"out": str(out), "parameters": log["parameters"], "steps": log["steps"],
            "tokens_seen": log["tokens_seen"], "loss_first": log["loss_first"],
            "loss_last_10_mean": log["loss_last_10_mean"], "val_loss_initial": log["val_loss_initial"],
            "val_loss_final": log["val_loss_final"], "train_s": round(log["train_s"], 2)}


if __name__ == "__main__":  # pragma: no cover
    from validation.cli import main

    sys.exit(main(["gpt2", *sys.argv[1:]]))
