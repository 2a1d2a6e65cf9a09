"""What building the `headflow` parser needs from the heavy modules, without importing them.

`headflow --help`, `headflow COMMAND --help` and a bad argument that argparse rejects import only
the standard library and light modules of ours (tests/test_startup.py checks that JAX, sympy,
scipy, matplotlib, ... stay out). The choices and defaults shown in the help come from here:

- constants of `dynamics` from `dynamics/_constants.py`, loaded without running
  `dynamics/__init__.py` (which imports JAX); `headflow.dynamics.measures` and friends re-export
  them, so each has one definition;
- constants of the experiments from `validation/experiments/_constants.py`;
- the activation names: the registry's ([`headflow.dynamics.activations.activation_names`][]) once
  `dynamics` is imported, else [`BUILTIN_ACTIVATIONS`][], the names it registers on import (a
  test checks that the two agree).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from ..experiments._constants import CRITERIA as CRITERIA
from ..experiments._constants import EXTRAPOLATE as EXTRAPOLATE
from ..experiments._constants import MODELS as MODELS
from ..experiments._constants import PRUNABLE_TOLERANCE as PRUNABLE_TOLERANCE
from ..experiments._constants import THEORIES as THEORIES


def dynamics_module(stem: str) -> ModuleType:
    """The module `headflow.dynamics.<stem>` of a file that imports no headflow module
    (`_constants`, `_kinds`), loaded from its file when `headflow.dynamics` itself is not
    imported yet; a later `import headflow.dynamics` finds it in `sys.modules` and uses the same
    module."""
    name = f"headflow.dynamics.{stem}"
    module = sys.modules.get(name)
    if module is not None:
        return module
    if "headflow.dynamics" in sys.modules:
        return importlib.import_module(name)
    package = importlib.util.find_spec("headflow.dynamics")      # locates, does not import
    if package is None or not package.submodule_search_locations:  # pragma: no cover
        return importlib.import_module(name)
    path = Path(list(package.submodule_search_locations)[0]) / f"{stem}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:  # pragma: no cover
        return importlib.import_module(name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:  # pragma: no cover - a broken install: the normal import reports it
        del sys.modules[name]
        raise
    return module


_constants = dynamics_module("_constants")

ESCAPE_THRESHOLD: float = _constants.ESCAPE_THRESHOLD
MIN_SAMPLES: int = _constants.MIN_SAMPLES
STATIONARY_Z: float = _constants.STATIONARY_Z

BUILTIN_ACTIVATIONS = ("softmax", "softmax1", "bayes_softmax")
"""The activations `dynamics` registers on import, in registration order (the order of the
`--activations` defaults); tests/test_startup.py checks it against the registry."""


def known_activations() -> tuple[str, ...]:
    """The registered activations: the registry's names when `dynamics` is imported (it may
    hold activations registered since), else the built-in ones, which is what the registry holds
    once `dynamics` is imported."""
    if "headflow.dynamics.activations" in sys.modules:
        from headflow.dynamics.activations import activation_names

        return activation_names()
    return BUILTIN_ACTIVATIONS
