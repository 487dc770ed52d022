"""The command line: the words read into a command (`replay`, the default; `chat`; `serve`), run,
and every way it ends turned into an exit status.

docs/cli.md, rule EXITS: 0 done; 1 failed (one line on stderr, `llamafast CMD: error: ...`); 2 a
usage error (one line in the same style, as argparse's); 130 interrupted (Ctrl-C, at any
moment, in every command: `llamafast: interrupted`). `serve` is a server, not a display: it is
handed its own words and parses them itself (_serve.py). A first word that is not a command is
the FILE of the default command, `replay`, unless it is close to a command's name.
"""

from __future__ import annotations

import argparse
import difflib
import io
import os
import sys
from collections.abc import Sequence
from typing import IO, cast

import llamafast

from . import _chat, _replay
from ._chat import CONFIG_HELP
from ._display import JsonView
from ._failures import (
    INTERRUPTED,
    CliError,
    CliParser,
    Failed,
    Output,
    OutputError,
    error_line,
    usage_line,
)
from ._replay import bundled, is_path

__all__ = ["COMMANDS", "PROG", "main", "parser"]

PROG = "llamafast"
COMMANDS = ("replay", "chat", "serve")


def _unknown_command(word: str) -> str | None:
    """A first word that is neither a command, an option, a file nor a bundled recording, but
    close to a command's name: named as a mistyped command."""
    if word.startswith("-") or is_path(word) or word in bundled():
        return None
    guess = difflib.get_close_matches(word.lower(), COMMANDS, n=1, cutoff=0.6)
    if not guess:
        return None
    names = ", ".join(COMMANDS)
    return f"unknown command {word!r} (choose from {names}); did you mean {guess[0]!r}?"


def parser() -> argparse.ArgumentParser:
    """The command line's words: the top level's options, then each command's (its module's
    `add_parser`)."""
    top: argparse.ArgumentParser = CliParser(
        prog=PROG,
        description="Watch llama-server chat completions stream: replay a recording, or chat.",
    )
    top.add_argument(
        "--version",
        action="version",
        version=f"%(prog)s {llamafast.__version__} ({llamafast.IMPLEMENTATION} implementation)",
    )
    top.add_argument("--config", metavar="FILE.toml", help=CONFIG_HELP)
    sub = top.add_subparsers(dest="command", metavar="{replay,chat,serve}")
    sub.add_parser("serve", help="answer as llama-server does, from recordings (no model)")
    _replay.add_parser(sub)
    _chat.add_parser(sub)
    return top


def _drop_output(out: IO[str]) -> None:
    """After the output failed: send what is left of stdout (and its flush at exit) to
    /dev/null, so Python has nothing to report about it on the way out."""
    if out is sys.stdout:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, out.fileno())
            os.close(devnull)
        except (OSError, ValueError, io.UnsupportedOperation):
            pass


def _first_word(words: list[str]) -> int:
    """Where the command (or what stands for it) is: past the top-level `--config FILE`s."""
    at = 0
    while at < len(words):
        if words[at] == "--config" and at + 1 < len(words):
            at += 2
        elif words[at].startswith("--config="):
            at += 1
        else:
            break
    return at


def main(
    argv: Sequence[str] | None = None, out: IO[str] | None = None, err: IO[str] | None = None
) -> int:
    """Run the command line; the exit status is returned: 0 done, 1 failed (one line on
    stderr), 2 a usage error (one line, as argparse's), 130 interrupted (Ctrl-C, at any
    moment: one line). The answer goes to `out` (default: stdout), everything else to `err`
    (default: stderr)."""
    try:
        return _run(argv, out, err)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr if err is None else err)
        return INTERRUPTED


def _run(argv: Sequence[str] | None, out: IO[str] | None, err: IO[str] | None) -> int:
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    for stream in (out, err):
        if stream in (sys.stdout, sys.stderr) and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")  # a terminal that cannot show a character
    words = list(sys.argv[1:] if argv is None else argv)
    at = _first_word(words)
    first = words[at] if at < len(words) else None
    if first == "serve":  # a server, not a display: its own options (_cli/_serve.py)
        from ._serve import main as serve

        return serve(words[at + 1 :])
    if first is not None and first not in (*COMMANDS, "-h", "--help", "--version"):
        unknown = _unknown_command(first)
        if unknown is not None:
            err.write(usage_line(PROG, unknown))
            return 2
    if first is None or first not in (*COMMANDS, "-h", "--help", "--version"):
        words.insert(at, "replay")  # replay is the main job
    args, extra = parser().parse_known_args(words)
    if extra:  # named by the command's own parser, so the line names the command
        args.command_parser.error(f"unrecognized arguments: {' '.join(extra)}")
    # the views use write, flush and isatty only
    sink, side = cast(IO[str], Output(out)), cast(IO[str], Output(err))
    try:
        try:
            status: int = args.run(args, sink, side)
        except KeyboardInterrupt as stop:  # before the display opened
            raise CliError("KeyboardInterrupt", "interrupted") from stop
    except CliError as failure:
        return _failed(failure, args, sink, out, err)
    return status


def _failed(
    failure: CliError, args: argparse.Namespace, sink: IO[str], out: IO[str], err: IO[str]
) -> int:
    """The exit status of a command that failed with `failure`, its view closed (or, for
    --json, its error line written) first and its one line on `err`."""
    cause = failure.cause if isinstance(failure, Failed) else failure
    try:
        if isinstance(failure, Failed):
            failure.view.fail(failure)
        elif args.json:
            JsonView(sink, flush=True).fail(failure)
    except OutputError as failed:
        cause = failed
    if isinstance(cause, OutputError):
        _drop_output(out)
        if cause.broken:  # `llamafast replay | head`: the reader left; nothing to say
            return 1
        failure = cause
    if failure.kind == "KeyboardInterrupt":
        err.write(f"{PROG}: {failure.message}\n")
        return INTERRUPTED
    err.write(error_line(f"{PROG} {args.command}", failure))
    return failure.status
