"""The assembler, pure twin: the rules of docs/assembler.md.

Each payload is parsed by the stdlib's C JSON scanner, made as strict as simdjson by cheap byte
searches that send only suspicious payloads down slow exact checks; then only the fields the rules
need are read. A push is all or nothing: the chunk is checked whole, then folded into the state.
"""

from __future__ import annotations

import _thread
import json
import math
import re
from collections.abc import Callable
from typing import Any, Final, Self

from ._errors import HttpError, ProtocolError, StreamClosedEarlyError, cut
from ._partial_json import partial_arguments
from ._values import (
    ChatEvent,
    Completion,
    Content,
    FinishReason,
    Progress,
    Reasoning,
    Timings,
    ToolCall,
    ToolCallDelta,
)

__all__ = ["MAX_DEPTH", "Assembler"]

MAX_DEPTH: Final = 256
"""The deepest nesting of objects and arrays a payload may have (its own object is depth 1,
an empty [] or {} counts as a level): both twins accept exactly this deep and reject deeper."""

_INT_MAX: Final = (1 << 63) - 1  # a count's upper bound (docs/assembler.md, rule COUNTS)
_JSON_INT_MIN: Final = -(1 << 63)  # the integers simdjson can hold: int64 or uint64
_JSON_INT_MAX: Final = (1 << 64) - 1

_FINISH: Final = {  # the only finish reasons (docs/assembler.md, rule SHAPE)
    "stop": FinishReason.STOP,
    "tool_calls": FinishReason.TOOL_CALLS,
    "length": FinishReason.LENGTH,
}

_ABSENT: Final[Any] = object()  # a key that is not there (null is a value)


# --- strict JSON (docs/assembler.md, rule STRICT-JSON) -----------------------------------------
# json.loads accepts NaN/Infinity, integers of any size, floats that overflow to inf, lone
# surrogate escapes and any nesting Python's stack allows; simdjson rejects all of them.
# NaN/Infinity go through parse_constant, which costs nothing on valid input. For the rest, one
# translate of the payload's bytes marks what could be a problem: digits become "0", "E" "e",
# "D" "d", "[" "{", and signs vanish. Then:
#   "0" * 19     a run of 19 digits: an integer beyond int64/uint64 needs one, and so does a
#                float that overflows without an exponent (309 digits);
#   "e000"       an exponent of 3 or more digits: every other float is below 1e117;
#   "\\ud"       a \uDxxx escape, the only way to write a surrogate in valid UTF-8;
#   "{" * 257    more than MAX_DEPTH opening brackets, needed to nest that deep.
# Only a payload that shows one of them pays for the exact check (integer and float hooks, or a
# walk of the parsed value); strings that merely look like that pass the exact check.

_MARKS: Final = bytes.maketrans(b"0123456789ED[", b"0000000000ed{")
_DIGIT_RUN: Final = b"0" * 19
_LONG_EXPONENT: Final = b"e000"
_SURROGATE_ESCAPE: Final = b"\\ud"
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def _int_in_range(text: str) -> int:
    value = int(text)
    if not _JSON_INT_MIN <= value <= _JSON_INT_MAX:
        raise ValueError(f"the integer {text[:40]} is out of range")
    return value


_DECODER: Final = json.JSONDecoder(parse_constant=_reject_constant)
# The decoder's C scanner (typeshed does not declare the attribute): (text, index) -> (value, end).
_SCAN: Final[Callable[[str, int], tuple[Any, int]]] = _DECODER.scan_once  # type: ignore[attr-defined]
_CHECKED: Final = json.JSONDecoder(
    parse_constant=_reject_constant, parse_float=_finite_float, parse_int=_int_in_range
)


def _parse(text: str, raw: bytes) -> Any:
    """`text` (whose UTF-8 is `raw`) parsed as strictly as simdjson would; ValueError if not."""
    marks = raw.translate(_MARKS, b"+-")
    if _DIGIT_RUN in marks or _LONG_EXPONENT in marks:
        value = _CHECKED.decode(text)
    else:
        try:
            value, end = _SCAN(text, 0)  # the C scanner alone: no Python frame on the way
        except StopIteration:
            end = -1
        if end != len(text):  # white space around it, or not JSON: the full, reporting path
            value = _DECODER.decode(text)
    if len(marks) > 2 * MAX_DEPTH and marks.count(b"{") > MAX_DEPTH:
        if _depth(value) > MAX_DEPTH:
            raise ValueError(f"nested deeper than {MAX_DEPTH}")
    if _SURROGATE_ESCAPE in marks and _has_lone_surrogate(value):
        raise ValueError("a lone surrogate escape")
    return value


def _depth(value: Any) -> int:
    """How deep objects and arrays nest in `value` (a scalar is 0); iterative, any depth."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            node = node.values()
        elif not isinstance(node, list):
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in node)
    return deepest


def _has_lone_surrogate(value: Any) -> bool:
    """Whether a key or string in `value` holds a surrogate: json leaves an escaped one lone
    (a valid pair becomes one character) and UTF-8 cannot carry one."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            if not node.isascii() and _SURROGATE.search(node):
                return True
        elif isinstance(node, dict):
            stack.extend(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


# --- messages -------------------------------------------------------------------------------


def busy_error(asm: object, method: str) -> RuntimeError:
    """The error for a second call into an assembler while a push or finish is running (both
    twins raise this one)."""
    name = type(asm).__name__
    return RuntimeError(
        f"{name}.{method}() was called while this {name} is still running a push or finish "
        "(from another thread, or from code it called back, such as a finalizer); "
        f"use one {name} per consumer"
    )


def _bad(what: str, payload: str | bytes) -> ProtocolError:
    """Every ProtocolError says what was wrong and shows a cut of the payload
    (docs/assembler.md, rule MESSAGE)."""
    return ProtocolError(f"{what}: {cut(payload)}")


def _kind(value: Any) -> str:
    """The JSON kind of a value, for messages (the same words as the Cython twin's)."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    return "null"


def _count(value: Any, where: str, payload: str | bytes) -> int:
    """A count: an integer, not bool or float, with 0 <= n <= 2**63-1 (docs/assembler.md,
    rule COUNTS)."""
    if type(value) is not int:
        raise _bad(f'"{where}" is {_kind(value)}, not an integer', payload)
    if value < 0:
        raise _bad(f'"{where}" is negative: {value}', payload)
    if value > _INT_MAX:
        raise _bad(f'"{where}" is out of range: {value}', payload)
    return value


class Assembler:
    """Folds streamed chunks into a Completion, following the rules of docs/assembler.md."""

    __slots__ = (
        "_busy",
        "_calls",
        "_content",
        "_finish_reason",
        "_id",
        "_in_reasoning",
        "_partials",
        "_reasoning",
        "_reasoning_tokens",
        "_timings",
    )
    _busy: _thread.LockType  # held while push or finish runs
    _id: str | None
    _timings: tuple[int, int, int, float, float]  # cache_n, prompt_n, predicted_n, and the ms
    _partials: dict[int, list[Any]]  # partial_arguments' parsers, per call
    _reasoning_tokens: int
    _in_reasoning: bool
    _finish_reason: FinishReason | None
    _content: list[str]  # the text pieces, joined by finish()
    _reasoning: list[str]
    _calls: list[list[Any]]  # one [id, name, [argument pieces]] per tool call

    # The state is made in __new__, not __init__, as the Cython twin makes its state when the
    # object is allocated: `Assembler.__new__(Assembler)` and a subclass whose __init__ skips
    # super().__init__() get a working, empty assembler in both twins, and calling __init__
    # again changes nothing in either.
    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        self = super().__new__(cls)
        self._busy = _thread.allocate_lock()
        self._id = None
        self._timings = (0, 0, 0, 0.0, 0.0)
        self._reasoning_tokens = 0
        self._in_reasoning = False
        self._finish_reason = None
        self._content = []
        self._reasoning = []
        self._calls = []
        self._partials = {}
        return self

    def __init__(self) -> None:
        pass

    @property
    def id(self) -> str | None:
        return self._id

    @property
    def reasoning_tokens(self) -> int:
        return self._reasoning_tokens

    @property
    def in_reasoning(self) -> bool:
        return self._in_reasoning

    @property
    def is_finished(self) -> bool:
        return self._finish_reason is not None

    def partial_arguments(self, index: int) -> Any:
        """The arguments of tool call `index` as far as the chunks pushed so far go, as a Python
        value: a string being read is kept as far as it goes, a key or a number being read is
        left out, a container that has begun is there; None before anything is. Once the
        finish reason has come the text is whole (a number at its end counts, a value cut short
        is an error). Each call reads only the text that came since the last one; the
        containers are new each time, the finished values in them shared with later calls'.
        ProtocolError when the text is not JSON; IndexError when there is no such call yet."""
        if not self._busy.acquire(False):  # one caller at a time, as in push
            raise busy_error(self, "partial_arguments")
        try:
            return partial_arguments(
                self._partials, self._calls, index, self._finish_reason is not None
            )
        finally:
            self._busy.release()

    def push(self, data: str | bytes) -> list[ChatEvent]:
        """One `data:` payload (str or UTF-8 bytes): the events it stands for, in order."""
        # One caller at a time: a push or finish that starts while another runs (another
        # thread, a finalizer or any code the first one calls back) would fold its chunk in
        # between the first one's checks and its commit. It is refused, and the first goes on.
        if not self._busy.acquire(False):
            raise busy_error(self, "push")
        try:
            return self._push(data)
        finally:
            self._busy.release()

    def _push(self, data: str | bytes) -> list[ChatEvent]:
        if type(data) is not str and type(data) is not bytes:
            # A subclass is taken as the plain str or bytes it converts to (as the Cython twin
            # does): its own __repr__ or methods never shape a message or HttpError's body.
            if isinstance(data, str):
                data = str(data)
            elif isinstance(data, bytes):
                data = bytes(data)
        if isinstance(data, str):
            text = data
            try:
                raw = data.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate: no valid JSON text holds one
                raise _bad("the chunk is not valid JSON (a lone surrogate)", data) from None
        elif isinstance(data, bytes):
            raw = data
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as err:
                raise _bad(f"the chunk is not valid UTF-8 ({err.reason})", data) from None
        else:
            raise TypeError(f"push takes str or bytes, not {type(data).__name__}")
        try:
            chunk = _parse(text, raw)
        except (ValueError, RecursionError) as err:
            raise _bad(f"the chunk is not valid JSON ({err})", data) from None
        if type(chunk) is not dict:  # docs/assembler.md, rule SHAPE: a JSON object
            raise _bad(f"the chunk is {_kind(chunk)}, not a JSON object", data)

        # The server failed after the stream started (docs/assembler.md, rule SERVER-ERROR).
        error = chunk.get("error")
        if type(error) is dict:
            code = error.get("code")
            raise HttpError(code if type(code) is int else 500, text)

        choices = chunk.get("choices", _ABSENT)
        if type(choices) is not list:
            if choices is _ABSENT:
                raise _bad('the chunk has no "choices"', data)
            raise _bad(f'"choices" is {_kind(choices)}, not an array', data)

        # The first chunk carrying an id sets it; every id must be a string (docs/assembler.md,
        # rules ID and SHAPE).
        new_id = None
        cid = chunk.get("id", _ABSENT)
        if cid is not _ABSENT:
            if type(cid) is not str:
                raise _bad(f'"id" is {_kind(cid)}, not a string', data)
            if self._id is None:
                new_id = cid

        # The latest timings replace the previous ones; missing counts are 0, and so are missing
        # times (milliseconds, finite non-negative numbers: the rates need them). See
        # docs/assembler.md, rule TIMINGS.
        timings = chunk.get("timings", _ABSENT)
        if timings is _ABSENT:
            counts = self._timings
        else:
            if type(timings) is not dict:
                raise _bad(f'"timings" is {_kind(timings)}, not an object', data)
            cache_n = timings.get("cache_n", 0)
            prompt_n = timings.get("prompt_n", 0)
            predicted_n = timings.get("predicted_n", 0)
            if not (
                type(cache_n) is int
                and type(prompt_n) is int
                and type(predicted_n) is int
                and 0 <= cache_n <= _INT_MAX
                and 0 <= prompt_n <= _INT_MAX
                and 0 <= predicted_n <= _INT_MAX
            ):
                _count(cache_n, "timings.cache_n", data)
                _count(prompt_n, "timings.prompt_n", data)
                _count(predicted_n, "timings.predicted_n", data)
            prompt_ms = _millis(timings.get("prompt_ms", 0.0), "timings.prompt_ms", data)
            predicted_ms = _millis(timings.get("predicted_ms", 0.0), "timings.predicted_ms", data)
            counts = (cache_n, prompt_n, predicted_n, prompt_ms, predicted_ms)

        # Progress first (docs/assembler.md, rule ORDER).
        events: list[ChatEvent] = []
        progress = chunk.get("prompt_progress", _ABSENT)
        if progress is not _ABSENT:
            events.append(_progress(progress, data))

        # Then per choice Reasoning, Content, one ToolCallDelta per tool_calls entry
        # (docs/assembler.md, rule ORDER).
        ncalls = len(self._calls)
        finish_reason = self._finish_reason
        in_reasoning = self._in_reasoning
        reasoned = False
        for choice in choices:
            if type(choice) is not dict:
                raise _bad(f"a choice is {_kind(choice)}, not an object", data)
            reason = choice.get("finish_reason")
            if reason is not None:  # one of the three, or null (docs/assembler.md, rule SHAPE)
                if type(reason) is not str:
                    raise _bad(f'"finish_reason" is {_kind(reason)}, not a string', data)
                if reason not in _FINISH:
                    raise _bad(f'unknown "finish_reason" {reason!r}', data)
                finish_reason = _FINISH[reason]
            delta = choice.get("delta")
            if delta is None:  # missing or null is an empty delta (docs/assembler.md, rule SHAPE)
                continue
            if type(delta) is not dict:
                raise _bad(f'"delta" is {_kind(delta)}, not an object', data)
            piece = delta.get("reasoning_content")
            if piece is not None:
                if type(piece) is not str:
                    raise _bad(f'"reasoning_content" is {_kind(piece)}, not a string', data)
                if piece:  # empty text, no event (docs/assembler.md, rule NO-EMPTY)
                    events.append(Reasoning(piece))
                    in_reasoning = reasoned = True  # docs/assembler.md, rule IN-REASONING
            piece = delta.get("content")
            if piece is not None:
                if type(piece) is not str:
                    raise _bad(f'"content" is {_kind(piece)}, not a string', data)
                if piece:
                    events.append(Content(piece))
                    in_reasoning = False  # answer text (docs/assembler.md, rule IN-REASONING)
            calls = delta.get("tool_calls")
            if calls is not None:
                if type(calls) is not list:
                    raise _bad(f'"tool_calls" is {_kind(calls)}, not an array', data)
                for entry in calls:
                    call = _tool_call_delta(entry, ncalls, data)
                    events.append(call)
                    in_reasoning = False  # a tool-call piece (docs/assembler.md, rule IN-REASONING)
                    if call.index == ncalls:
                        ncalls += 1

        # The whole chunk is valid: fold it in.
        if new_id is not None:
            self._id = new_id
        self._timings = counts
        # The latest predicted_n, timings updated first (docs/assembler.md, rule REASONING-TOKENS).
        if reasoned:
            self._reasoning_tokens = counts[2]
        self._in_reasoning = in_reasoning
        self._finish_reason = finish_reason
        for event in events:
            if type(event) is Content:
                self._content.append(event.text)
            elif type(event) is Reasoning:
                self._reasoning.append(event.text)
            elif type(event) is ToolCallDelta:
                self._fold_tool_call(event)
        return events

    def _fold_tool_call(self, delta: ToolCallDelta) -> None:
        """Arguments concatenated; id and name from the first piece that has them
        (docs/assembler.md, rule CALLS)."""
        if delta.index == len(self._calls):
            self._calls.append([delta.id, delta.name, [delta.arguments]])
            return
        call = self._calls[delta.index]
        if call[0] is None:
            call[0] = delta.id
        if call[1] is None:
            call[1] = delta.name
        call[2].append(delta.arguments)

    def finish(self, thinking_capped: bool = False) -> Completion:
        """The Completion (docs/assembler.md, rule FINISH): StreamClosedEarlyError without a
        finish_reason, ProtocolError without an id or with a tool call that never got an id or a
        name."""
        if not self._busy.acquire(False):  # one caller at a time, as in push
            raise busy_error(self, "finish")
        try:
            return self._finish(thinking_capped)
        finally:
            self._busy.release()

    def _finish(self, thinking_capped: bool) -> Completion:
        if self._finish_reason is None:
            raise StreamClosedEarlyError()
        if self._id is None:
            raise ProtocolError("the stream finished but no chunk carried an id")
        calls = []
        for i, (call_id, name, pieces) in enumerate(self._calls):
            if call_id is None:
                raise ProtocolError(f"tool call {i} never got an id")
            if name is None:
                raise ProtocolError(f"tool call {i} never got a name")
            calls.append(ToolCall(call_id, name, "".join(pieces)))
        return Completion(
            self._id,
            # None if there is no text (docs/assembler.md, rule TEXT)
            "".join(self._content) if self._content else None,
            "".join(self._reasoning) if self._reasoning else None,
            tuple(calls),
            self._finish_reason,
            Timings(*self._timings),
            self._reasoning_tokens,
            thinking_capped,
        )


def _millis(value: Any, where: str, payload: str | bytes) -> float:
    """A time in milliseconds: a number (an integer is taken as a float, a bool is not one)."""
    if type(value) is float:
        if value >= 0.0:  # JSON has no NaN or infinity: the strict parse refused them
            return value
        raise _bad(f'"{where}" is negative: {value!r}', payload)
    if type(value) is int:
        if value >= 0:
            return float(value)
        raise _bad(f'"{where}" is negative: {float(value)!r}', payload)
    raise _bad(f'"{where}" is {_kind(value)}, not a number', payload)


def _progress(progress: Any, payload: str | bytes) -> Progress:
    """prompt_progress is an object whose total, cache and processed are counts
    (docs/assembler.md, rule COUNTS)."""
    if type(progress) is not dict:
        raise _bad(f'"prompt_progress" is {_kind(progress)}, not an object', payload)
    counts = []
    for name in ("total", "cache", "processed"):
        value = progress.get(name, _ABSENT)
        if value is _ABSENT:
            raise _bad(f'"prompt_progress" has no "{name}"', payload)
        counts.append(_count(value, f"prompt_progress.{name}", payload))
    return Progress(*counts)


def _tool_call_delta(entry: Any, ncalls: int, payload: str | bytes) -> ToolCallDelta:
    """One tool_calls entry as a ToolCallDelta (docs/assembler.md, rules PIECE, SHAPE and
    INDEX); `ncalls` calls exist so far."""
    if type(entry) is not dict:
        raise _bad(f"a tool call is {_kind(entry)}, not an object", payload)
    index = entry.get("index", _ABSENT)
    if index is _ABSENT:
        raise _bad('a tool call has no "index"', payload)
    # The index comes from the server: never trusted as a list index (docs/assembler.md,
    # rule INDEX).
    if type(index) is not int:
        raise _bad(f'tool call "index" is {_kind(index)}, not an integer', payload)
    if index < 0:
        raise _bad(f'tool call "index" {index} is negative', payload)
    if index > ncalls:
        raise _bad(f'tool call "index" {index} skips ahead: only {ncalls} calls so far', payload)
    call_id = entry.get("id")
    if call_id is not None and type(call_id) is not str:
        raise _bad(f'tool call "id" is {_kind(call_id)}, not a string', payload)
    name = None
    arguments = ""
    function = entry.get("function")
    if function is not None:
        if type(function) is not dict:
            raise _bad(f'tool call "function" is {_kind(function)}, not an object', payload)
        name = function.get("name")
        if name is not None and type(name) is not str:
            raise _bad(f'tool call "name" is {_kind(name)}, not a string', payload)
        args = function.get("arguments")
        if args is not None:
            if type(args) is not str:
                raise _bad(f'tool call "arguments" is {_kind(args)}, not a string', payload)
            arguments = args
    return ToolCallDelta(index, call_id, name, arguments)
