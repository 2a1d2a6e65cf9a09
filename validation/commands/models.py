"""`headflow models [KIND ...]`: the models `[model] kind` can name, with their parameters."""

from __future__ import annotations

EXAMPLE = "headflow models committee"
"""Shown at the end of `--help`."""


def register(sub) -> None:
    p = sub.add_parser("models", help="list the models and their config keys",
                       description="The models that [model] kind can name: the built-in ones, "
                       "those installed packages register (entry-point group "
                       "headflow.models), or, given as KIND, any model named by "
                       "'file.py:ClassName' or 'package.module:ClassName', with every key of "
                       "its [model] and [training] tables, its default and its constraints.")
    p.add_argument("kinds", nargs="*", metavar="KIND",
                   help="models to describe (default: every model with a name)")
    p.add_argument("--json", action="store_true", help="print the listing as JSON")
    p.set_defaults(func=run)


def run(args) -> dict:
    from headflow.dynamics.models import model_class, model_kinds, resolve_kind

    kinds = list(args.kinds) or list(model_kinds())
    listing: dict[str, dict] = {}
    for kind in kinds:
        cls = model_class(resolve_kind(kind, None))
        keys = cls.describe()
        doc = " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())
        listing[kind] = {"doc": doc, "keys": [{"key": k, "default": d, "help": h}
                                              for k, d, h in keys]}
        if not args.json:
            print(f"{kind}: {doc}")
            width = max(len(k) for k, _, _ in keys)
            for k, d, h in keys:
                print(f"  {k:<{width}}  {d:<10}  {h}".rstrip())
    return {"models": listing}
