"""``python -m ragkit``: the ``ragkit`` command."""

import sys

from ragkit.ui.cli_entry import run

sys.exit(run())
