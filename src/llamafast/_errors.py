"""Every error llamafast raises, defined once so both twins raise the same classes.

Each class keeps its constructor arguments in `args` (so it pickles and compares in tests) and
builds its one-sentence message from them in `__str__`; a value shown in a message is cut to
`SHOW` characters so a 1 MiB payload never ends up in a log line.

Every exception class of the package lives here, the internal ones too (`HttpParseError`,
`HandshakeTimeout`, `HandshakeClosed`, `JsonFault`: each is caught and turned into a
`LlamafastError` before a user sees it), and so do the misuse errors both twins raise
(`busy_error`, `assembler_busy_error`, `uninitialised_error`: a `RuntimeError`, the caller's
bug, not the stream's).
"""

from __future__ import annotations

import re
import ssl
import urllib.parse

from ._strict_json import parse_answer

__all__ = [
    "BusyError",
    "CancelledReadError",
    "ConnectError",
    "ContextOverflowError",
    "HandshakeClosed",
    "HandshakeTimeout",
    "HttpError",
    "HttpParseError",
    "InferError",
    "JsonFault",
    "LineTooLongError",
    "LlamafastError",
    "LoadTimeoutError",
    "NotUtf8Error",
    "ProtocolError",
    "Resume",
    "SseError",
    "SseIoError",
    "SseTimeoutError",
    "StalledError",
    "StreamClosedEarlyError",
    "ThinkingOverrunError",
    "TruncatedError",
    "WaitTimeoutError",
    "assembler_busy_error",
    "busy_error",
    "cut",
    "embedding_error",
    "http_error",
    "shown_body",
    "uninitialised_error",
]

SHOW = 200


def cut(value: object, limit: int = SHOW) -> str:
    """`value` as a short printable excerpt: its repr, cut to about `limit` characters."""
    text = repr(value)
    if len(text) <= limit:
        return text
    if isinstance(value, (str, bytes)):
        unit = "bytes" if isinstance(value, bytes) else "chars"
        return f"{text[:limit]}... ({len(value)} {unit})"
    return f"{text[:limit]}..."


class LlamafastError(Exception):
    """The root of every error llamafast raises: `except LlamafastError` catches them all."""


# --- the SSE reader's errors (docs/sse.md, rules MAX-LINE, UTF8, END and READ-ERRORS) -------


class SseError(LlamafastError):
    """The streamed body could not be read as server-sent events."""


class SseIoError(SseError):
    """The reader raised an `OSError`; it is `.error` and also `__cause__`."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error)
        self.error = error
        self.__cause__ = error

    def __str__(self) -> str:
        return f"reading the event stream failed: {self.error!r}"


class SseTimeoutError(SseError, TimeoutError):
    """The reader timed out waiting for bytes."""

    def __str__(self) -> str:
        return "reading the event stream timed out"


class TruncatedError(SseError):
    """The stream ended inside a line: the body was cut."""

    def __init__(self, partial: bytes = b"") -> None:
        super().__init__(partial)
        self.partial = partial

    def __str__(self) -> str:
        if self.partial:
            return f"the event stream ended inside a line: {cut(self.partial, 80)}"
        return "the event stream ended inside a line"


class CancelledReadError(TruncatedError):
    """An async source ended right after a read of it was cancelled. Async generators (httpx's
    aiter_bytes among them) end for good when a read is cancelled, so that end cannot be taken
    for the end of the body: what the source still had may be lost."""

    def __str__(self) -> str:
        return (
            "the byte source ended right after a read of it was cancelled, so the rest of the "
            "event stream may be lost"
        )


class LineTooLongError(SseError):
    """A line is longer than `max_line` bytes (`.limit`)."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.limit = limit

    def __str__(self) -> str:
        return f"an event-stream line is longer than max_line={self.limit} bytes"


class NotUtf8Error(SseError):
    """A line is not valid UTF-8."""

    def __init__(self, line: bytes = b"") -> None:
        super().__init__(line)
        self.line = line

    def __str__(self) -> str:
        return f"an event-stream line is not valid UTF-8: {cut(self.line, 80)}"


# --- the client's and the assembler's errors (docs/client.md, rule STREAM-ERRORS) ----------


class InferError(LlamafastError):
    """A chat completion did not produce a `Completion`."""


class BusyError(InferError):
    """The requested slot is busy and the client was told not to wait for it."""

    def __init__(self, slot: int | None = None) -> None:
        super().__init__(slot)
        self.slot = slot

    def __str__(self) -> str:
        which = "the requested slot" if self.slot is None else f"slot {self.slot}"
        return f"{which} is busy on the server and wait_for_slot is off"


class ConnectError(InferError):
    """The server could not be reached; the `OSError` is `.error` and also `__cause__`."""

    def __init__(self, error: OSError, url: str = "") -> None:
        super().__init__(error, url)
        self.error = error
        self.url = url
        self.__cause__ = error

    def __str__(self) -> str:
        where = f" {self.url}" if self.url else ""
        return f"could not connect to the server{where}: {self.error!r}{_not_tls(self)}"


# The reasons OpenSSL gives when the other end answered the ClientHello with bytes that are not
# TLS (a plain-HTTP server's "HTTP/1.1 400 Bad Request").
_NOT_TLS_REASONS = frozenset(
    {"WRONG_VERSION_NUMBER", "PACKET_LENGTH_TOO_LONG", "RECORD_LAYER_FAILURE"}
)


def _not_tls(err: ConnectError) -> str:
    """What to do when the TLS handshake failed the way a port that does not speak TLS fails it
    (docs/client.md, rule ONCE): a plain-HTTP port answers bytes that are not TLS, says nothing
    until the handshake's deadline, or closes the connection; try http://."""
    error = err.error
    if isinstance(error, ssl.SSLError) and error.reason in _NOT_TLS_REASONS:
        why = "the port does not speak TLS (it answered with bytes that are not TLS)"
    elif isinstance(error, HandshakeTimeout):
        why = "the port does not seem to speak TLS (or the server is very slow)"
    elif isinstance(error, HandshakeClosed):
        why = "the port does not seem to speak TLS"
    else:
        return ""
    plain = "http://" + err.url.removeprefix("https://") if err.url else "an http:// URL"
    return f"; {why}: if the server is plain HTTP, use {plain}"


class _TimedOut(InferError, TimeoutError):
    """Also a `TimeoutError`, so code that catches the builtin for every timeout sees these. Each
    names the `Limits` field that bounded the wait (`limit`), so the message says what to raise
    (docs/client.md, rule DEADLINES)."""

    what = "waiting"
    limit = "wait_timeout"

    def __init__(self, seconds: float | None = None) -> None:
        super().__init__(seconds)
        self.seconds = seconds

    def __str__(self) -> str:
        after = "" if self.seconds is None else f" after {self.seconds:g} s"
        return f"gave up {self.what}{after}{_raise_hint(self.limit)}"


def _raise_hint(limit: str) -> str:
    """The end of a timeout's message: the limit that ran out, and where it is set."""
    return f"; to wait longer, raise {limit} (Limits.{limit}, or {limit} in [limits])"


class WaitTimeoutError(_TimedOut):
    """The request waited longer than `wait_timeout` for its turn, its slot or its answer's
    first byte."""

    what = "waiting for the slot and the answer's first byte"


class LoadTimeoutError(_TimedOut):
    """The server was still loading its model after `load_timeout`."""

    what = "waiting for the server to load its model"
    limit = "load_timeout"


class StalledError(_TimedOut):
    """No byte arrived for `stall_timeout` seconds in the middle of a stream; or an answer that
    was not whole within its bound (`detail` says which, `limit` names the bound's field)."""

    what = "on a stalled stream: no byte arrived"
    limit = "stall_timeout"

    def __init__(
        self, seconds: float | None = None, detail: str = "", limit: str = "stall_timeout"
    ) -> None:
        super().__init__(seconds)
        self.detail = detail
        self.limit = limit
        if limit != "stall_timeout":
            self.args = (seconds, detail, limit)
        elif detail:
            self.args = (seconds, detail)

    def __str__(self) -> str:
        if self.detail:  # an answer that drips bytes: it stalls although bytes arrive
            return f"the server's answer stalled: {self.detail}{_raise_hint(self.limit)}"
        after = "" if self.seconds is None else f" for {self.seconds:g} s"
        return f"the stream stalled: no byte arrived{after}{_raise_hint(self.limit)}"


class StreamClosedEarlyError(InferError):
    """The stream ended before the server sent a finish reason."""

    def __init__(self, detail: str = "") -> None:
        super().__init__(detail)
        self.detail = detail

    def __str__(self) -> str:
        base = "the stream ended before the server sent a finish reason"
        return f"{base} ({self.detail})" if self.detail else base


class ThinkingOverrunError(InferError):
    """The model went on reasoning past `thinking_hard_cap` after it was told to stop."""

    def __init__(self, tokens: int = 0, hard_cap: int = 0) -> None:
        super().__init__(tokens, hard_cap)
        self.tokens = tokens
        self.hard_cap = hard_cap

    def __str__(self) -> str:
        return (
            f"the model was still reasoning after {self.tokens} tokens, past "
            f"thinking_hard_cap={self.hard_cap}; the stream was closed"
        )


class HttpError(InferError):
    """The server answered with an error: a non-200 status, or an error payload mid-stream.

    `body` is the server's text; `message` is its `error.message` when the body carries one.
    `request` is the request it answered (`"POST /v1/chat/completions"`, "" when unknown) and
    `url` the client's `infer.url` (its password as ***): with them the message says what was
    asked, and when the answer says `url` is not the server's root, says so (rule HTTP-ERRORS).
    """

    def __init__(self, status: int, body: str, request: str = "", url: str = "") -> None:
        super().__init__(status, body, *((request, url) if request or url else ()))
        self.status = status
        self.body = body
        self.request = request
        self.url = url
        self.message = server_message(body)

    def __str__(self) -> str:
        said = self.message if self.message is not None else shown_body(self.body)
        asked = f" to {self.request}" if self.request else ""
        return f"the server answered {self.status}{asked}: {said}{_root_hint(self)}"


def _html_title(body: str) -> str | None:
    """The title of `body` when it is an HTML page (a web server's or a proxy's error page, not
    llama-server's answer), "" for a page without one; None when it is not HTML."""
    head = body[:1024].lstrip().lower()
    if not head.startswith(("<!doctype html", "<html", "<head", "<title")):
        return None
    found = re.search(r"<title[^>]*>(.*?)</title", body[: 1 << 16], re.IGNORECASE | re.DOTALL)
    return " ".join(found.group(1).split()) if found else ""


def shown_body(body: str) -> str:
    """An error answer's body as a message shows it: an HTML page only by its title (a page is
    no sentence), any other body cut to SHOW characters."""
    title = _html_title(body)
    if title is None:
        return cut(body)
    return f"an HTML page ({cut(title, 80)})" if title else "an HTML page"


# The paths of llama-server's API: a `url` whose path holds one of them is not the server's root,
# and every request then goes to a path that repeats it ("/v1/chat/completions/v1/chat/...").
_API_PATHS = re.compile(
    r"/(v1|chat|completions?|embeddings?|rerank(ing)?|slots|health|props|models|tokenize|infill)"
    r"(/|$)"
)


def _root_hint(err: HttpError) -> str:
    """Where the answer says `url` is not a llama-server's root: an HTML page (no llama-server
    answers one), or a 404 to a URL whose path holds an API path; "" otherwise."""
    parts = urllib.parse.urlsplit(err.url)
    html = _html_title(err.body) is not None
    if not html and not (err.status == 404 and _API_PATHS.search(parts.path)):
        return ""
    root = f"{parts.scheme}://{parts.netloc}" if parts.path else "http://127.0.0.1:8080"
    if html:
        why, should = "no llama-server answers an HTML page", "a llama-server's root"
    else:
        why, should = "the URL's path repeats an API path", "the server's root"
    given = f" (it is {err.url})" if err.url else ""
    return f"; {why}: url should be {should}, such as {root}{given}"


class ContextOverflowError(HttpError):
    """The server refused the request because its prompt does not fit the context (llama-server's
    error `type` "exceed_context_size_error"). `n_prompt_tokens` and `n_ctx` are the counts the
    server sent, None where it sent none. Never retried: the same prompt overflows again."""

    def __init__(self, status: int, body: str, request: str = "", url: str = "") -> None:
        super().__init__(status, body, request, url)
        error = _server_error(body) or {}
        self.n_prompt_tokens = _count(error.get("n_prompt_tokens"))
        self.n_ctx = _count(error.get("n_ctx"))


def _count(value: object) -> int | None:
    return value if type(value) is int else None


def http_error(status: int, body: str, request: str = "", url: str = "") -> HttpError:
    """The HttpError for a server's error answer to `request` (HttpError's arguments): a
    ContextOverflowError when its error `type` says the prompt exceeds the context."""
    error = _server_error(body)
    if error is not None and error.get("type") == "exceed_context_size_error":
        return ContextOverflowError(status, body, request, url)
    return HttpError(status, body, request, url)


class ProtocolError(InferError):
    """The server sent something that is not a chat-completion stream."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


def _server_error(body: str) -> dict[str, object] | None:
    """The `error` object of a llama-server error body, or None when it has none. The body is
    read as every whole answer is (STRICT-JSON): the verdict never depends on the stack."""
    try:
        parsed = parse_answer(body)
    except ValueError:
        return None
    if isinstance(parsed, dict):
        error = parsed.get("error")
        if isinstance(error, dict):
            return error
    return None


def server_message(body: str) -> str | None:
    """The `error.message` of a llama-server error body, or None when it has none."""
    error = _server_error(body)
    if error is not None and isinstance(error.get("message"), str):
        return str(error["message"])
    return None


# --- internal: caught and turned into a LlamafastError before a user sees them ---------------


class HttpParseError(ValueError):
    """What the server sent is not an HTTP/1.1 response (the message says where)."""


class HandshakeTimeout(TimeoutError):
    """Raised by a client's transport: the TLS handshake did not finish in time (TLS spoken
    to a port that does not speak it waits forever). Never retried; the client raises it as
    the `.error` of a `ConnectError`."""


class HandshakeClosed(ConnectionError):
    """Raised by a client's transport: the server closed the connection inside the TLS
    handshake (a plain-HTTP server does, once its wait for a request head ends). Never
    retried, as HandshakeTimeout; the `.error` of a `ConnectError`."""


class JsonFault(ValueError):
    """The text is not JSON (or not JSON the assembler accepts): `reason` at `position`."""

    def __init__(self, reason: str, position: int) -> None:
        super().__init__(f"{reason} at position {position}")
        self.reason = reason
        self.position = position


class Resume(Exception):
    """Raised by the chat exchange's `next_events` to its driver, never to a user: the
    connection broke and the stream may be resumed (docs/client.md, rule RESUME); the driver
    carries out `resume()`, then attaches the new connection to the Sink."""


# --- misuse: the caller's bug, a RuntimeError that both twins raise word for word ----------


def busy_error(obj: object, method: str) -> RuntimeError:
    """The error for a second call into a reader or stream while one is running."""
    name = type(obj).__name__
    return RuntimeError(
        f"{name}.{method}() was called while this {name} is still running (from another "
        f"thread, or from code it called back: its reader, a finalizer); use one {name} per "
        "consumer"
    )


def assembler_busy_error(asm: object, method: str) -> RuntimeError:
    """The error for a second call into an assembler while a push or finish is running."""
    name = type(asm).__name__
    return RuntimeError(
        f"{name}.{method}() was called while this {name} is still running a push or finish "
        "(from another thread, or from code it called back, such as a finalizer); "
        f"use one {name} per consumer"
    )


def uninitialised_error(obj: object) -> RuntimeError:
    """The error for using an object whose __init__ never ran."""
    name = type(obj).__name__
    return RuntimeError(
        f"this {name} was never initialised: {name}.__init__ did not run (a subclass's "
        "__init__ must call super().__init__())"
    )


# The faults of an embeddings answer, as codes, so both twins of the decoder (_vectors_py.py,
# _vectors_c.pyx) raise the same ProtocolError with the same words. `item` is the number of the
# caller's text the faulty vector stands for (its place among the texts of the whole call).
E_NOT_JSON = 1
E_NOT_LIST = 2
E_MISSING = 3
E_EXTRA = 4
E_NO_EMBEDDING = 5
E_NOT_NUMBER = 6
E_BASE64 = 7
E_PARTIAL = 8
E_EMPTY = 9
E_LENGTH = 10
E_NOT_FINITE = 11
E_BAD_INDEX = 12
E_REPEATED = 13


def embedding_error(code: int, item: int, got: int, want: int, body: bytes) -> ProtocolError:
    """The ProtocolError for fault `code` of an embeddings answer (`body`, shown only when the
    fault is its shape)."""
    if code == E_NOT_JSON:
        text = f"the embeddings answer is not valid JSON: {cut(body)}"
    elif code == E_NOT_LIST:
        text = f"the embeddings answer has no `data` list of objects: {cut(body)}"
    elif code == E_MISSING:
        text = f"the embeddings answer has no vector for text {item}"
    elif code == E_EXTRA:
        text = f"the embeddings answer has more vectors than its {want} texts (a vector {item})"
    elif code == E_NO_EMBEDDING:
        text = f"the vector for text {item} is neither a base64 string nor a list of numbers"
    elif code == E_NOT_NUMBER:
        text = f"the vector for text {item} holds a value that is not a number (at {got})"
    elif code == E_BASE64:
        text = f"the vector for text {item} is not valid base64"
    elif code == E_PARTIAL:
        text = f"the vector for text {item} has {got} bytes, not a whole number of float32"
    elif code == E_EMPTY:
        text = f"the vector for text {item} is empty"
    elif code == E_LENGTH:
        text = f"the vector for text {item} has {got} values, not {want} like the others"
    elif code == E_NOT_FINITE:
        text = f"the vector for text {item} holds a value that is not finite (at {got})"
    elif code == E_BAD_INDEX:
        text = (
            f"the vector for text {item} has an index that is not one of its request's "
            f"{want} texts (0 to {want - 1})"
        )
    elif code == E_REPEATED:
        text = f"the vector for text {item} repeats index {got} of its request"
    else:  # pragma: no cover - a code this module does not define
        raise AssertionError(f"unknown embeddings fault {code}")
    return ProtocolError(text)
