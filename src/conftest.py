"""Doctest collection of ``src/flashsim``: the framework integrations import their framework at module top, so
they are skipped where it is not installed (the fresh-machine set-up has neither TRL nor verl)."""

import importlib.util

collect_ignore = [f"flashsim/integrations/{name}.py" for name in ("trl", "verl")
                  if importlib.util.find_spec(name) is None]
