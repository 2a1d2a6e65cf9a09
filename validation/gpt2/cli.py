"""`headflow gpt2`: now `validation.commands.gpt2`; this re-export keeps registrations working."""

from validation.commands.gpt2 import register as register  # noqa: F401
