"""Theory-versus-simulation comparisons, experiments, the GPT-2 bound checker and the CLI."""
