"""``python -m provmw.cli``: the ``provmw`` command."""

import sys

from provmw.cli import main

sys.exit(main())
