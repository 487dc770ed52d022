"""`llamafast replay`: a recorded HTTP response through the parser, paced as it was recorded.

The recording (a file, else a bundled one by name) is decoded by the standard library's
http.client over the file, its head checked (a 200 event stream), then read by ChatStream into
the display. A recording with a `NAME.timing.json` beside it is read at the recorded pace
(`paced`), sped up to last at most PACE_LIMIT_S; one without pauses a little after each event
(`show`), UNTIMED_LIMIT_S at most in all. The pauses are not counted as parse time.
"""

from __future__ import annotations

import argparse
import http.client
import io
import json
import math
import os
import pathlib
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import IO, Any

import llamafast

from .._errors import HttpError, InferError, SseError
from .._recordings import BUNDLED, TIMING, parse_reads
from .._values import ChatEvent
from ._display import Stats, View, add_options, make_view
from ._failures import CliError, Failed, OutputError, UsageError, option

__all__ = [
    "DEFAULT_RECORDING",
    "add_parser",
    "bundled",
    "is_path",
    "open_recording",
    "recorded_reads",
    "replay",
]

DEFAULT_RECORDING = "reasoning_then_content"
"""The bundled recording replayed when no FILE is given: reasoning, then the answer."""
PACE_LIMIT_S = 3.0
"""A recording whose pacing lasts longer is sped up to last this long, so a replay stays short."""
UNTIMED_PACE_S = 0.02
"""The pause after each event of a recording without timing, so it is still watched streaming."""
UNTIMED_LIMIT_S = 1.5
"""The most time a recording without timing spends pausing: the rest goes at full speed."""

DELAY_LIMIT_S = 60.0
"""The longest --delay: a pause per event longer than a minute is a mistake (and past what
time.sleep takes, a crash)."""

_sleep = time.sleep  # the tests stand a fake in


def show(
    events: Iterator[ChatEvent], view: View, *, delay: float = 0.0, limit: float = math.inf
) -> Stats:
    """Hand every event of `events` to `view`, pausing `delay` seconds after each until the
    pauses reach `limit` in all; the time spent inside `events` is `parse_s`."""
    stats = Stats()
    left = limit
    clock = time.perf_counter
    parse = 0.0
    while True:
        start = clock()
        try:
            ev = next(events)
        except StopIteration:
            parse += clock() - start
            break
        parse += clock() - start
        stats.events += 1
        view.event(ev)
        pause = min(delay, left)
        if pause > 0:
            left -= pause
            _sleep(pause)
    stats.parse_s = parse
    return stats


class _FileSocket:
    """Just enough of a socket for http.client.HTTPResponse: makefile() is the open file."""

    def __init__(self, file: IO[bytes]) -> None:
        self.file = file

    def makefile(self, *args: object, **kwargs: object) -> IO[bytes]:
        return self.file


class _PacedFile(io.RawIOBase):
    """The recording's bytes as they came: each read gives at most the bytes one recorded read
    brought, after the pause that preceded it (times `scale`); past the last one, the rest."""

    def __init__(self, file: IO[bytes], reads: list[tuple[float, int]], scale: float) -> None:
        super().__init__()
        self.file = file
        self.reads = reads[::-1]  # popped from the end
        self.scale = scale
        self.at_ms = 0.0
        self.left = 0  # bytes of the current recorded read not yet given
        self.slept = 0.0  # seconds spent pausing: not parse time

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self.left:  # a recorded read of 0 bytes is a pause, not the file's end
            if not self.reads:
                return self.file.readinto(buffer)  # type: ignore[attr-defined,no-any-return]
            at_ms, self.left = self.reads.pop()
            # docs/cli.md, rule PACING: the recording's clock never goes back, so the pauses
            # add up to its latest time (times the scale), whatever order the times come in.
            if at_ms > self.at_ms:
                pause = (at_ms - self.at_ms) * self.scale / 1000
                self.at_ms = at_ms
                start = time.perf_counter()
                _sleep(pause)
                self.slept += time.perf_counter() - start
        view = memoryview(buffer)[: self.left]
        n: int = self.file.readinto(view)  # type: ignore[attr-defined]
        self.left = max(0, self.left - n) if n else 0
        return n


def paced(file: IO[bytes], reads: list[tuple[float, int]]) -> _PacedFile:
    """`file` read at the recorded pace, sped up to last at most PACE_LIMIT_S (the pauses add
    up to the latest time, _PacedFile.readinto)."""
    total_s = max((at for at, _ in reads), default=0.0) / 1000
    scale = min(1.0, PACE_LIMIT_S / total_s) if total_s > 0 else 1.0
    return _PacedFile(file, reads, scale)


def recorded_reads(name: str | None) -> list[tuple[float, int]]:
    """The recorded reads of recording `name` (as open_recording finds it) from its timing file;
    [] when it has none. A timing file that is not as described is a one-line CliError."""
    if name is not None and is_path(name):
        path = name.removesuffix(".http") + TIMING
        if not os.path.exists(path):
            return []
        where = path
        read: Callable[[], bytes] = pathlib.Path(path).read_bytes
    else:
        key = DEFAULT_RECORDING if name is None else name
        timing = BUNDLED.timing(key)
        if not timing.is_file():
            return []
        where, read = f"{key}{TIMING} (bundled)", timing.read_bytes
    try:
        out = parse_reads(read())
    except OSError as err:
        raise CliError(type(err).__name__, f"cannot read {where!r}: {err.strerror}") from None
    except ValueError as err:  # not UTF-8, not JSON, nested too deep, a bad read
        raise CliError(
            "ValueError",
            f"{where!r} is not a timing file (reads_ms_bytes: [[ms, bytes], ...]): {err}",
        ) from None
    # docs/cli.md, rule TIMING-FILE: a time before the request or not a finite number, a negative
    # size, is refused; times that go backwards are taken as they come (no pause).
    if any(not (math.isfinite(at) and at >= 0) or size < 0 for at, size in out):
        raise CliError("ValueError", f"{where!r} holds a read at a bad time or of a bad size")
    return out


def is_path(name: str) -> bool:
    """A FILE argument names a file (not a bundled recording) when it looks like one."""
    return os.path.exists(name) or os.sep in name or name.endswith(".http")


def bundled() -> list[str]:
    """The names of the recordings shipped inside the package."""
    return BUNDLED.names()


def open_recording(name: str | None) -> tuple[str, IO[bytes]]:
    """The recording `name`: a file path, else a bundled recording's name; None: the default."""
    if name is not None and is_path(name):
        try:
            return name, open(name, "rb")  # the caller closes it
        except OSError as err:
            raise CliError(type(err).__name__, f"cannot read {name!r}: {err.strerror}") from None
    key = DEFAULT_RECORDING if name is None else name
    if key not in bundled():
        raise CliError(
            "FileNotFoundError",
            f"no file {key!r} and no bundled recording of that name "
            f"(bundled: {', '.join(bundled())})",
        )
    return f"{key} (bundled)", BUNDLED.open(key)


def open_response(label: str, file: IO[bytes]) -> http.client.HTTPResponse:
    """The recorded response, its head read and checked: a 200 event stream, else CliError."""
    response = http.client.HTTPResponse(_FileSocket(file))  # type: ignore[arg-type]
    try:
        _check_head(label, response)
    except BaseException:
        # Closed now, while its file is open: left to the garbage collector, it would flush
        # the file after the caller closed it, and Python would print what that raised.
        response.close()
        raise
    return response


def _check_head(label: str, response: http.client.HTTPResponse) -> None:
    try:
        response.begin()
    except http.client.RemoteDisconnected:  # no status line at all
        raise CliError("BadStatusLine", f"{label} is empty: not a recorded HTTP response") from None
    except (http.client.HTTPException, ValueError) as err:
        raise CliError.of(err, f"{label} is not a recorded HTTP response: ") from None
    if response.status != 200:
        try:
            body = response.read().decode("utf-8", "replace")
        except (http.client.HTTPException, OSError):
            body = ""
        raise CliError.of(HttpError(response.status, body))
    kind = response.getheader("Content-Type", "")
    if not kind.startswith("text/event-stream"):
        raise CliError(
            "ProtocolError", f"{label} is not an event stream (Content-Type: {kind or 'none'})"
        )


def replay(args: argparse.Namespace, out: IO[str], side: IO[str]) -> int:
    if args.list:
        for name in bundled():
            default, timed = name == DEFAULT_RECORDING, bool(recorded_reads(name))
            if args.json:
                line = json.dumps({"name": name, "default": default, "timing": timed})
            else:
                line = f"{name}{'  (default)' if default else ''}"
            out.write(line + "\n")
        return 0
    delay = option("--delay", args.delay, float)
    if delay is not None and not 0 <= delay <= DELAY_LIMIT_S:
        raise UsageError(
            "ValueError", f"--delay must be from 0 to {DELAY_LIMIT_S:g} seconds, not {args.delay!r}"
        )
    # --delay (even 0) replaces the recorded pacing; --no-pace turns it off. A recording
    # without timing goes at a steady modest pace, its pauses capped at UNTIMED_LIMIT_S.
    reads = [] if args.no_pace or delay is not None else recorded_reads(args.file)
    limit = math.inf
    if delay is None and not reads and not args.no_pace:
        delay, limit = UNTIMED_PACE_S, UNTIMED_LIMIT_S
    # docs/cli.md, rule STREAMS: the answer alone on stdout, the rest on stderr, as in `chat`
    view = make_view(args, out, flush=bool(delay or reads), side=side)
    with ExitStack() as stack:
        label, file = open_recording(args.file)
        stack.callback(file.close)
        pacer = None
        if reads:
            pacer = paced(file, reads)
            file = io.BufferedReader(pacer)
        response = open_response(label, file)
        stack.callback(response.close)
        stream = llamafast.ChatStream(response)
        head_slept = 0.0 if pacer is None else pacer.slept  # pauses before the body
        try:
            stats = show(iter(stream), view, delay=delay or 0.0, limit=limit)
            completion = stream.completion
            if pacer is not None and stats.parse_s is not None:  # the pauses are not parsing
                stats.parse_s = max(0.0, stats.parse_s - (pacer.slept - head_slept))
        except (SseError, InferError, http.client.HTTPException) as err:
            raise Failed(view, err) from None
        except (KeyboardInterrupt, OutputError) as err:
            raise Failed(view, err) from None
        view.done(completion, stats)
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`replay` and its options, on the command line's subparsers."""
    rp = sub.add_parser(
        "replay",
        help="replay a recorded HTTP response (the default: a bundled recording)",
        description="Replay a recorded llama-server HTTP response through the parser. A "
        f"recording with a NAME{TIMING} beside it is paced as it was recorded, sped up to last "
        f"at most {PACE_LIMIT_S:g} s.",
    )
    rp.add_argument(
        "file",
        nargs="?",
        metavar="FILE.http",
        help=f"a recorded response, or a bundled recording's name (default: {DEFAULT_RECORDING})",
    )
    rp.add_argument("--list", action="store_true", help="name the bundled recordings and exit")
    rp.add_argument(
        "--config", metavar="FILE.toml", default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )
    rp.add_argument(
        "--delay",
        metavar="S",
        help="pause S seconds after each event instead of the recorded pacing (0: full speed)",
    )
    rp.add_argument(
        "--no-pace",
        "--fast",
        action="store_true",
        help="go at full speed, ignoring the recorded pacing",
    )
    add_options(rp)
    rp.set_defaults(run=replay, command_parser=rp)
