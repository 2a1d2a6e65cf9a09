"""The GPT-2 byte-level BPE (through the `tokenizers` library) and text windows."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from headflow.dynamics import HeadflowError

from ._data import BPE_FILES, bpe_files


def load_tokenizer(path: str | os.PathLike):
    """Load the GPT-2 BPE tokenizer.

    **Arguments:**

    - `path`: a folder holding `tokenizer.json`, or the two BPE files (`vocab.json` and
      `merges.txt`, or OpenAI's names for them, `encoder.json` and `vocab.bpe`; see
      [`bpe_files`][]); or the path of a `tokenizer.json` file.

    **Returns:** a `tokenizers.Tokenizer`.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    path = Path(path)
    if (
        path.is_file()
        and path.suffix == ".json"
        and path.name not in ("vocab.json", "encoder.json")
    ):
        return _from_json(path)
    if not path.is_dir():
        raise HeadflowError(
            f"tokenizer {path}: not found; pass a folder with vocab.json and "
            "merges.txt (or tokenizer.json)"
        )
    if (path / "tokenizer.json").is_file():
        return _from_json(path / "tokenizer.json")
    files = bpe_files(path)
    if files is None:
        missing = [
            name
            for name, aliases in BPE_FILES.items()
            if not any((path / a).is_file() for a in aliases)
        ]
        raise HeadflowError(
            f"tokenizer {path}: missing {' and '.join(missing)}; pass --tokenizer "
            "DIR with the GPT-2 vocab.json and merges.txt (or encoder.json and "
            "vocab.bpe, or tokenizer.json)"
        )
    try:
        tok = Tokenizer(models.BPE.from_file(str(files["vocab.json"]), str(files["merges.txt"])))
    except Exception as err:
        msg = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise HeadflowError(
            f"tokenizer {path}: cannot read {files['vocab.json'].name}/"
            f"{files['merges.txt'].name} ({msg})"
        ) from None
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def has_tokenizer(folder: str | os.PathLike) -> bool:
    """Whether `folder` holds a GPT-2 tokenizer (`tokenizer.json` or both BPE files)."""
    folder = Path(folder)
    return (folder / "tokenizer.json").is_file() or bpe_files(folder) is not None


def _from_json(path: Path):
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(str(path))
    except Exception as err:
        msg = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise HeadflowError(f"tokenizer {path}: cannot read ({msg})") from None


def read_text(path: str | os.PathLike) -> str:
    """Read a UTF-8 text file, with a one-line error when it is missing or not text."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise HeadflowError(f"text {path}: not found") from None
    except (OSError, UnicodeDecodeError) as err:
        raise HeadflowError(f"text {path}: cannot read as UTF-8 ({err})") from None


def encode(tokenizer, text: str) -> np.ndarray:
    """Token ids of `text` as an int32 array."""
    return np.asarray(tokenizer.encode(text).ids, dtype=np.int32)


def text_tokens(
    tokenizer,
    text: str,
    length: int,
    *,
    offset: int = 0,
    windows: int = 1,
    source: str = "text",
    vocab_size: int | None = None,
) -> np.ndarray:
    """Consecutive windows of `length` tokens from `text`.

    Only as much of the text as needed is tokenized (the prefix is grown until it suffices).

    **Arguments:**

    - `tokenizer`: from [`load_tokenizer`][].
    - `text`: the text.
    - `length`: tokens per window (L).
    - `offset`: tokens skipped at the start.
    - `windows`: number of consecutive, non-overlapping windows.
    - `source`: name of the text, for error messages.
    - `vocab_size`: if given, token ids must be below it (the model's vocabulary).

    **Returns:** int32 array `(windows, length)`.

    Raises [`headflow.dynamics.HeadflowError`][] when the text is shorter than needed.
    """
    if length < 1 or windows < 1 or offset < 0:
        raise HeadflowError(
            f"need length ≥ 1, windows ≥ 1 and offset ≥ 0 (got {length}, {windows}, {offset})"
        )
    need = offset + windows * length
    chars = max(4 * need + 256, 4096)
    while True:
        ids = encode(tokenizer, text[:chars])
        if chars >= len(text):
            break
        # The last tokens of a prefix may belong to a word cut in the middle: keep a margin.
        if len(ids) - 64 >= need:
            break
        chars *= 2
    if len(ids) < need:
        raise HeadflowError(
            f"{source} has only {len(ids)} tokens but {need} are needed "
            f"({windows} window(s) of L={length} after offset {offset}); use a "
            "longer text or a smaller --length"
        )
    out = ids[offset:need].reshape(windows, length)
    if vocab_size is not None and out.size and int(out.max()) >= vocab_size:
        raise HeadflowError(
            f"{source}: token id {int(out.max())} is outside the model's "
            f"vocabulary (vocab_size={vocab_size}); use the model's own tokenizer"
        )
    return out
