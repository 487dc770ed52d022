"""`python -m llamafast` and the `llamafast` script: replay a recording (the default) or chat."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from ._cli import main as _main

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status (the console script passes it to exit)."""
    return _main(argv)


if __name__ == "__main__":
    sys.exit(main())
