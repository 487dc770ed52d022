"""`python -m llamafast replay|chat`: watch a chat completion stream the way a person wants to.

One display (`LiveView` for people, `JsonView` for scripts) takes ChatEvents as they come and the
Completion at the end; `replay` feeds it from a recorded HTTP response (decoded by the standard
library's http.client over a file, then ChatStream), `chat` from a live `Client.stream`. Every
failure ends as one line on stderr and exit status 1, never a traceback; a usage error (a bad
option or value) exits 2, an interrupt 130. `chat`'s answer alone goes to stdout, everything else
(status, reasoning, the summary) to stderr, so `llamafast chat Hi > answer.txt` holds the answer.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import http.client
import importlib
import importlib.resources
import io
import json
import math
import os
import pathlib
import ssl
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from typing import IO, Any, cast

import llamafast

from ._body import build_body
from ._config import Config
from ._errors import SHOW, ConnectError, HttpError, InferError, SseError
from ._values import (
    ChatEvent,
    ChatMessage,
    ChatRequest,
    Completion,
    Content,
    Progress,
    Queued,
    Reasoning,
    Retrying,
    System,
    ThinkingCapped,
    TokenLogprob,
    ToolCallDelta,
    User,
    Waiting,
)

__all__ = ["JsonView", "LiveView", "main"]

PROG = "llamafast"
COMMANDS = ("replay", "chat", "serve")
API_KEY_VARIABLE = "LLAMA_API_KEY"
"""Where `chat` finds the API key when --api-key is not given: llama-server's own variable."""
RECORDINGS = "_recordings"
DEFAULT_RECORDING = "reasoning_then_content"
"""The bundled recording replayed when no FILE is given: reasoning, then the answer."""
TIMING = ".timing.json"
"""Beside `NAME.http`, `NAME.timing.json` may say when each read of the recording returned:
`{"reads_ms_bytes": [[ms from the request, bytes], ...]}`."""
PACE_LIMIT_S = 3.0
"""A recording whose pacing lasts longer is sped up to last this long, so a replay stays short."""
UNTIMED_PACE_S = 0.02
"""The pause after each event of a recording without timing, so it is still watched streaming."""
UNTIMED_LIMIT_S = 1.5
"""The most time a recording without timing spends pausing: the rest goes at full speed."""
CONFIG_FILE = "llamafast.toml"
"""What `chat` reads from the current directory when no --config is given (the README's file)."""

_sleep = time.sleep  # the tests stand a fake in

# Model output may hold control characters (random weights produce them; see fixtures/INDEX.md):
# shown raw they would move the cursor or inject terminal escapes. Show them as `\xNN` escapes;
# tab and newline stay what they are.
_CONTROLS = {c: f"\\x{c:02x}" for c in [*range(0x20), *range(0x7F, 0xA0)] if c not in (0x09, 0x0A)}

# ANSI styles for a terminal.
_RESET = "\x1b[0m"
_DIM_ITALIC = "\x1b[2;3m"  # reasoning
_DIM = "\x1b[2m"
_BOLD = "\x1b[1m"
_CYAN = "\x1b[36m"
_CLEAR_LINE = "\r\x1b[2K"


class CliError(Exception):
    """A failure reported as one line, `kind: message`, with exit status 1."""

    status = 1

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(kind, message)
        self.kind = kind
        # one short line, whatever the server or the file said
        text = " ".join(message.split()).translate(_CONTROLS)
        self.message = text if len(text) <= SHOW else f"{text[:SHOW]}..."

    @classmethod
    def of(cls, err: BaseException, prefix: str = "") -> CliError:
        return cls(type(err).__name__, prefix + (str(err) or repr(err)))

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


class UsageError(CliError):
    """A bad option or option value: one line, exit status 2 (as argparse's own usage errors)."""

    status = 2


# --- the display --------------------------------------------------------------------------


@dataclasses.dataclass
class Stats:
    """What the summary tells beside the Completion."""

    events: int = 0
    parse_s: float | None = None  # time spent inside the parser (replay)
    wall_s: float | None = None  # time from request to completion (chat)


class LiveView:
    """Events as text a person watches: reasoning set apart, tool calls as they assemble.

    `live` (a terminal): status lines (prompt progress, queued, waiting) are rewritten in place
    with `\\r`; otherwise only a status's last state is printed, as a line of its own. `color`:
    reasoning dim and italic, tool-call arguments cyan, markers dim. Every section (thinking,
    answer, each tool call) opens with a marker line, so the plain output reads the same.

    `side` (default: `out`) takes everything but the answer: status lines, notices, reasoning,
    the markers and the summary; `out` keeps the answer's text and its tool calls.
    """

    def __init__(
        self,
        out: IO[str],
        *,
        live: bool,
        color: bool,
        flush: bool,
        side: IO[str] | None = None,
    ) -> None:
        self.out = out
        self.side = out if side is None else side
        self.to = self.side  # the stream the open section writes to
        self.live = live
        self.color = color
        self.flush = flush
        # the open section: "reasoning", "content", a tool-call index, or ("status", kind)
        self.section: object = None
        self.styled = False  # an ANSI style is on for the open section
        self.status = ""  # the status line on show (Progress / Queued / Waiting)
        # characters on each stream's current line (0: at a line start), by id of the stream
        self.columns: dict[int, int] = {}

    def _write(self, text: str, to: IO[str] | None = None) -> None:
        to = self.to if to is None else to
        if text:
            to.write(text)
            end = text.rfind("\n")
            before = self.columns.get(id(to), 0)
            self.columns[id(to)] = len(text) - end - 1 if end >= 0 else before + len(text)

    def _line(self, text: str, style: str, to: IO[str] | None = None) -> None:
        """`text` on a line of its own."""
        to = self.to if to is None else to
        if self.columns.get(id(to)):
            self._write("\n", to)
        self._write(f"{style}{text}{_RESET}\n" if self.color else f"{text}\n", to)

    def _leave(self) -> None:
        """End the open section: reset its style, make a status final, end an open line."""
        if self.styled:
            self.to.write(_RESET)
            self.styled = False
        if self.status and not self.live:
            self._write(self.status)
        for stream in (self.out, self.side) if self.side is not self.out else (self.out,):
            if self.columns.get(id(stream)):
                self._write("\n", stream)
        self.section = None
        self.status = ""
        self.to = self.side

    def _enter(
        self, section: object, title: str | None, style: str = "", to: IO[str] | None = None
    ) -> None:
        if self.section == section:
            return
        self._leave()
        self.section = section
        if title is not None:
            self._line(f"── {title} ──" if self.color else f"--- {title} ---", _DIM, self.side)
        self.to = self.side if to is None else to
        if style and self.color:
            self.to.write(style)
            self.styled = True

    def _show_status(self, kind: object, line: str) -> None:
        """A status line: rewritten in place while the same `kind` of status goes on."""
        self._enter(("status", kind), None)
        self.status = line
        if self.live:
            self.side.write(_CLEAR_LINE + line)
            self.columns[id(self.side)] = len(line)

    def _notice(self, line: str) -> None:
        """A one-off notice (a retry, the thinking cap) on a line of its own."""
        self._leave()
        self._line(line, _BOLD)

    def event(self, ev: ChatEvent) -> None:
        match ev:
            case Progress(total, cache, processed):
                self._show_status(Progress, _progress_line(total, cache, processed, bar=self.live))
            case Reasoning(text):
                self._enter("reasoning", "thinking", _DIM_ITALIC)
                self._write(text.translate(_CONTROLS))
            case Content(text):
                self._enter("content", "answer", to=self.out)
                self._write(text.translate(_CONTROLS))
            case ToolCallDelta(index, call_id, name, arguments):
                title = f"tool call {index}"
                if name is not None:
                    title += f": {name}"
                if call_id is not None:
                    title += f" (id {call_id})"
                self._enter(index, title, _CYAN, to=self.out)
                self._write(arguments.translate(_CONTROLS))
            case Queued(ahead):
                plural = "request" if ahead == 1 else "requests"
                self._show_status(Queued, f"queued: {ahead} earlier {plural} for this slot")
            case Waiting(slot_busy):
                why = "the slot is busy on the server" if slot_busy else "the model is loading"
                self._show_status(ev, f"waiting: {why}")
            case Retrying(attempt, after_ms, error):
                self._notice(f"retry {attempt} in {after_ms} ms: {' '.join(error.split())}")
            case ThinkingCapped(tokens):
                self._notice(f"thinking capped after {tokens} reasoning tokens")
        if self.flush:
            self._flush()

    def _flush(self) -> None:
        self.out.flush()
        if self.side is not self.out:
            self.side.flush()

    def done(self, completion: Completion, stats: Stats) -> None:
        self._leave()
        self._line("── done ──" if self.color else "--- done ---", _DIM)
        t = completion.timings
        rows = [
            ("finish reason", completion.finish_reason.value),
            ("prompt", f"{_tokens(t.prompt_n)} processed, {t.cache_n} from the cache"),
            ("predicted", f"{_tokens(t.predicted_n)} ({completion.reasoning_tokens} reasoning)"),
        ]
        if t.prompt_ms or t.predicted_ms:
            rows.append(
                (
                    "speed",
                    f"{t.prompt_per_second:.1f} prompt tokens/s, "
                    f"{t.predicted_per_second:.1f} generated tokens/s",
                )
            )
        if completion.thinking_capped:
            rows.append(("thinking", "capped by the client"))
        calls = completion.tool_calls
        rows.append(("tool calls", ", ".join(c.name for c in calls) if calls else "none"))
        if completion.usage is not None:  # as the server counted them
            u = completion.usage
            rows.append(
                (
                    "usage",
                    f"{_tokens(u.prompt_tokens)} prompt ({u.cached_tokens} cached), "
                    f"{_tokens(u.completion_tokens)} completion",
                )
            )
        if completion.model is not None:
            rows.append(("model", completion.model))
        rows.append(("id", completion.id))
        timing = []
        if stats.parse_s is not None:
            per = stats.parse_s / stats.events * 1e6 if stats.events else 0.0
            timing.append(f"parsed {stats.events} events in {stats.parse_s * 1e3:.2f} ms")
            timing.append(f"{per:.1f} µs/event")
        if stats.wall_s is not None:
            timing.append(f"{stats.events} events in {stats.wall_s:.2f} s")
        timing.append(f"{llamafast.IMPLEMENTATION} implementation")
        rows.append(("time", ", ".join(timing)))
        for key, value in rows:
            self._write(f"{key:<14} {value.translate(_CONTROLS)}\n")
        self._flush()

    def fail(self, err: CliError) -> None:
        """Close the display before the error line goes to stderr."""
        if not isinstance(err, OutputError):
            self._leave()
            self._flush()


def _tokens(n: int) -> str:
    return f"{n} token" if n == 1 else f"{n} tokens"


def _progress_line(total: int, cache: int, processed: int, *, bar: bool) -> str:
    line = f"prompt: {processed}/{total} tokens ({cache} from the cache)"
    if bar and total > 0:
        width = 24
        full = min(width, processed * width // total)
        line = f"prompt [{'#' * full}{'.' * (width - full)}] {processed}/{total} ({cache} cached)"
    return line


def event_json(ev: ChatEvent) -> dict[str, Any]:
    """`{"type": <snake_case kind>, <fields>}`, the format of fixtures/expected's events; a
    Content's `logprobs` only when it has some (as `logprobs_json`)."""
    name = type(ev).__name__
    kind = "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")
    obj = {"type": kind, **{f.name: getattr(ev, f.name) for f in dataclasses.fields(ev)}}
    if isinstance(ev, Content):
        if ev.logprobs:
            obj["logprobs"] = logprobs_json(ev.logprobs)
        else:
            del obj["logprobs"]
    return obj


def logprobs_json(logprobs: tuple[TokenLogprob, ...]) -> list[dict[str, Any]]:
    """`[{"token", "logprob", "top": [[token, logprob], ...]}]`."""
    return [
        {"token": t.token, "logprob": t.logprob, "top": [list(a) for a in t.top]} for t in logprobs
    ]


def completion_json(completion: Completion) -> dict[str, Any]:
    """The Completion in the format of fixtures/expected's `completion`, then what the server
    reported: `model`, `usage` (an object, or null) and `logprobs` (only when there are some)."""
    t = completion.timings
    u = completion.usage
    obj = {
        "id": completion.id,
        "content": completion.content,
        "reasoning_content": completion.reasoning_content,
        "tool_calls": [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in completion.tool_calls
        ],
        "finish_reason": completion.finish_reason.value,
        "timings": {"cache_n": t.cache_n, "prompt_n": t.prompt_n, "predicted_n": t.predicted_n},
        "reasoning_tokens": completion.reasoning_tokens,
        "thinking_capped": completion.thinking_capped,
        "model": completion.model,
        "usage": None if u is None else dataclasses.asdict(u),
    }
    if completion.logprobs:
        obj["logprobs"] = logprobs_json(completion.logprobs)
    return obj


class JsonView:
    """One JSON object per line: each event, then `{"type": "completion", ...}` (for scripts).

    The completion line holds the Completion's fields plus `implementation` and, for replay,
    `parse_ms`; a failure is one `{"type": "error", "error": <class>, "message": ...}` line.
    """

    def __init__(self, out: IO[str], *, flush: bool) -> None:
        self.out = out
        self.flush = flush

    def _line(self, obj: dict[str, Any]) -> None:
        self.out.write(json.dumps(obj) + "\n")
        if self.flush:
            self.out.flush()

    def event(self, ev: ChatEvent) -> None:
        self._line(event_json(ev))

    def done(self, completion: Completion, stats: Stats) -> None:
        obj = {"type": "completion", **completion_json(completion)}
        obj["implementation"] = llamafast.IMPLEMENTATION
        if stats.parse_s is not None:
            obj["parse_ms"] = round(stats.parse_s * 1e3, 3)
        self._line(obj)
        self.out.flush()

    def fail(self, err: CliError) -> None:
        if not isinstance(err, OutputError):
            self._line({"type": "error", "error": err.kind, "message": err.message})
            self.out.flush()


View = LiveView | JsonView


def make_view(
    args: argparse.Namespace, out: IO[str], *, flush: bool, side: IO[str] | None = None
) -> View:
    """The view `args` ask for; `side` (the status, reasoning and summary) decides the
    terminal styling when given, as most of what is styled goes there."""
    if args.json:
        return JsonView(out, flush=flush)
    live = (out if side is None else side).isatty()
    color = {"always": True, "never": False}.get(
        args.color, live and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
    )
    return LiveView(
        out, live=live or args.color == "always", color=color, flush=flush or live, side=side
    )


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


# --- replay -------------------------------------------------------------------------------


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
        if not self.left:
            if not self.reads:
                return self.file.readinto(buffer)  # type: ignore[attr-defined,no-any-return]
            at_ms, self.left = self.reads.pop()
            pause = (at_ms - self.at_ms) * self.scale / 1000
            self.at_ms = at_ms
            if pause > 0:
                start = time.perf_counter()
                _sleep(pause)
                self.slept += time.perf_counter() - start
        view = memoryview(buffer)[: self.left]
        n: int = self.file.readinto(view)  # type: ignore[attr-defined]
        self.left = max(0, self.left - n) if n else 0
        return n


def paced(file: IO[bytes], reads: list[tuple[float, int]]) -> _PacedFile:
    """`file` read at the recorded pace, sped up to last at most PACE_LIMIT_S."""
    total_s = max((at for at, _ in reads), default=0.0) / 1000
    scale = min(1.0, PACE_LIMIT_S / total_s) if total_s > 0 else 1.0
    return _PacedFile(file, reads, scale)


def recorded_reads(name: str | None) -> list[tuple[float, int]]:
    """The recorded reads of recording `name` (as open_recording finds it) from its timing file;
    [] when it has none. A timing file that is not as described is a one-line CliError."""
    if name is not None and _is_path(name):
        path = name.removesuffix(".http") + TIMING
        if not os.path.exists(path):
            return []
        where = path
        read: Callable[[], bytes] = pathlib.Path(path).read_bytes
    else:
        key = DEFAULT_RECORDING if name is None else name
        resource = importlib.resources.files(llamafast) / RECORDINGS / f"{key}{TIMING}"
        if not resource.is_file():
            return []
        where, read = f"{key}{TIMING} (bundled)", resource.read_bytes
    try:
        timing = json.loads(read())
        reads = timing["reads_ms_bytes"] if "reads_ms_bytes" in timing else []
        out = [(float(at), int(size)) for at, size in reads]
    except OSError as err:
        raise CliError(type(err).__name__, f"cannot read {where!r}: {err.strerror}") from None
    except (ValueError, TypeError, AttributeError) as err:
        raise CliError(
            "ValueError",
            f"{where!r} is not a timing file (reads_ms_bytes: [[ms, bytes], ...]): {err}",
        ) from None
    if any(not math.isfinite(at) or size < 0 for at, size in out):
        raise CliError("ValueError", f"{where!r} holds a read at a bad time or of a bad size")
    return out


def _is_path(name: str) -> bool:
    """A FILE argument names a file (not a bundled recording) when it looks like one."""
    return os.path.exists(name) or os.sep in name or name.endswith(".http")


def bundled() -> list[str]:
    """The names of the recordings shipped inside the package."""
    root = importlib.resources.files(llamafast) / RECORDINGS
    return sorted(p.name.removesuffix(".http") for p in root.iterdir() if p.name.endswith(".http"))


def open_recording(name: str | None) -> tuple[str, IO[bytes]]:
    """The recording `name`: a file path, else a bundled recording's name; None: the default."""
    if name is not None and _is_path(name):
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
    resource = importlib.resources.files(llamafast) / RECORDINGS / f"{key}.http"
    return f"{key} (bundled)", resource.open("rb")


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


def replay(args: argparse.Namespace, out: IO[str]) -> int:
    if args.list:
        for name in bundled():
            default, timed = name == DEFAULT_RECORDING, bool(recorded_reads(name))
            if args.json:
                line = json.dumps({"name": name, "default": default, "timing": timed})
            else:
                line = f"{name}{'  (default)' if default else ''}"
            out.write(line + "\n")
        return 0
    delay = _option("--delay", args.delay, float)
    if delay is not None and delay < 0:
        raise UsageError("ValueError", f"--delay must be at least 0, not {args.delay!r}")
    # --delay (even 0) replaces the recorded pacing; --no-pace turns it off. A recording
    # without timing goes at a steady modest pace, its pauses capped at UNTIMED_LIMIT_S.
    reads = [] if args.no_pace or delay is not None else recorded_reads(args.file)
    limit = math.inf
    if delay is None and not reads and not args.no_pace:
        delay, limit = UNTIMED_PACE_S, UNTIMED_LIMIT_S
    view = make_view(args, out, flush=bool(delay or reads))
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
            raise _Failed(view, err) from None
        except (KeyboardInterrupt, OutputError) as err:
            raise _Failed(view, err) from None
        view.done(completion, stats)
    return 0


# --- chat ---------------------------------------------------------------------------------


def _option(name: str, text: str | None, kind: type[int] | type[float]) -> Any:
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


def _json_schema(path: str) -> dict[str, Any]:
    """`response_format` asking for JSON that follows the JSON Schema in the file `path`."""
    try:
        with open(path, encoding="utf-8") as file:
            schema = json.load(file)
    except OSError as err:
        raise CliError(type(err).__name__, f"cannot read {path!r}: {err.strerror}") from None
    except ValueError as err:  # not UTF-8, or not JSON
        raise CliError("ValueError", f"{path!r} is not a JSON file: {err}") from None
    if not isinstance(schema, dict):
        kind = type(schema).__name__
        raise CliError("ValueError", f"{path!r} must hold a JSON Schema object, not a {kind}")
    return {"type": "json_schema", "json_schema": {"name": "response", "schema": schema}}


def _api_key(args: argparse.Namespace, cfg: Config) -> str | None:
    """--api-key, else LLAMA_API_KEY (the variable llama-server itself reads), else the
    config's."""
    if args.api_key is not None:
        return str(args.api_key)
    return os.environ.get(API_KEY_VARIABLE) or cfg.infer.api_key


def _config(args: argparse.Namespace) -> Config:
    """--config FILE, else ./llamafast.toml when there is one, else the defaults."""
    path = args.config
    if path is None and os.path.isfile(CONFIG_FILE):
        path = CONFIG_FILE
    return Config() if path is None else Config.from_toml(path)


def chat(args: argparse.Namespace, out: IO[str]) -> int:
    if args.any_slot and args.slot is not None:
        raise UsageError("ValueError", "--slot and --any-slot cannot both be given")
    slot = None if args.any_slot else _option("--slot", args.slot or "0", int)
    max_tokens = _option("--max-tokens", args.max_tokens, int)
    temperature = _option("--temperature", args.temperature, float)
    seed = _option("--seed", args.seed, int)
    budget = _option("--thinking-budget", args.thinking_budget, int)
    try:
        cfg = _config(args)
        infer = cfg.infer if args.url is None else dataclasses.replace(cfg.infer, url=args.url)
        infer = dataclasses.replace(infer, api_key=_api_key(args, cfg))
        if args.ca_file is not None:
            infer = dataclasses.replace(infer, ca_file=args.ca_file)
        limits = cfg.limits
        if budget is not None:
            limits = dataclasses.replace(limits, thinking_budget=budget)
        cfg = Config(infer=infer, limits=limits)
    except (OSError, ValueError) as err:
        raise CliError.of(err, "bad configuration: ") from None
    messages: list[ChatMessage] = [User(args.prompt)]
    if args.system:
        messages.insert(0, System(args.system))
    req = ChatRequest(
        slot,
        messages,
        thinking=args.think,
        max_tokens=max_tokens,
        temperature=temperature,
        seed=seed,
        response_format=None if args.json_schema is None else _json_schema(args.json_schema),
    )
    try:  # every bad value is refused here, before anything is sent
        build_body(cfg, req)
    except ValueError as err:  # the request's values are the command line's
        raise UsageError.of(err, "bad request: ") from None
    try:  # looked up at run time so the tests can stand a fake client in
        client_cls = importlib.import_module("llamafast._client").Client
    except (ImportError, AttributeError) as err:
        raise CliError.of(err, "the chat client is not available: ") from None
    # the answer alone on stdout; the status, reasoning and summary on stderr
    view = make_view(args, out, flush=True, side=_Output(sys.stderr))  # type: ignore[arg-type]
    start = time.perf_counter()
    try:
        with client_cls(cfg).stream(req) as stream:
            stats = Stats(events=0)
            for ev in stream:
                stats.events += 1
                view.event(ev)
            completion = stream.completion
    except ConnectError as err:
        raise _Failed(view, err, _connect_message(err)) from None
    # ValueError: a slot the server does not have, refused before anything is sent.
    except (SseError, InferError, OSError, ValueError, KeyboardInterrupt) as err:
        raise _Failed(view, err) from None
    stats.wall_s = time.perf_counter() - start
    view.done(completion, stats)
    return 0


# OpenSSL's reasons for a handshake whose answer is not TLS at all (a plain-HTTP server's
# `HTTP/1.1 400` read as a TLS record).
_NOT_TLS = {
    "WRONG_VERSION_NUMBER",
    "HTTP_REQUEST",
    "PACKET_LENGTH_TOO_LONG",
    "RECORD_LAYER_FAILURE",
}


def _connect_message(err: ConnectError) -> str:
    """ConnectError's message, saying in words what a failed TLS handshake means."""
    tls = err.error
    if not isinstance(tls, ssl.SSLError):
        return str(err)
    if isinstance(tls, ssl.SSLCertVerificationError):
        why = "the server's certificate was not accepted"
    elif tls.reason in _NOT_TLS:
        why = "the server does not speak TLS (try http://)"
    else:
        why = "the TLS handshake failed"
    return f"could not connect to the server {err.url}: {why} ({type(tls).__name__}: {tls})"


# --- the command line ---------------------------------------------------------------------


class OutputError(CliError):
    """Writing the output failed (a full disk; a reader that left, `broken`)."""

    def __init__(self, err: OSError) -> None:
        super().__init__(type(err).__name__, f"cannot write the output: {err.strerror or err}")
        self.broken = isinstance(err, BrokenPipeError)


class _Output:
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


class _Failed(CliError):
    """A failure after the display opened: the view is closed before the error line."""

    def __init__(self, view: View, err: BaseException, message: str | None = None) -> None:
        if isinstance(err, CliError):
            super().__init__(err.kind, err.message)
        elif isinstance(err, KeyboardInterrupt):
            super().__init__("KeyboardInterrupt", "interrupted")
        else:
            super().__init__(type(err).__name__, message or str(err) or repr(err))
        self.view = view
        self.cause = err


class _Parser(argparse.ArgumentParser):
    """argparse, its usage errors one line (status 2, as argparse's own)."""

    def error(self, message: str) -> Any:
        self.exit(2, f"{PROG}: {message} (see '{self.prog} --help')\n")


def _unknown_command(word: str) -> CliError | None:
    """A first word that is neither a command, an option, a file nor a bundled recording, but
    close to a command's name: named as a mistyped command."""
    if word.startswith("-") or _is_path(word) or word in bundled():
        return None
    guess = difflib.get_close_matches(word.lower(), COMMANDS, n=1, cutoff=0.6)
    if not guess:
        return None
    return CliError(
        "",
        f"unknown command {word!r} (choose from {', '.join(COMMANDS)}); did you mean {guess[0]!r}?",
    )


def parser() -> argparse.ArgumentParser:
    top = _Parser(
        prog=PROG,
        description="Watch llama-server chat completions stream: replay a recording, or chat.",
    )
    top.add_argument(
        "--version",
        action="version",
        version=f"%(prog)s {llamafast.__version__} ({llamafast.IMPLEMENTATION} implementation)",
    )
    config_help = f"read [infer] and [limits] from FILE (default: ./{CONFIG_FILE} when present)"
    top.add_argument("--config", metavar="FILE.toml", help=config_help)
    sub = top.add_subparsers(dest="command", metavar="{replay,chat,serve}")
    sub.add_parser("serve", help="answer as llama-server does, from recordings (no model)")

    def display_options(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--json", action="store_true", help="one JSON object per event, then the completion"
        )
        p.add_argument(
            "--color",
            choices=("auto", "always", "never"),
            default="auto",
            help="terminal styling and in-place status lines (auto: when stdout is a terminal)",
        )

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
    display_options(rp)
    rp.set_defaults(run=replay)

    cp = sub.add_parser(
        "chat",
        help="stream an answer from a running llama-server",
        description="Stream a chat completion from a running llama-server.",
    )
    cp.add_argument("prompt", help="the user message")
    cp.add_argument("--url", help="the server (default: the config's, http://127.0.0.1:8080)")
    cp.add_argument("--slot", help="the server slot to use (default: 0)")
    cp.add_argument(
        "--any-slot",
        action="store_true",
        help="let the server pick the slot (the one whose cache fits the prompt best)",
    )
    cp.add_argument("--think", action="store_true", help="let the model reason first")
    cp.add_argument("--system", help="a system message")
    cp.add_argument("--max-tokens", metavar="N", help="most tokens to generate for this request")
    cp.add_argument("--temperature", metavar="T", help="sampling temperature for this request")
    cp.add_argument("--seed", metavar="N", help="sampling seed: the same seed, the same answer")
    cp.add_argument(
        "--json-schema",
        metavar="FILE.json",
        help="answer with JSON following the JSON Schema in FILE (response_format json_schema)",
    )
    cp.add_argument(
        "--api-key",
        metavar="KEY",
        help=f"the server's API key (default: ${API_KEY_VARIABLE}, then the config's)",
    )
    cp.add_argument("--thinking-budget", metavar="N", help="reasoning tokens before reasoning_end")
    # given after the command too; SUPPRESS keeps a value given before it
    cp.add_argument("--config", metavar="FILE.toml", default=argparse.SUPPRESS, help=config_help)
    cp.add_argument(
        "--ca-file",
        metavar="FILE.pem",
        help="trust the CA certificates in FILE for an https:// server (default: the config's)",
    )
    display_options(cp)
    cp.set_defaults(run=chat)
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


def main(argv: Sequence[str] | None = None, out: IO[str] | None = None) -> int:
    """Run the command line; the exit status is returned: 0 done, 1 failed (one line on
    stderr), 2 a usage error (one line, as argparse's), 130 interrupted (Ctrl-C, at any
    moment: one line)."""
    try:
        return _main(argv, out)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


def _main(argv: Sequence[str] | None, out: IO[str] | None) -> int:
    out = sys.stdout if out is None else out
    if out is sys.stdout and hasattr(out, "reconfigure"):
        out.reconfigure(errors="backslashreplace")  # a terminal that cannot show a character
    words = list(sys.argv[1:] if argv is None else argv)
    at = _first_word(words)
    first = words[at] if at < len(words) else None
    if first == "serve":  # a server, not a display: its own options (_serve.py)
        from ._serve import main as serve

        return serve(words[at + 1 :])
    if first is not None and first not in (*COMMANDS, "-h", "--help", "--version"):
        unknown = _unknown_command(first)
        if unknown is not None:
            print(f"{PROG}: {unknown.message}", file=sys.stderr)
            return 2
    if first is None or first not in (*COMMANDS, "-h", "--help", "--version"):
        words.insert(at, "replay")  # replay is the main job
    args = parser().parse_args(words)
    sink = cast(IO[str], _Output(out))  # the views use write, flush and isatty only
    try:
        try:
            status: int = args.run(args, sink)
        except KeyboardInterrupt as stop:  # before the display opened
            raise CliError("KeyboardInterrupt", "interrupted") from stop
    except CliError as err:
        cause = err.cause if isinstance(err, _Failed) else err
        try:
            if isinstance(err, _Failed):
                err.view.fail(err)
            elif args.json:
                JsonView(sink, flush=True).fail(err)
        except OutputError as failed:
            cause = failed
        if isinstance(cause, OutputError):
            _drop_output(out)
            if cause.broken:  # `llamafast replay | head`: the reader left; nothing to say
                return 1
            err = cause
        if err.kind == "KeyboardInterrupt":
            print(f"{PROG}: {err.message}", file=sys.stderr)
            return 130
        print(f"{PROG}: {err}", file=sys.stderr)
        return err.status
    return status
