"""User-facing errors.

Every error a user can provoke with a bad input is a [`HeadflowError`][]: the command line prints
its message as one line (`headflow: error: ...`) and exits with status 2, with no traceback and no
partial result files. Library users catch the class (or its subclasses) as usual.
"""


class HeadflowError(Exception):
    """A problem with the user's input or with a run, explained in one line."""


class ConfigError(HeadflowError, ValueError):
    """An invalid configuration: unknown key, wrong type or out-of-range value."""


class DivergenceError(HeadflowError, FloatingPointError):
    """A run (SGD or ODE) produced NaN/inf order parameters."""
