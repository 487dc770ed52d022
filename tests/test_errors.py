"""One error root: every error llamafast raises is a LlamafastError, and the client's timeouts
are also TimeoutErrors. Each error says one sentence, keeps what it carries, and survives a
pickle round trip (errors cross process boundaries in worker pools and loggers)."""

from __future__ import annotations

import inspect
import pickle
from typing import Any

import pytest

import llamafast
from llamafast import (
    BusyError,
    ConnectError,
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

SSE_ERRORS = [SseIoError, SseTimeoutError, TruncatedError, LineTooLongError, NotUtf8Error]
INFER_ERRORS = [
    BusyError,
    ConnectError,
    WaitTimeoutError,
    LoadTimeoutError,
    StalledError,
    StreamClosedEarlyError,
    ThinkingOverrunError,
    HttpError,
    ProtocolError,
]
CLIENT_TIMEOUTS = [WaitTimeoutError, LoadTimeoutError, StalledError]

# One instance of each, with what it carries, and the exact sentence it says.
OSERR = ConnectionRefusedError(111, "Connection refused")
EXAMPLES: list[tuple[LlamafastError, str]] = [
    (SseIoError(OSERR), f"reading the event stream failed: {OSERR!r}"),
    (SseTimeoutError(), "reading the event stream timed out"),
    (TruncatedError(b"data: {"), "the event stream ended inside a line: b'data: {'"),
    (TruncatedError(), "the event stream ended inside a line"),
    (LineTooLongError(64), "an event-stream line is longer than max_line=64 bytes"),
    (NotUtf8Error(b"\xff"), "an event-stream line is not valid UTF-8: b'\\xff'"),
    (BusyError(2), "slot 2 is busy on the server and wait_for_slot is off"),
    (BusyError(), "the requested slot is busy on the server and wait_for_slot is off"),
    (
        ConnectError(OSERR, "http://127.0.0.1:9"),
        f"could not connect to the server http://127.0.0.1:9: {OSERR!r}",
    ),
    (WaitTimeoutError(1.5), "gave up waiting for the slot after 1.5 s"),
    (WaitTimeoutError(), "gave up waiting for the slot"),
    (LoadTimeoutError(30.0), "gave up waiting for the server to load its model after 30 s"),
    (StalledError(2.0), "the stream stalled: no byte arrived for 2 s"),
    (StalledError(), "the stream stalled: no byte arrived"),
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
        HttpError(502, "<html>bad gateway</html>"),
        "the server answered 502: '<html>bad gateway</html>'",
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
