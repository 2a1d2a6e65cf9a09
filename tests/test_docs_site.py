"""The API reference of the documentation site (`mkdocs.yml`, `docs/api/`) covers the public
modules: every module or package of `headflow.dynamics`, `headflow.sims`,
`headflow.validation.experiments` and `headflow.validation.gpt2` whose name has no leading
underscore is rendered by a `::: module` line, so a module added without its reference fails
here. (`.ci/run` builds the site itself with
`mkdocs build --strict`, which fails on an unresolved cross-reference or a page left out.) Every
notebook is in the site's navigation, and the outputs stored in a notebook (which its page
shows) are still those of its code cells."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from headflow.validation.notebooks import code_hash, stale, strip

ROOT = Path(__file__).resolve().parents[1]

# Packages whose public submodules (one level down) the reference must render.
PACKAGES = ["headflow.dynamics", "headflow.dynamics.models", "headflow.sims", "headflow.validation",
            "headflow.validation.experiments", "headflow.validation.gpt2"]
# Public modules that are not library API: the command line and its plots (documented in the
# README and by `headflow COMMAND --help`) and the shipped configs.
NOT_API = {"headflow.validation.cli", "headflow.validation.commands", "headflow.validation.plots",
           "headflow.validation.configs", "headflow.validation.gpt2.cli"}


def folder_of(name: str) -> Path:
    """The repository folder of `headflow.X.Y` (the packages install from `X/`, pyproject.toml)."""
    head, *rest = name.split(".")
    assert head == "headflow", name
    return ROOT.joinpath(*rest)


def public_submodules(package: str) -> set[str]:
    folder = folder_of(package)
    names = set()
    for path in folder.iterdir():
        if path.name.startswith(("_", ".")):
            continue
        if path.suffix == ".py":
            names.add(f"{package}.{path.stem}")
        elif (path / "__init__.py").exists():
            names.add(f"{package}.{path.name}")
    return names


def rendered() -> set[str]:
    lines = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "docs" / "api").glob("*.md"))
    return set(re.findall(r"^::: ([\w.]+)\s*$", lines, flags=re.M))


def test_reference_renders_every_public_module():
    expected = set().union(*(public_submodules(p) for p in PACKAGES)) - NOT_API
    documented = rendered()
    documented_packages = {name for name in documented if name in PACKAGES}
    missing = sorted(expected - documented - documented_packages)
    assert not missing, f"public modules missing from docs/api/*.md: {missing}"
    stale = sorted(name for name in documented
                   if not (folder_of(name).with_suffix(".py").exists()
                           or (folder_of(name) / "__init__.py").exists()))
    assert not stale, f"docs/api/*.md renders modules that do not exist: {stale}"


def test_site_config_points_at_the_reference_and_notebooks():
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for page in sorted((ROOT / "docs" / "api").glob("*.md")):
        assert f"api/{page.name}" in config, page.name
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        assert f"notebooks/{notebook.name}" in config, notebook.name
    assert (ROOT / "docs" / "notebooks").resolve() == (ROOT / "notebooks").resolve()


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")),
                         ids=lambda p: p.stem)
def test_stored_notebook_outputs_are_those_of_its_code(path):
    """A notebook's stored outputs (what its page on the site shows) were made by `headflow
    notebooks` at full size from exactly its present code cells: a code change after them
    fails here until the notebook is run again (or stripped)."""
    nb = nbformat.read(path, as_version=4)
    assert stale(nb) is None, f"{path.name}: {stale(nb)}"


def test_stale_outputs_are_caught():
    """The stamp against a notebook whose outputs were made, then whose code changed."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell('SIZE = "full"', metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell("print(1)")]
    assert stale(nb) is None                                    # no outputs: nothing to be stale
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="1\n")]
    assert "no headflow stamp" in stale(nb)
    nb.metadata["headflow"] = {"size": "full", "code_sha256": code_hash(nb)}
    assert stale(nb) is None
    nb.cells[1].source = "print(2)"
    assert "changed after the outputs" in stale(nb)
    nb.metadata["headflow"] = {"size": "ci", "code_sha256": code_hash(nb)}
    assert "not 'full'" in stale(nb)
    assert stale(strip(nb)) is None and "headflow" not in nb.metadata
