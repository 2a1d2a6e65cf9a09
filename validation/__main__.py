"""`python -m validation`: the `headflow` command line."""

from ._entry import entry

entry()
