"""`python -m headflow.dynamics.symbolic [--check] [--out PATH]`: regenerate `docs/equations.md`.

With `--check`, write nothing and exit 1 if the file differs from what the derivation produces
now (0 if it is up to date).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEFAULT = Path(__file__).resolve().parents[2] / "docs" / "equations.md"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m headflow.dynamics.symbolic",
                                description="Regenerate docs/equations.md from the symbolic "
                                "derivation of the order-parameter ODEs.")
    p.add_argument("--out", type=Path, default=DEFAULT, help=f"output file (default {DEFAULT})")
    p.add_argument("--check", action="store_true",
                   help="do not write; exit 1 if the file is stale")
    args = p.parse_args(argv)
    from ._render import render

    text = render()
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else None
        if current != text:
            print(f"{args.out} is stale: run `python -m headflow.dynamics.symbolic`",
                  file=sys.stderr)
            return 1
        print(f"{args.out} is up to date")
        return 0
    tmp = args.out.with_suffix(args.out.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
