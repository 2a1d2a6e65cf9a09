"""Fixtures of the GPT-2 tests: shape-checked imports, the shared data, small checkpoints.

The GPT-2 BPE files and War and Peace are read from `$HEADFLOW_GPT2_DATA` or
`../shared/data` beside the repository (never copied into it); tests that need them are skipped
with a reason when they are absent.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

if os.environ.get("HEADFLOW_TYPECHECK", "1") != "0" and "validation.gpt2" not in sys.modules:
    import jaxtyping

    jaxtyping.install_import_hook(["validation.gpt2"], "beartype.beartype")

import jax.random as jr  # noqa: E402

import validation.gpt2 as g  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("HEADFLOW_GPT2_DATA", REPO.parent / "shared" / "data"))
TOKENIZER = DATA / "gpt2-tokenizer"
TEXT = DATA / "war_and_peace.txt"


@pytest.fixture(scope="session")
def tokenizer_dir() -> Path:
    if not (TOKENIZER / "vocab.json").is_file() or not (TOKENIZER / "merges.txt").is_file():
        pytest.skip(f"GPT-2 BPE files not found in {TOKENIZER} (set HEADFLOW_GPT2_DATA)")
    return TOKENIZER


@pytest.fixture(scope="session")
def text_path() -> Path:
    if not TEXT.is_file():
        pytest.skip(f"War and Peace not found at {TEXT} (set HEADFLOW_GPT2_DATA)")
    return TEXT


@pytest.fixture(scope="session")
def small_config() -> g.GPT2Config:
    return g.GPT2Config(vocab_size=50257, n_positions=128, n_embd=64, n_layer=2, n_head=4)


@pytest.fixture(scope="session")
def small_checkpoint(tmp_path_factory, small_config, tokenizer_dir) -> Path:
    """A random 2-layer GPT-2 (full GPT-2 vocabulary) with the tokenizer files."""
    folder = tmp_path_factory.mktemp("ckpt") / "small"
    model = g.init_gpt2(small_config, jr.key(0), std=0.1)
    g.save_checkpoint(model, folder, tokenizer=tokenizer_dir)
    return folder
