"""One error root: every error llamafast raises is a LlamafastError, and the client's timeouts
are also TimeoutErrors. Each error says one sentence, keeps what it carries, and survives a
pickle round trip (errors cross process boundaries in worker pools and loggers)."""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil
import ssl
from types import ModuleType
from typing import Any

import pytest

import llamafast
import llamafast._errors
import llamafast.pure
from llamafast import (
    BusyError,
    CancelledReadError,
    ConnectError,
    ContextOverflowError,
    HttpError,
    InferError,
    LineTooLongError,
    LlamafastError,
    LoadTimeoutError,
    NotUtf8Error,
    ProtocolError,
    SseError,
    SseIoError,
    SseTimeoutError,
    StalledError,
    StreamClosedEarlyError,
    ThinkingOverrunError,
    TruncatedError,
    WaitTimeoutError,
)
from llamafast._errors import HandshakeClosed, HandshakeTimeout, server_message

SSE_ERRORS = [
    SseIoError,
    SseTimeoutError,
    TruncatedError,
    CancelledReadError,
    LineTooLongError,
    NotUtf8Error,
]
INFER_ERRORS = [
    BusyError,
    ConnectError,
    WaitTimeoutError,
    LoadTimeoutError,
    StalledError,
    StreamClosedEarlyError,
    ThinkingOverrunError,
    HttpError,
    ContextOverflowError,
    ProtocolError,
]
CLIENT_TIMEOUTS = [WaitTimeoutError, LoadTimeoutError, StalledError]

# llama-server's answer to a prompt longer than the context (its exact bytes).
OVERFLOW = (
    '{"error":{"code":400,"message":"request (1218 tokens) exceeds the available context size '
    '(256 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":1218,'
    '"n_ctx":256}}'
)

# One instance of each, with what it carries, and the exact sentence it says.
OSERR = ConnectionRefusedError(111, "Connection refused")
NOT_TLS = ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1006)")
NOT_TLS.reason = "WRONG_VERSION_NUMBER"  # as OpenSSL sets it
NOT_FOUND = '{"error":{"code":404,"message":"File Not Found","type":"not_found_error"}}'
# What python -m http.server answers a POST: its error page, the title on a line of its own.
HTML_PAGE = (
    '<!DOCTYPE HTML>\n<html lang="en">\n    <head>\n        <meta charset="utf-8">\n'
    "        <title>\n  Error response\n</title>\n    </head>\n    <body>\n"
    + "        <p>Message: Unsupported method ('POST').</p>\n" * 40
    + "    </body>\n</html>\n"
)
EXAMPLES: list[tuple[LlamafastError, str]] = [
    (SseIoError(OSERR), f"reading the event stream failed: {OSERR!r}"),
    (SseTimeoutError(), "reading the event stream timed out"),
    (TruncatedError(b"data: {"), "the event stream ended inside a line: b'data: {'"),
    (TruncatedError(), "the event stream ended inside a line"),
    (
        CancelledReadError(),
        "the byte source ended right after a read of it was cancelled, so the rest of the "
        "event stream may be lost",
    ),
    (LineTooLongError(64), "an event-stream line is longer than max_line=64 bytes"),
    (NotUtf8Error(b"\xff"), "an event-stream line is not valid UTF-8: b'\\xff'"),
    (BusyError(2), "slot 2 is busy on the server and wait_for_slot is off"),
    (BusyError(), "the requested slot is busy on the server and wait_for_slot is off"),
    (
        ConnectError(OSERR, "http://127.0.0.1:9"),
        f"could not connect to the server http://127.0.0.1:9: {OSERR!r}",
    ),
    (
        ConnectError(NOT_TLS, "https://127.0.0.1:8080/p"),
        f"could not connect to the server https://127.0.0.1:8080/p: {NOT_TLS!r}; the port does "
        "not speak TLS (it answered with bytes that are not TLS): if the server is plain HTTP, "
        "use http://127.0.0.1:8080/p",
    ),
    (
        ConnectError(HandshakeTimeout("the TLS handshake did not finish"), "https://h:9"),
        "could not connect to the server https://h:9: HandshakeTimeout('the TLS handshake did "
        "not finish'); the port does not seem to speak TLS (or the server is very slow): if the "
        "server is plain HTTP, use http://h:9",
    ),
    (
        ConnectError(HandshakeClosed("closed"), "https://h:9"),
        "could not connect to the server https://h:9: HandshakeClosed('closed'); the port does "
        "not seem to speak TLS: if the server is plain HTTP, use http://h:9",
    ),
    (
        WaitTimeoutError(1.5),
        "gave up waiting for the slot and the answer's first byte after 1.5 s; to wait longer, "
        "raise wait_timeout (Limits.wait_timeout, or wait_timeout in [limits])",
    ),
    (
        WaitTimeoutError(),
        "gave up waiting for the slot and the answer's first byte; to wait longer, raise "
        "wait_timeout (Limits.wait_timeout, or wait_timeout in [limits])",
    ),
    (
        LoadTimeoutError(30.0),
        "gave up waiting for the server to load its model after 30 s; to wait longer, raise "
        "load_timeout (Limits.load_timeout, or load_timeout in [limits])",
    ),
    (
        StalledError(2.0),
        "the stream stalled: no byte arrived for 2 s; to wait longer, raise stall_timeout "
        "(Limits.stall_timeout, or stall_timeout in [limits])",
    ),
    (
        StalledError(),
        "the stream stalled: no byte arrived; to wait longer, raise stall_timeout "
        "(Limits.stall_timeout, or stall_timeout in [limits])",
    ),
    (
        StalledError(2.0, "the answer to GET /props did not finish within 2 s", "connect_timeout"),
        "the server's answer stalled: the answer to GET /props did not finish within 2 s; to "
        "wait longer, raise connect_timeout (Limits.connect_timeout, or connect_timeout in "
        "[limits])",
    ),
    (StreamClosedEarlyError(), "the stream ended before the server sent a finish reason"),
    (
        StreamClosedEarlyError("cut"),
        "the stream ended before the server sent a finish reason (cut)",
    ),
    (
        ThinkingOverrunError(900, 800),
        "the model was still reasoning after 900 tokens, past thinking_hard_cap=800; "
        "the stream was closed",
    ),
    (
        HttpError(503, '{"error":{"code":503,"message":"Loading model","type":"x"}}'),
        "the server answered 503: Loading model",
    ),
    (
        HttpError(404, NOT_FOUND, "POST /v1/chat/completions", "http://127.0.0.1:8080"),
        "the server answered 404 to POST /v1/chat/completions: File Not Found",
    ),
    (
        HttpError(
            404,
            NOT_FOUND,
            "POST /v1/chat/completions/v1/chat/completions",
            "http://user:***@h:8080/v1/chat/completions?k=v",
        ),
        "the server answered 404 to POST /v1/chat/completions/v1/chat/completions: File Not "
        "Found; the URL's path repeats an API path: url should be the server's root, such as "
        "http://user:***@h:8080 (it is http://user:***@h:8080/v1/chat/completions?k=v)",
    ),
    (
        HttpError(501, HTML_PAGE, "POST /v1/chat/completions", "http://127.0.0.1:8000"),
        "the server answered 501 to POST /v1/chat/completions: an HTML page ('Error "
        "response'); no llama-server answers an HTML page: url should be a llama-server's "
        "root, such as http://127.0.0.1:8080 (it is http://127.0.0.1:8000)",
    ),
    (
        HttpError(502, "<html>bad gateway</html>"),
        "the server answered 502: an HTML page; no llama-server answers an HTML page: url "
        "should be a llama-server's root, such as http://127.0.0.1:8080",
    ),
    (
        HttpError(502, "<b>bad gateway</b>"),
        "the server answered 502: '<b>bad gateway</b>'",
    ),
    (
        ContextOverflowError(400, OVERFLOW),
        "the server answered 400: request (1218 tokens) exceeds the available context size "
        "(256 tokens), try increasing it",
    ),
    (
        ContextOverflowError(400, '{"error":{"message":"too long","type":"x"}}'),
        "the server answered 400: too long",
    ),
    (ProtocolError("the chunk has no \"choices\": '{}'"), "the chunk has no \"choices\": '{}'"),
]


def comparable(value: Any) -> Any:
    """Exceptions compare by identity: compare their class and args instead."""
    if isinstance(value, BaseException):
        return (type(value), comparable(value.args))
    if isinstance(value, tuple):
        return tuple(comparable(v) for v in value)
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items()}
    return value


def every_error_class() -> list[type[BaseException]]:
    return [
        obj
        for _, obj in inspect.getmembers(llamafast, inspect.isclass)
        if issubclass(obj, BaseException)
    ]


def test_every_exported_error_has_the_one_root() -> None:
    classes = every_error_class()
    assert set(classes) == {LlamafastError, SseError, InferError, *SSE_ERRORS, *INFER_ERRORS}
    for cls in classes:
        assert issubclass(cls, LlamafastError), cls


def test_the_two_families_and_their_members() -> None:
    assert LlamafastError.__bases__ == (Exception,)
    assert SseError.__bases__ == (LlamafastError,)
    assert InferError.__bases__ == (LlamafastError,)
    for cls in SSE_ERRORS:
        assert issubclass(cls, SseError) and not issubclass(cls, InferError), cls
    for cls in INFER_ERRORS:
        assert issubclass(cls, InferError) and not issubclass(cls, SseError), cls


@pytest.mark.parametrize("cls", CLIENT_TIMEOUTS)
def test_client_timeouts_are_timeout_errors(cls: type[InferError]) -> None:
    assert issubclass(cls, TimeoutError) and issubclass(cls, InferError)
    with pytest.raises(TimeoutError):
        raise cls(1.0)
    try:  # the builtin catches it, and so does the root
        raise cls()
    except TimeoutError as err:
        assert isinstance(err, LlamafastError)
        assert isinstance(err, OSError)  # TimeoutError is an OSError: its errno stays None
        assert err.errno is None


def test_only_the_timeouts_are_timeout_errors() -> None:
    timeouts = {cls for cls in every_error_class() if issubclass(cls, TimeoutError)}
    assert timeouts == {*CLIENT_TIMEOUTS, SseTimeoutError}


@pytest.mark.parametrize(
    ("error", "sentence"), EXAMPLES, ids=[type(e).__name__ for e, _ in EXAMPLES]
)
def test_str_is_one_sentence(error: LlamafastError, sentence: str) -> None:
    assert str(error) == sentence
    assert "\n" not in str(error)


@pytest.mark.parametrize(
    ("error", "sentence"), EXAMPLES, ids=[type(e).__name__ for e, _ in EXAMPLES]
)
def test_pickling_keeps_class_args_attributes_and_message(
    error: LlamafastError, sentence: str
) -> None:
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error)
    assert comparable(again.args) == comparable(error.args)
    assert str(again) == sentence
    carried = {k: v for k, v in vars(error).items() if not k.startswith("_")}
    assert comparable({k: getattr(again, k) for k in carried}) == comparable(carried)


@pytest.mark.parametrize("error", [SseIoError(OSERR), ConnectError(OSERR, "u")])
def test_an_oserror_carrier_keeps_its_cause_through_pickle(error: Any) -> None:
    assert error.__cause__ is error.error
    again = pickle.loads(pickle.dumps(error))
    assert again.error.args == OSERR.args and type(again.error) is type(OSERR)
    assert again.__cause__ is again.error


def test_catching_the_root_catches_what_the_library_raises(
    impl: Any,
) -> None:
    """Both twins' real errors, from the reader and from the assembler, under one except."""
    with pytest.raises(LlamafastError):
        impl.Assembler().push("{}")
    with pytest.raises(LlamafastError):
        impl.Assembler().finish()
    decoder = impl.SseDecoder(4)
    with pytest.raises(LlamafastError):
        decoder.feed(b"data: too long\n")
        decoder.close()


def test_a_cancelled_read_is_a_truncation_exported_from_both_namespaces() -> None:
    # A body cut by a cancelled read is a body cut short: `except TruncatedError` catches it.
    assert CancelledReadError.__bases__ == (TruncatedError,)
    assert llamafast.pure.CancelledReadError is CancelledReadError
    assert "CancelledReadError" in llamafast.__all__


def _library_modules() -> list[ModuleType]:
    """Every module of the library that imports here (the Cython ones when they are built); not
    the command line's (`_cli`, `__main__`), whose errors are its exit statuses."""
    found = []
    for info in pkgutil.walk_packages(llamafast.__path__, "llamafast."):
        if info.name == "llamafast.__main__" or info.name.partition(".")[2].split(".")[0] == "_cli":
            continue
        try:
            found.append(importlib.import_module(info.name))
        except ImportError:  # a Cython module that is not built
            continue
    return found


def test_every_exception_class_lives_in_errors() -> None:
    # One module holds every exception class of the library, the internal ones included.
    defined = {
        f"{obj.__module__}.{obj.__qualname__}"
        for module in _library_modules()
        for obj in vars(module).values()
        if isinstance(obj, type)
        and issubclass(obj, BaseException)
        and obj.__module__.startswith("llamafast")
    }
    assert {name.rpartition(".")[0] for name in defined} == {"llamafast._errors"}, defined
    assert "llamafast._errors.HttpParseError" in defined


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("llamafast._engine._sse_py", "CancelledReadError"),
        ("llamafast._engine._http_py", "HttpParseError"),
        ("llamafast._partial_json", "JsonFault"),
        ("llamafast._engine._sse_py", "busy_error"),
        ("llamafast._engine._sse_py", "uninitialised_error"),
        ("llamafast._engine._assemble_py", "busy_error"),
    ],
)
def test_the_old_import_locations_still_work(module: str, name: str) -> None:
    old = getattr(importlib.import_module(module), name)
    new = "assembler_busy_error" if module.endswith("_assemble_py") else name
    assert old is getattr(llamafast._errors, new)


def test_the_internal_errors_keep_their_parents() -> None:
    # Caught inside the package and turned into a LlamafastError: not one themselves.
    from llamafast._errors import HttpParseError, JsonFault

    assert HttpParseError.__bases__ == (ValueError,)
    assert JsonFault.__bases__ == (ValueError,)
    assert HandshakeTimeout.__bases__ == (TimeoutError,)
    assert HandshakeClosed.__bases__ == (ConnectionError,)


def test_context_overflow_carries_the_counts_as_sent() -> None:
    err = ContextOverflowError(400, OVERFLOW)
    assert isinstance(err, HttpError)
    assert (err.status, err.n_prompt_tokens, err.n_ctx) == (400, 1218, 256)
    assert err.message is not None and err.message.startswith("request (1218 tokens)")
    # an older server sends no counts; a count that is not an integer is not one
    older = '{"error":{"code":400,"message":"too long","type":"exceed_context_size_error"}}'
    assert (
        ContextOverflowError(400, older).n_prompt_tokens,
        ContextOverflowError(400, older).n_ctx,
    ) == (None, None)
    odd = OVERFLOW.replace('"n_ctx":256', '"n_ctx":"256"')
    assert ContextOverflowError(400, odd).n_ctx is None


def test_http_error_picks_the_overflow_by_its_type() -> None:
    from llamafast._errors import http_error

    assert type(http_error(400, OVERFLOW)) is ContextOverflowError
    other = OVERFLOW.replace("exceed_context_size_error", "invalid_request_error")
    assert type(http_error(400, other)) is HttpError
    assert type(http_error(400, "not json")) is HttpError


def _nested_beside_error(depth: int) -> str:
    return '{"error":{"message":"m"},"x":' + "[" * depth + "]" * depth + "}"


def _at_stack_depth(frames: int, fn: Any) -> Any:
    """fn() called `frames` Python frames deeper than here."""
    return fn() if frames == 0 else _at_stack_depth(frames - 1, fn)


@pytest.mark.parametrize("depth", [300, 5_000, 100_000])
def test_an_error_body_nested_past_the_bound_has_no_message_at_any_stack_depth(
    depth: int,
) -> None:
    # STRICT-JSON for every whole answer, error bodies too: json.loads read the message of a
    # body nested 300 deep, and raised RecursionError (no message) from about 1,000, or less
    # on a deeper stack; the verdict is now the same wherever it is asked
    body = _nested_beside_error(depth)
    assert server_message(body) is None
    assert _at_stack_depth(800, lambda: server_message(body)) is None
    assert server_message(_nested_beside_error(250)) == "m"
    assert _at_stack_depth(800, lambda: server_message(_nested_beside_error(250))) == "m"
