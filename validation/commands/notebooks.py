"""`headflow notebooks [NAME ...]`: execute the notebooks of `notebooks/` at full size (or the
small CI size) and store their outputs with a stamp of their code, for the documentation site."""

from __future__ import annotations

EXAMPLE = "headflow notebooks escape_times"
"""Shown at the end of `--help`."""


def register(sub) -> None:
    p = sub.add_parser("notebooks", help="execute the notebooks and store their outputs",
                       description="Run each notebook of --dir top to bottom at SIZE = "
                       "--size and write it back with its outputs, stamped with the hash of its "
                       "code cells and the commit it ran on (the documentation site shows the "
                       "stored outputs; the tests fail when the code changes after them). A "
                       "notebook that fails is left as it was. Needs nbclient, nbformat and "
                       "ipykernel (pip install 'headflow[test]').")
    p.add_argument("names", nargs="*", metavar="NAME",
                   help="notebooks to run, by file name without .ipynb (default: all)")
    p.add_argument("--size", default="full", choices=("full", "ci"),
                   help="the SIZE every notebook defines (default: full, the size of its "
                   "claims; ci stores outputs that the tests reject as stale)")
    p.add_argument("--dir", default="notebooks",
                   help="the folder of the notebooks (default: notebooks)")
    p.add_argument("--timeout", type=int, default=7200, help="seconds allowed per cell")
    p.set_defaults(func=run)


def run(args) -> dict:
    from pathlib import Path

    from headflow.dynamics import ConfigError, HeadflowError

    folder = Path(args.dir)
    have = {p.stem: p for p in sorted(folder.glob("*.ipynb"))}
    if not have:
        raise ConfigError(f"--dir {args.dir}: no notebooks (*.ipynb) there")
    unknown = [n for n in args.names if n not in have]
    if unknown:
        raise ConfigError(f"no notebook {unknown[0]!r} in {args.dir} (have: "
                          f"{', '.join(have)})")
    if args.timeout < 1:
        raise ConfigError(f"--timeout {args.timeout}: must be >= 1")
    try:
        import ipykernel  # noqa: F401
        import nbformat
        from nbclient.exceptions import CellExecutionError
    except ImportError as err:
        raise ConfigError(f"notebooks: {err.name} is not installed (pip install "
                          "'headflow[test]')") from None

    from ..notebooks import execute, parameters_cell, write

    names = list(args.names) or list(have)
    for n in names:
        try:
            parameters_cell(nbformat.read(have[n], as_version=4))
        except ValueError as err:
            raise ConfigError(f"{have[n]}: {err}") from None
    done = {}
    for n in names:
        try:
            nb = execute(have[n], args.size, timeout=args.timeout)
        except CellExecutionError as err:
            raise HeadflowError(f"{n}: a cell failed ({err.ename}: {err.evalue}); the notebook "
                                "is left as it was") from None
        write(nb, have[n])
        stamp = nb.metadata["headflow"]
        verdicts = [line for cell in nb.cells if cell.cell_type == "code"
                    for o in cell.get("outputs", []) if o.get("output_type") == "stream"
                    for line in o.get("text", "").splitlines() if line.startswith("verdict: ")]
        print(f"{n}: SIZE = {args.size}, {stamp['wall_s']:.0f} s, {len(verdicts)} verdict lines"
              + (f"; {verdicts[-1]}" if verdicts else ""))
        done[n] = {**stamp, "verdicts": verdicts}
    return {"notebooks": done}
