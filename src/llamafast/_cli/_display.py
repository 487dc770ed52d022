"""The display: ChatEvents as they come, then the Completion, for a person or for a script.

`LiveView` writes text a person watches (reasoning set apart, tool calls as they assemble,
status lines rewritten in place on a terminal); `JsonView` one JSON object per line, in the
shapes `event_json` and `completion_json` give. `make_view` picks the one the options ask for;
`add_options` declares those options (--json, --color) on a command's parser.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from typing import IO, Any

import llamafast

from .._values import (
    ChatEvent,
    Completion,
    Content,
    Progress,
    Queued,
    Reasoning,
    Retrying,
    ThinkingCapped,
    TokenLogprob,
    ToolCallDelta,
    Waiting,
)
from ._failures import CliError, OutputError, one_line, shown

__all__ = [
    "JsonView",
    "LiveView",
    "Stats",
    "View",
    "add_options",
    "completion_json",
    "event_json",
    "make_view",
]

# ANSI styles for a terminal.
_RESET = "\x1b[0m"
_DIM_ITALIC = "\x1b[2;3m"  # reasoning
_DIM = "\x1b[2m"
_BOLD = "\x1b[1m"
_CYAN = "\x1b[36m"
_CLEAR_LINE = "\r\x1b[2K"


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
                self._write(shown(text))
            case Content(text):
                self._enter("content", "answer", to=self.out)
                self._write(shown(text))
            case ToolCallDelta(index, call_id, name, arguments):
                title = f"tool call {index}"
                if name is not None:
                    title += f": {one_line(name)}"
                if call_id is not None:
                    title += f" (id {one_line(call_id)})"
                self._enter(index, title, _CYAN, to=self.out)
                self._write(shown(arguments))
            case Queued(ahead):
                plural = "request" if ahead == 1 else "requests"
                self._show_status(Queued, f"queued: {ahead} earlier {plural} for this slot")
            case Waiting(slot_busy):
                why = "the slot is busy on the server" if slot_busy else "the model is loading"
                self._show_status(ev, f"waiting: {why}")
            case Retrying(attempt, after_ms, error):
                self._notice(f"retry {attempt} in {after_ms} ms: {one_line(error)}")
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
            self._write(f"{key:<14} {one_line(value)}\n")
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


def add_options(p: argparse.ArgumentParser) -> None:
    """The display's options, on the parser of a command that shows a stream."""
    p.add_argument(
        "--json", action="store_true", help="one JSON object per event, then the completion"
    )
    p.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="terminal styling and in-place status lines (auto: when stdout is a terminal)",
    )
