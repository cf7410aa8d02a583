"""``python -m scale``: see :mod:`scale.cli`."""

import sys

from scale.cli import main

sys.exit(main())
