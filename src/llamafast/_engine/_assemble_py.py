"""The assembler, pure twin: the rules of docs/assembler.md.

Each payload is parsed by the stdlib's C JSON scanner, made as strict as simdjson by cheap byte
searches that send only suspicious payloads down slow exact checks; then only the fields the rules
need are read. A push is all or nothing: the chunk is checked whole, then folded into the state.
"""

from __future__ import annotations

import _thread
from typing import Any, Final, Self

from .._errors import (
    ProtocolError,
    StreamClosedEarlyError,
    assembler_busy_error,
    cut,
    http_error,
)
from .._limits import COUNT_MAX, MAX_DEPTH  # noqa: F401 (read from here by the tests)
from .._partial_json import partial_arguments
from .._strict_json import parse as _parse
from .._values import (
    ChatEvent,
    Completion,
    Content,
    FinishReason,
    Progress,
    Reasoning,
    Timings,
    TokenLogprob,
    ToolCall,
    ToolCallDelta,
    Usage,
)

__all__ = ["Assembler"]

_INT_MAX: Final = COUNT_MAX  # a count's upper bound (docs/assembler.md, rule COUNTS)

_FINISH: Final = {  # the only finish reasons (docs/assembler.md, rule SHAPE)
    "stop": FinishReason.STOP,
    "tool_calls": FinishReason.TOOL_CALLS,
    "length": FinishReason.LENGTH,
}

_ABSENT: Final[Any] = object()  # a key that is not there (null is a value)


# --- messages -------------------------------------------------------------------------------


busy_error = assembler_busy_error  # its old name here


def _bad(what: str, payload: str | bytes) -> ProtocolError:
    """Every ProtocolError says what was wrong and shows a cut of the payload
    (docs/assembler.md, rule MESSAGE)."""
    return ProtocolError(f"{what}: {cut(payload)}")


# The JSON kind of each parsed type, in the words of messages (the Cython twin's words); bool
# comes before int, of which it is a subclass.
_KINDS: Final = (
    (dict, "an object"),
    (list, "an array"),
    (str, "a string"),
    (bool, "a boolean"),
    (int, "an integer"),
    (float, "a number"),
)


def _kind(value: Any) -> str:
    """The JSON kind of a value, for messages (the same words as the Cython twin's)."""
    for kind, words in _KINDS:
        if isinstance(value, kind):
            return words
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
        "_logprobs",
        "_model",
        "_partials",
        "_reasoning",
        "_reasoning_tokens",
        "_timings",
        "_usage",
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
    _model: str | None
    _usage: Usage | None
    _logprobs: list[TokenLogprob]  # the Content events', in order

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
        self._model = None
        self._usage = None
        self._logprobs = []
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
            raise assembler_busy_error(self, "partial_arguments")
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
            raise assembler_busy_error(self, "push")
        try:
            return self._push(data)
        finally:
            self._busy.release()

    def _push(self, data: str | bytes) -> list[ChatEvent]:
        """The payload as text and as UTF-8, each from the other, parsed strictly; then _fold."""
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
        except ValueError as err:  # the strict reader's only fault, at any depth
            raise _bad(f"the chunk is not valid JSON ({err})", data) from None
        return self._fold(chunk, text, data)

    # The chunk's checks and its fold, split as the Cython twin splits them (_fold, _delta,
    # _tool_calls, _commit: the same names, in the same order, with the same responsibilities;
    # _choices is the part of the Cython _fold that walks the choices, kept inline there in
    # the hot loop), so that the twins read side by side (tests/test_twins.py checks it).
    # Nothing changes the state before _fold has checked the whole chunk: _choices, _delta and
    # _tool_calls only append events, and _commit folds them in.

    def _fold(self, chunk: Any, text: str, data: str | bytes) -> list[ChatEvent]:
        """A parsed chunk's events: its top-level fields checked, its choices read (by
        _choices), and, once all of it is valid, the state updated (_commit)."""
        if type(chunk) is not dict:  # docs/assembler.md, rule SHAPE: a JSON object
            raise _bad(f"the chunk is {_kind(chunk)}, not a JSON object", data)

        # The server failed after the stream started (docs/assembler.md, rule SERVER-ERROR).
        error = chunk.get("error")
        if type(error) is dict:
            code = error.get("code")
            raise http_error(code if type(code) is int else 500, text)

        choices = chunk.get("choices", _ABSENT)
        if type(choices) is not list:
            if choices is _ABSENT:
                raise _bad('the chunk has no "choices"', data)
            raise _bad(f'"choices" is {_kind(choices)}, not an array', data)

        # The first chunk carrying an id sets it, and likewise the model; every one must be a
        # string (docs/assembler.md, rules ID, MODEL and SHAPE).
        new_id = _first_string(chunk, "id", self._id, data)
        new_model = _first_string(chunk, "model", self._model, data)

        # The latest timings replace the previous ones; missing counts are 0, and so are missing
        # times (milliseconds, finite non-negative numbers: the rates need them). See
        # docs/assembler.md, rule TIMINGS.
        timings = chunk.get("timings", _ABSENT)
        counts = self._timings if timings is _ABSENT else _timings(timings, data)

        # The latest usage replaces the previous one; null is none (docs/assembler.md, rule USAGE).
        usage = chunk.get("usage")
        if usage is not None:
            usage = _usage(usage, data)

        # Progress first (docs/assembler.md, rule ORDER).
        events: list[ChatEvent] = []
        progress = chunk.get("prompt_progress", _ABSENT)
        if progress is not _ABSENT:
            events.append(_progress(progress, data))

        # Then per choice Reasoning, Content, one ToolCallDelta per tool_calls entry
        # (docs/assembler.md, rule ORDER).
        finish_reason = self._choices(choices, events, data)

        # The whole chunk is valid: fold it in.
        if new_id is not None:
            self._id = new_id
        if new_model is not None:
            self._model = new_model
        if usage is not None:
            self._usage = usage
        self._timings = counts
        self._finish_reason = finish_reason
        self._commit(events, counts[2])
        return events

    def _choices(
        self, choices: list[Any], events: list[ChatEvent], data: str | bytes
    ) -> FinishReason | None:
        """A chunk's choices, in order: each one's finish reason and logprobs checked, its
        delta's events appended to `events` (by _delta); returns the finish reason they leave
        (the one so far when none carries one). The Cython twin reads them inside its _fold."""
        ncalls = len(self._calls)
        finish_reason = self._finish_reason
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
            # checked whatever the delta holds; kept on its Content (docs/assembler.md,
            # rule LOGPROBS)
            logprobs = choice.get("logprobs")
            if logprobs is not None:
                logprobs = _logprobs(logprobs, data)
            delta = choice.get("delta")
            if delta is None:  # missing or null is an empty delta (docs/assembler.md, rule SHAPE)
                continue
            if type(delta) is not dict:
                raise _bad(f'"delta" is {_kind(delta)}, not an object', data)
            ncalls = self._delta(delta, events, ncalls, data, logprobs)
        return finish_reason

    def _delta(
        self,
        delta: dict[str, Any],
        events: list[ChatEvent],
        ncalls: int,
        data: str | bytes,
        logprobs: tuple[TokenLogprob, ...] | None,
    ) -> int:
        """One choice's delta: its Reasoning, Content (with the choice's `logprobs`, None when
        it has none) and tool-call pieces (by _tool_calls) appended to `events`; returns the
        number of calls there are with them."""
        piece = delta.get("reasoning_content")
        if piece is not None:
            if type(piece) is not str:
                raise _bad(f'"reasoning_content" is {_kind(piece)}, not a string', data)
            if piece:  # empty text, no event (docs/assembler.md, rule NO-EMPTY)
                events.append(Reasoning(piece))
        piece = delta.get("content")
        if piece is not None:
            if type(piece) is not str:
                raise _bad(f'"content" is {_kind(piece)}, not a string', data)
            if piece:
                events.append(Content(piece) if logprobs is None else Content(piece, logprobs))
        calls = delta.get("tool_calls")
        if calls is not None:
            if type(calls) is not list:
                raise _bad(f'"tool_calls" is {_kind(calls)}, not an array', data)
            ncalls = self._tool_calls(calls, events, ncalls, data)
        return ncalls

    def _tool_calls(
        self, calls: list[Any], events: list[ChatEvent], ncalls: int, data: str | bytes
    ) -> int:
        """A delta's tool_calls entries, one ToolCallDelta each appended to `events`
        (docs/assembler.md, rules PIECE, SHAPE and INDEX); `ncalls` calls exist before them,
        and the number after them is returned."""
        for entry in calls:
            if type(entry) is not dict:
                raise _bad(f"a tool call is {_kind(entry)}, not an object", data)
            index = entry.get("index", _ABSENT)
            if index is _ABSENT:
                raise _bad('a tool call has no "index"', data)
            # The index comes from the server: never trusted as a list index (docs/assembler.md,
            # rule INDEX).
            if type(index) is not int:
                raise _bad(f'tool call "index" is {_kind(index)}, not an integer', data)
            if index < 0:
                raise _bad(f'tool call "index" {index} is negative', data)
            if index > ncalls:
                raise _bad(
                    f'tool call "index" {index} skips ahead: only {ncalls} calls so far', data
                )
            call_id = entry.get("id")
            if call_id is not None and type(call_id) is not str:
                raise _bad(f'tool call "id" is {_kind(call_id)}, not a string', data)
            name = None
            arguments = ""
            function = entry.get("function")
            if function is not None:
                if type(function) is not dict:
                    raise _bad(f'tool call "function" is {_kind(function)}, not an object', data)
                name = function.get("name")
                if name is not None and type(name) is not str:
                    raise _bad(f'tool call "name" is {_kind(name)}, not a string', data)
                args = function.get("arguments")
                if args is not None:
                    if type(args) is not str:
                        raise _bad(f'tool call "arguments" is {_kind(args)}, not a string', data)
                    arguments = args
            events.append(ToolCallDelta(index, call_id, name, arguments))
            if index == ncalls:
                ncalls += 1
        return ncalls

    def _commit(self, events: list[Any], predicted_n: int) -> None:
        """Folds a valid chunk's events into the state: the text pieces, the tool-call pieces
        (arguments concatenated; id and name from the first piece that has them:
        docs/assembler.md, rule CALLS), whether the model is reasoning (the last piece says:
        rule IN-REASONING) and, after a reasoning piece, the reasoning tokens (the chunk's
        predicted_n, its timings taken first: rule REASONING-TOKENS)."""
        in_reasoning = self._in_reasoning
        reasoned = False
        for event in events:
            kind = type(event)
            if kind is Content:
                self._content.append(event.text)
                if event.logprobs:
                    self._logprobs.extend(event.logprobs)
                in_reasoning = False  # answer text
            elif kind is Reasoning:
                self._reasoning.append(event.text)
                in_reasoning = reasoned = True
            elif kind is ToolCallDelta:
                in_reasoning = False  # a tool-call piece
                index = event.index
                if index == len(self._calls):
                    self._calls.append([event.id, event.name, [event.arguments]])
                else:
                    call = self._calls[index]
                    if call[0] is None:
                        call[0] = event.id
                    if call[1] is None:
                        call[1] = event.name
                    call[2].append(event.arguments)
        if reasoned:
            self._reasoning_tokens = predicted_n
        self._in_reasoning = in_reasoning

    def finish(self, thinking_capped: bool = False) -> Completion:
        """The Completion (docs/assembler.md, rule FINISH): StreamClosedEarlyError without a
        finish_reason, ProtocolError without an id or with a tool call that never got an id or a
        name."""
        if not self._busy.acquire(False):  # one caller at a time, as in push
            raise assembler_busy_error(self, "finish")
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
            self._model,
            self._usage,
            tuple(self._logprobs),
        )


def _first_string(chunk: dict[str, Any], key: str, kept: str | None, payload: str | bytes) -> Any:
    """chunk[key], which must be a string when present, while `kept` is None; else None."""
    value = chunk.get(key, _ABSENT)
    if value is _ABSENT:
        return None
    if type(value) is not str:
        raise _bad(f'"{key}" is {_kind(value)}, not a string', payload)
    return value if kept is None else None


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


def _timings(timings: Any, payload: str | bytes) -> tuple[int, int, int, float, float]:
    """A chunk's "timings" (docs/assembler.md, rule TIMINGS): the counts and the milliseconds,
    each 0 when missing; the counts are integers within range, the times finite non-negative
    numbers (the rates need them)."""
    if type(timings) is not dict:
        raise _bad(f'"timings" is {_kind(timings)}, not an object', payload)
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
        _count(cache_n, "timings.cache_n", payload)
        _count(prompt_n, "timings.prompt_n", payload)
        _count(predicted_n, "timings.predicted_n", payload)
    # A non-negative float is taken as it is, here; _millis decides every other value.
    prompt_ms = timings.get("prompt_ms", 0.0)
    if type(prompt_ms) is not float or not prompt_ms >= 0.0:
        prompt_ms = _millis(prompt_ms, "timings.prompt_ms", payload)
    predicted_ms = timings.get("predicted_ms", 0.0)
    if type(predicted_ms) is not float or not predicted_ms >= 0.0:
        predicted_ms = _millis(predicted_ms, "timings.predicted_ms", payload)
    return (cache_n, prompt_n, predicted_n, prompt_ms, predicted_ms)


def _usage(usage: Any, payload: str | bytes) -> Usage:
    """usage is an object whose prompt_tokens and completion_tokens are counts, 0 when absent
    (as in timings); the cached tokens are prompt_tokens_details.cached_tokens, 0 when it or
    prompt_tokens_details is absent (the details may be null). docs/assembler.md, rule USAGE."""
    if type(usage) is not dict:
        raise _bad(f'"usage" is {_kind(usage)}, not an object', payload)
    prompt = _count(usage.get("prompt_tokens", 0), "usage.prompt_tokens", payload)
    completion = _count(usage.get("completion_tokens", 0), "usage.completion_tokens", payload)
    cached = 0
    details = usage.get("prompt_tokens_details")
    if details is not None:
        if type(details) is not dict:
            raise _bad(f'"usage.prompt_tokens_details" is {_kind(details)}, not an object', payload)
        cached = _count(
            details.get("cached_tokens", 0), "usage.prompt_tokens_details.cached_tokens", payload
        )
    return Usage(prompt, completion, cached)


def _logprobs(logprobs: Any, payload: str | bytes) -> tuple[TokenLogprob, ...] | None:
    """A choice's logprobs: an object whose content is null (None: no logprobs) or an array of
    {token, logprob, top_logprobs: null or [{token, logprob}]} (docs/assembler.md, rule
    LOGPROBS; other fields, such as id and bytes, are ignored)."""
    if type(logprobs) is not dict:
        raise _bad(f'"logprobs" is {_kind(logprobs)}, not an object', payload)
    content = logprobs.get("content")
    if content is None:
        return None
    if type(content) is not list:
        raise _bad(f'"logprobs.content" is {_kind(content)}, not an array', payload)
    out = []
    for i, entry in enumerate(content):
        where = f"logprobs.content[{i}]"
        token, logprob = _token_logprob(entry, where, payload)
        top = entry.get("top_logprobs")
        if top is None:
            out.append(TokenLogprob(token, logprob))
            continue
        if type(top) is not list:
            raise _bad(f'"{where}.top_logprobs" is {_kind(top)}, not an array', payload)
        alternatives = tuple(
            [
                _token_logprob(alt, f"{where}.top_logprobs[{j}]", payload)
                for j, alt in enumerate(top)
            ]
        )
        out.append(TokenLogprob(token, logprob, alternatives))
    return tuple(out)


def _token_logprob(entry: Any, where: str, payload: str | bytes) -> tuple[str, float]:
    """An object's token (a string) and logprob (a number, an integer taken as a float)."""
    if type(entry) is not dict:
        raise _bad(f'"{where}" is {_kind(entry)}, not an object', payload)
    token = entry.get("token", _ABSENT)
    if token is _ABSENT:
        raise _bad(f'"{where}" has no "token"', payload)
    if type(token) is not str:
        raise _bad(f'"{where}.token" is {_kind(token)}, not a string', payload)
    logprob = entry.get("logprob", _ABSENT)
    if logprob is _ABSENT:
        raise _bad(f'"{where}" has no "logprob"', payload)
    if type(logprob) is int:
        return token, float(logprob)
    if type(logprob) is not float:
        raise _bad(f'"{where}.logprob" is {_kind(logprob)}, not a number', payload)
    return token, logprob
