"""Bad values for every numeric and list-valued option of every command: one line
`headflow: error: ...`, exit status 2, nothing left behind.

The options come from the argparse parsers themselves ([`options`][]), so an option added later
is covered without touching this file: an option whose `type=` parses a number is numeric, one
whose `type=` gives a list or tuple is list-valued, and `--set`/`--grid` take `section.key=value`
items. Hypothesis draws an option and a bad value of its kind (empty, NaN, ±inf, negative, huge,
non-numeric; for lists also an empty item, a repeated item, one bad item among good ones) and
runs the command in-process, with `--check` where the command has it (every input is validated
before anything is computed, so bad input must be caught there).
"""

from __future__ import annotations

import argparse

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headflow.validation.cli import build_parser, main
from headflow.validation.commands._common import MAX_COUNT, MAX_VALUE

PROBES = ("1", "0.5", "250,500", "0.1,1", "softmax", "training.lr")
"""Strings tried on each option's `type=` to find its kind and one valid value."""

KEY_VALUE = ("--set", "--grid")
"""Options without a `type=` whose values are `section.key=value` items."""


def _leaves(parser: argparse.ArgumentParser, path=()):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
    for a in subs:
        for name, sub in a.choices.items():
            yield from _leaves(sub, (*path, name))


def _kind(action: argparse.Action) -> tuple[str, str] | None:
    """`(kind, a valid value)` of an option: `"int"`, `"float"`, `"list"` or `"key=value"`;
    None for flags, choices, paths and free strings."""
    if not action.option_strings or action.choices is not None or action.nargs == 0:
        return None
    if action.type is None:
        return ("key=value", "training.lr=0.5") if action.option_strings[-1] in KEY_VALUE \
            else None
    for text in PROBES:
        try:
            v = action.type(text)
        except (argparse.ArgumentTypeError, ValueError, TypeError):
            continue
        if isinstance(v, bool):
            return None
        if isinstance(v, int):
            return "int", text
        if isinstance(v, float):
            return "float", text
        if isinstance(v, (list, tuple)) and v:
            return "list", text
        return None
    return None


def options() -> list[tuple[tuple[str, ...], str, str, str, bool]]:
    """Every `(command path, option, kind, valid value, has --check)` of the parser."""
    out = []
    for path, parser in _leaves(build_parser()):
        flags = {s for a in parser._actions for s in a.option_strings}
        for a in parser._actions:
            kind = _kind(a)
            if kind is not None:
                out.append((path, a.option_strings[-1], *kind, "--check" in flags))
    return out


OPTIONS = options()


def test_options_are_found():
    """The enumeration sees the options it is meant to (a guard against an empty walk)."""
    found = {(" ".join(p), o): k for p, o, k, _, _ in OPTIONS}
    assert found[("sde", "--paths")] == "int" and found[("escape", "--dims")] == "list"
    assert found[("activations", "--amplitudes")] == "list"
    assert found[("phases", "--threshold")] == "float" and found[("sweep", "--grid")] \
        == "key=value"
    assert found[("gpt2 train", "--lr")] == "float" and found[("fit", "--params")] == "list"
    assert len(OPTIONS) > 80


NON_NUMERIC = st.sampled_from(["x", "1x", "one", "0x10", "[1]", "1,2", "--", "1.2.3", "e"])
EMPTY = st.sampled_from(["", " ", "\t"])
NON_FINITE = st.sampled_from(["nan", "NaN", "inf", "-inf", "Infinity", "1e400"])
NEGATIVE = st.one_of(st.integers(max_value=-1).map(str),
                     st.floats(max_value=-1e-6, allow_nan=False, allow_infinity=False)
                     .map(repr))
HUGE = st.one_of(st.integers(min_value=MAX_COUNT + 1).map(str),
                 st.floats(min_value=10 * MAX_VALUE, allow_nan=False, allow_infinity=False)
                 .map(repr))


def bad_scalar(kind: str) -> st.SearchStrategy[str]:
    bad = st.one_of(NON_NUMERIC, EMPTY, NON_FINITE, NEGATIVE, HUGE)
    return bad if kind == "float" else st.one_of(bad, st.sampled_from(["0.5", "2.0", "1e3"]))


@st.composite
def bad_list(draw, good: str) -> str:
    items = good.split(",")
    how = draw(st.sampled_from(["empty", "empty item", "repeated", "bad item"]))
    if how == "empty":
        return draw(st.sampled_from([",", " , ", ",,"]))
    if how == "empty item":
        i = draw(st.integers(0, len(items)))
        return ",".join([*items[:i], "", *items[i:]])
    if how == "repeated":
        i = draw(st.integers(0, len(items) - 1))
        return ",".join([*items, items[i]])
    i = draw(st.integers(0, len(items) - 1))
    item = draw(st.one_of(NON_NUMERIC.filter(lambda s: "," not in s), NON_FINITE, NEGATIVE,
                          HUGE))
    return ",".join([*items[:i], item, *items[i + 1:]])


@st.composite
def bad_key_value(draw) -> str:
    key = draw(st.sampled_from(["training.lr", "sim.dim", "training.t_max"]))
    value = draw(st.one_of(EMPTY, NON_FINITE, NEGATIVE, st.sampled_from(["x", "[]", "{}"])))
    return draw(st.sampled_from([f"{key}={value}", f"={value}", key, f"nosuch.key={value}",
                                 f"{key}=0.5,,1", f"{key}=0.5,0.5"]))


@st.composite
def cases(draw):
    path, option, kind, good, check = draw(st.sampled_from(OPTIONS))
    if kind in ("int", "float"):
        value = draw(bad_scalar(kind))
    elif kind == "list":
        value = draw(bad_list(good))
    else:
        value = draw(bad_key_value())
    return path, option, value, check


def _empty_is_documented(path, option, value) -> bool:
    """A blank value that the option's parser takes as the empty list, a documented "nothing"
    (`escape --extrapolate ""`)."""
    if value.strip():
        return False
    parser = dict(_leaves(build_parser()))[path]
    action = next(a for a in parser._actions if option in a.option_strings)
    try:
        return action.type is not None and len(action.type(value)) == 0
    except (argparse.ArgumentTypeError, ValueError, TypeError):
        return False


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Valid values of the commands' required options (an option added as required needs one
    here: the test says which)."""
    root = tmp_path_factory.mktemp("inputs")
    t = np.linspace(0.0, 4.0, 9)
    np.savez(root / "curve.npz", t=t, risk=0.5 + 0.1 * np.exp(-t))
    (root / "text.txt").write_text("the cat sat on the mat. " * 40)
    (root / "ckpt").mkdir()
    return {"--curve": str(root / "curve.npz"), "--params": "training.lr", "--budget": "4",
            "--grid": "training.lr=0.5", "--text": str(root / "text.txt"),
            "--checkpoint": str(root / "ckpt"), "--length": "8"}


def _required(path, inputs, option) -> list[str]:
    parser = dict(_leaves(build_parser()))[path]
    argv = []
    for a in parser._actions:
        if a.required and a.option_strings and option not in a.option_strings:
            name = a.option_strings[-1]
            if name == "--out":
                continue
            assert name in inputs, f"{' '.join(path)} {name}: give a valid value in `inputs`"
            argv += [name, inputs[name]]
    return argv


@settings(max_examples=250, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=cases())
def test_bad_option_values(tmp_path_factory, capsys, inputs, case):
    path, option, value, check = case
    if _empty_is_documented(path, option, value):
        return
    root = tmp_path_factory.mktemp("opt")
    argv = [*path, *_required(path, inputs, option), f"{option}={value}",
            *(["--check"] if check else []), "--out", str(root / "deep" / "out")]
    try:
        code = main(argv)
    except SystemExit as ex:
        code = ex.code
    err = capsys.readouterr().err.strip()
    assert code == 2, (argv, code, err[-2000:])
    assert len(err.splitlines()) == 1 and err.startswith("headflow") and "error:" in err, \
        (argv, err)
    assert list(root.iterdir()) == [], (argv, sorted(root.rglob("*")))
