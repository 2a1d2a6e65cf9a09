"""The defaults that the documentation quotes are the code's defaults.

`docs/activations.md` ("Nodes") states the nodes `headflow activations` runs on when nothing is
set: the `[ode]` section's `expectation` and `samples`, and the command's `--risk-samples` and
`--bayes-samples`; `docs/ode.md` states the same `[ode]` defaults ("Defaults: `qmc` with 16384
nodes"). Each number is read from the page by a regular expression on that sentence and from the
code's own objects: the declared defaults of the dataclass `headflow.dynamics.config.ODESection`
(the attention model, which `headflow activations` requires, takes the section's default
expectation: its `default_expectation` returns None) and the argparse defaults of the
`activations` subcommand. A sentence reworded so that its regular expression no longer matches
fails here too, naming the page, so the check cannot pass by matching nothing. Nothing is
compiled: only the modules that declare the defaults are imported.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# (page, pattern): each pattern has named groups for the defaults it quotes.
QUOTES = {
    "activations-ode": (
        "docs/activations.md",
        r'by default `expectation = "(?P<expectation>\w+)"` and `samples = (?P<samples>\d+)`'),
    "activations-risk-samples": (
        "docs/activations.md",
        r"`--risk-samples` scrambled-Sobol nodes \(default (?P<risk_samples>\d+)\)"),
    "activations-bayes-samples": (
        "docs/activations.md", r"`--bayes-samples` \(default (?P<bayes_samples>\d+)\)"),
    "ode": ("docs/ode.md", r"\*\*Defaults: `(?P<expectation>\w+)` with (?P<samples>\d+) nodes"),
}


def quoted(page: str, pattern: str) -> dict[str, str]:
    """The groups of `pattern` in `page`, its whitespace (line breaks) collapsed to single
    spaces; fails when the sentence is not there."""
    text = " ".join((ROOT / page).read_text(encoding="utf-8").split())
    match = re.search(pattern, text)
    assert match is not None, f"{page}: the sentence quoting the defaults is gone ({pattern})"
    return match.groupdict()


def code_defaults() -> dict[str, str]:
    """The defaults as the code declares them, as strings."""
    from headflow.dynamics.config import ODESection
    from headflow.dynamics.models.attention import Model
    from headflow.validation.commands import activations

    ode = {f.name: f.default for f in dataclasses.fields(ODESection)}
    expectation = Model.default_expectation(None, None) or ode["expectation"]

    subcommands = argparse.ArgumentParser().add_subparsers()
    activations.register(subcommands)
    command = subcommands.choices["activations"]
    return {"expectation": str(expectation), "samples": str(ode["samples"]),
            "risk_samples": str(command.get_default("risk_samples")),
            "bayes_samples": str(command.get_default("bayes_samples"))}


@pytest.mark.parametrize(("page", "pattern"), list(QUOTES.values()), ids=list(QUOTES))
def test_docs_quote_the_code_defaults(page, pattern):
    code = code_defaults()
    for name, value in quoted(page, pattern).items():
        assert value == code[name], (
            f"{page} quotes the default {name} = {value}; the code's is {code[name]}")
