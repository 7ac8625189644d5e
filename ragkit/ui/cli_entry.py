"""The ``ragkit`` command's entry point (``python -m ragkit`` too): the CLI is imported inside the Ctrl-C handling.

Importing :mod:`ragkit.ui.cli` loads Haystack, torch and faiss — about 2 s, longer on a busy machine. A Ctrl-C
in that time came before :func:`ragkit.ui.cli.main`'s handler existed: the user got forty lines of torch's
import machinery and exit code -2 instead of one ``interrupted`` line and 130. This module imports nothing
heavy itself, so the window it leaves is the interpreter's own start-up.
"""

from __future__ import annotations

import sys


def run(argv: list[str] | None = None) -> int:
    try:
        from ragkit.ui.cli import main
    except KeyboardInterrupt:  # Ctrl-C while the libraries load: what main() says for one later
        from ragkit.ui.cli_common import forget_interrupt_seen_in_c_code

        print("interrupted", file=sys.stderr)
        forget_interrupt_seen_in_c_code()
        return 130
    return main(argv)
