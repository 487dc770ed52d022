"""`python -m llamafast` and the `llamafast` script: replay a recording (the default) or chat.

Ctrl-C at any moment, even while the package is still importing, ends with one line and exit
status 130, never a traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["main"]

_INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status (the console script passes it to exit)."""
    try:
        from ._cli import main as cli_main  # the package's heavy part: an interrupt may land here

        return cli_main(argv)
    except KeyboardInterrupt:
        print("llamafast: interrupted", file=sys.stderr)
        return _INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
