"""`python -m headflow.validation`: the `headflow` command line."""

from ._entry import entry

entry()
