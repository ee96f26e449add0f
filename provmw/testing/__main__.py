"""``python -m provmw.testing``: the fake provider on a port, for trying provmw by hand."""

from provmw.testing import main

main()
