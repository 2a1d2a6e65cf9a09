"""Caches between runs: JAX's persistent compilation cache, the ODE's exported programs
(`headflow.dynamics.set_export_cache`), the generated symbolic code and the quasi-Monte Carlo
node sets (`headflow.dynamics.set_node_cache`).

All live in one user folder: `$HEADFLOW_CACHE_DIR`, else `$XDG_CACHE_HOME/headflow`, else
`~/.cache/headflow`. `headflow --no-cache …` or `HEADFLOW_CACHE=0` turns them off. A second
run of the same problem (other values allowed) then skips compilation, the sympy derivation,
the tracing of the ODE's solve and drawing its nodes (with the import of `scipy.stats`). The
results cache of the same folder (`headflow.validation._results`) skips even that for a
repeated `headflow ode`. Importing this module imports nothing heavy (JAX by [`configure`][];
sympy only by the commands that derive or generate code).
"""

from __future__ import annotations

import os
from pathlib import Path

MIN_COMPILE_S = 0.0
"""Every program is cached: on CPU even a small one (an eager operation, a start-up helper)
takes 0.05–0.1 s to compile and milliseconds to read back, and a run has dozens of them."""


def cache_root() -> Path:
    explicit = os.environ.get("HEADFLOW_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "headflow"


def jax_cache_options(root: Path) -> dict[str, str | float | int]:
    """JAX's settings of the persistent compilation cache in `root` (what [`configure`][] sets;
    a child process, such as a notebook kernel, reads them from the upper-case environment
    variables of the same names)."""
    return {"jax_compilation_cache_dir": str(root / "jax"),
            "jax_persistent_cache_min_compile_time_secs": MIN_COMPILE_S,
            "jax_persistent_cache_min_entry_size_bytes": 0}


def _off() -> None:
    """All caches off (also when an earlier call in this process had turned them on)."""
    import jax

    from headflow.dynamics import set_export_cache, set_node_cache, set_source_cache

    set_source_cache(None)
    set_export_cache(None)
    set_node_cache(None)
    jax.config.update("jax_compilation_cache_dir", None)


def configure(enabled: bool = True) -> Path | None:
    """Turn the caches on in the cache folder (None, and all off, when disabled or when the
    folder cannot be created: a cache is never a reason to fail)."""
    if not enabled or os.environ.get("HEADFLOW_CACHE", "1").strip().lower() in ("0", "off",
                                                                                 "false", "no"):
        _off()
        return None
    import jax

    from headflow.dynamics import set_export_cache, set_node_cache, set_source_cache

    root = cache_root()
    options = jax_cache_options(root)
    try:
        Path(str(options["jax_compilation_cache_dir"])).mkdir(parents=True, exist_ok=True)
    except OSError:
        _off()
        return None
    for option, value in options.items():
        jax.config.update(option, value)
    set_source_cache(root / "symbolic")
    set_export_cache(root / "exported")
    set_node_cache(root / "nodes")
    return root
