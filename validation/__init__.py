"""Experiments, figures, the command line and the GPT-2 bound checker, built on
`headflow.dynamics` and `headflow.sims`. Kept free of imports, so that the `headflow` console
script starts by installing its signal handlers (`headflow.validation._entry`)."""
