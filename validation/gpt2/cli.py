"""`headflow gpt2`: now `headflow.validation.commands.gpt2`; this re-export keeps registrations
working."""

from headflow.validation.commands.gpt2 import register as register  # noqa: F401
