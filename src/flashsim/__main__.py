"""``python -m flashsim`` is the ``flashsim`` command."""

import sys

from flashsim.cli import main

sys.exit(main())
