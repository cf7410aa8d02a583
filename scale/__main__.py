"""``python -m scale``: see :mod:`scale.run.cli`."""

import sys

from scale.run.cli import main

sys.exit(main())
