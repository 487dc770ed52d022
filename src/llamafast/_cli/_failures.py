"""The command line's failures: each one line on stderr, in one style, and its exit status.

docs/cli.md, rules EXITS and ONE-LINE. Every failure of a command ends as a CliError (status 1:
the line `llamafast CMD: error: kind: message`) or a UsageError (a bad option or option value,
status 2, as argparse's own: `llamafast CMD: error: message (see 'llamafast CMD --help')`, the
line CliParser writes for argparse's own usage errors too); a failure after the display opened
is Failed, which carries the view to close before the error line; writing the output failing
is OutputError (Output raises it). `option` reads an option's value as a number or refuses it
as a UsageError. Everything written passes one escape (`shown`, `one_line`: rule TERMINAL).
"""

from __future__ import annotations

import argparse
import math
from typing import IO, Any, NoReturn, Protocol

from .._errors import SHOW

__all__ = [
    "INTERRUPTED",
    "CliError",
    "CliParser",
    "Failed",
    "Output",
    "OutputError",
    "UsageError",
    "error_line",
    "one_line",
    "option",
    "shown",
    "usage_line",
]

INTERRUPTED = 130
"""The exit status of a command interrupted (Ctrl-C), as a shell gives for SIGINT."""

# docs/cli.md, rule TERMINAL: the terminal shows only what the project writes. A string from
# the server (the model's text, a tool call's name, id and arguments, a notice or an error
# quoting the server) or from a file may hold control characters (random weights produce them;
# see fixtures/INDEX.md; a hostile server sends ESC ] 0 ; ... BEL to retitle the terminal):
# shown raw they would move the cursor or inject terminal escapes. Every C0 control, DEL and
# every C1 control is shown as a `\xNN` escape; in flowing text tab and newline stay what they
# are, in a line of its own (a title, a notice, a summary row, an error) they are escaped too.
_C0_C1 = [*range(0x20), *range(0x7F, 0xA0)]
_IN_TEXT = {c: f"\\x{c:02x}" for c in _C0_C1 if c not in (0x09, 0x0A)}
_IN_LINE = {c: f"\\x{c:02x}" for c in _C0_C1}


def shown(text: str) -> str:
    """`text` (flowing text: the model's, a tool call's arguments) safe for a terminal."""
    return text.translate(_IN_TEXT)


def one_line(text: str) -> str:
    """`text` as one line safe for a terminal: each run of white space (line breaks among
    them) one space, every other control character escaped."""
    return " ".join(text.split()).translate(_IN_LINE)


class CliError(Exception):
    """A failure reported as one line, `kind: message`, with exit status 1."""

    status = 1

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(kind, message)
        self.kind = kind
        # one short line, whatever the server or the file said
        text = one_line(message)
        self.message = text if len(text) <= SHOW else f"{text[:SHOW]}..."

    @classmethod
    def of(cls, err: BaseException, prefix: str = "") -> CliError:
        return cls(type(err).__name__, prefix + (str(err) or repr(err)))

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


class UsageError(CliError):
    """A bad option or option value: one line, exit status 2 (as argparse's own usage errors)."""

    status = 2


class OutputError(CliError):
    """Writing the output failed (a full disk; a reader that left, `broken`)."""

    def __init__(self, err: OSError) -> None:
        super().__init__(type(err).__name__, f"cannot write the output: {err.strerror or err}")
        self.broken = isinstance(err, BrokenPipeError)


class Output:
    """The output stream, its write failures raised as OutputError."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out

    def write(self, text: str) -> int:
        try:
            return self.out.write(text)
        except OSError as err:
            raise OutputError(err) from None

    def flush(self) -> None:
        try:
            self.out.flush()
        except OSError as err:
            raise OutputError(err) from None

    def isatty(self) -> bool:
        return self.out.isatty()


def usage_line(prog: str, message: str) -> str:
    """The one line of a usage error of command `prog` (`llamafast` or `llamafast CMD`)."""
    return f"{prog}: error: {one_line(message)} (see '{prog} --help')\n"


def error_line(prog: str, err: CliError) -> str:
    """The one line of command `prog` failing with `err`."""
    if isinstance(err, UsageError):
        return usage_line(prog, err.message)
    return f"{prog}: error: {err}\n"


class CliParser(argparse.ArgumentParser):
    """argparse, its usage errors one line in the command line's style (status 2, as
    argparse's own)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, usage_line(self.prog, message))


class ClosesOnFailure(Protocol):
    """What a failure needs of the display that was open (either view of _display): to close it
    before the error line. Declared here, below the display, so the two do not import each
    other."""

    def fail(self, err: CliError) -> None: ...


class Failed(CliError):
    """A failure after the display opened: the view is closed before the error line."""

    def __init__(
        self, view: ClosesOnFailure, err: BaseException, message: str | None = None
    ) -> None:
        if isinstance(err, CliError):
            super().__init__(err.kind, err.message)
        elif isinstance(err, KeyboardInterrupt):
            super().__init__("KeyboardInterrupt", "interrupted")
        else:
            super().__init__(type(err).__name__, message or str(err) or repr(err))
        self.view = view
        self.cause = err


def option(name: str, text: str | None, kind: type[int] | type[float]) -> Any:
    """The value of option `name` (given as `text`) as `kind`; a UsageError if not."""
    if text is None:
        return None
    try:
        value = kind(text)
    except ValueError:
        noun = "an integer" if kind is int else "a number"
        raise UsageError("ValueError", f"{name} must be {noun}, not {text!r}") from None
    if kind is float and not math.isfinite(value):
        raise UsageError("ValueError", f"{name} must be a finite number, not {text!r}")
    return value
