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


def require_x64(what: str = "this computation") -> None:
    """Raise a one-line [`HeadflowError`][] unless JAX's float64 is on (headflow never turns it
    on behind the host program's back)."""
    import jax

    if not jax.config.read("jax_enable_x64"):
        raise HeadflowError(f"{what} runs in float64, which is off in JAX: call "
                            "jax.config.update('jax_enable_x64', True) at the start of the "
                            "program")


def memory_bytes() -> int:
    """The machine's physical memory (bytes)."""
    import os

    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):  # pragma: no cover - non-POSIX
        return 16 << 30


def check_memory(what: str, nbytes: float, fraction: float = 0.5) -> None:
    """Raise a one-line [`ConfigError`][] before computing when `what` would need more than
    `fraction` of the machine's memory (`nbytes`, an estimate of the largest array)."""
    limit = fraction * memory_bytes()
    if nbytes > limit:
        raise ConfigError(f"{what} would need {nbytes / 2**30:.3g} GiB of memory, more than "
                          f"the {limit / 2**30:.3g} GiB headflow allows itself on this machine "
                          f"({100 * fraction:.0f}% of {memory_bytes() / 2**30:.3g} GiB)")
