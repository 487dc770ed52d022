"""`python -m llamafast replay|chat|serve`: the command line, a module per command.

_main.py reads the words and turns every ending into an exit status; _replay.py (the default
command) plays a recording, paced as recorded; _chat.py streams from a running llama-server;
both show what they read through _display.py (LiveView for people, JsonView for scripts);
_failures.py holds the one-line failures; _serve.py is `serve`, a llama-server stand-in that
answers from the bundled recordings. docs/cli.md names the rules: every failure ends as one
line on stderr (`llamafast CMD: error: ...`) and exit status 1, never a traceback; a usage error
(a bad option or value) exits 2, an interrupt 130, in every command (EXITS). The answer alone
goes to stdout, everything else (status, reasoning, the summary) to stderr, in `replay` as in
`chat`, so `llamafast chat Hi > answer.txt` holds the answer. Everything printed passes one
escape of control characters (TERMINAL); replay's pauses are bounded (PACING).
"""

from __future__ import annotations

from ._display import JsonView, LiveView
from ._main import main

__all__ = ["JsonView", "LiveView", "main"]
