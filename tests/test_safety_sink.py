"""Sink, the one engine under ChatStream, AsyncChatStream and the clients' transports, in both
twins (through `impl`): the moment an error is raised (only once everything fed before it has
been handed out, whatever failed: the bytes, a piece that is not bytes-like, a refused call), one
caller at a time (a second take, end or __init__ while one runs is refused with RuntimeError; a
second feed, which cannot raise into the arrival path that made it, is latched as that error),
and a Sink made without __init__.
"""

from __future__ import annotations

import gc
import json
import sys
import threading
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from _safety import ALL_BUSY, UNINIT
from llamafast import Content, NotUtf8Error, ProtocolError, StreamClosedEarlyError


def data(payload: Any) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def piece(text: str) -> bytes:
    return data({"id": "c", "choices": [{"index": 0, "delta": {"content": text}}]})


PROGRESS = {"total": 9, "cache": 0, "processed": 9}
TEXTS = [f"é{i}€" for i in range(60)]
BODY = b"".join(piece(t) for t in TEXTS)
FINISH = data({"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
DONE_LINE = b"data: [DONE]\n\n"


def drain(sink: Any) -> list[str]:
    """The texts of every event `take` gives until it gives none."""
    texts: list[str] = []
    while events := sink.take():
        texts += [e.text for e in events]
    return texts


def refused(err: object, method: str) -> bool:
    """Whether `err` is the refusal of a second call of `method` while one runs."""
    message = f"Sink.{method}() was called while this Sink {ALL_BUSY}"
    return type(err) is RuntimeError and message in str(err)


# --- an error comes after everything before it ------------------------------------------------


def test_a_fault_in_the_bytes_comes_after_every_event_before_it(
    impl: types.SimpleNamespace,
) -> None:
    sink = impl.Sink(1 << 20)
    sink.feed([piece("a") + piece("b") + b"data: \xff\n\n" + piece("c")])
    assert [e.text for e in sink.take()] == ["a"]
    assert [e.text for e in sink.take()] == ["b"]
    with pytest.raises(NotUtf8Error) as first:
        sink.take()
    sink.feed([piece("d")])  # after an error nothing more is kept
    with pytest.raises(NotUtf8Error) as again:
        sink.take()
    assert again.value is first.value
    assert sink.backlog == 0


def test_a_piece_that_is_not_bytes_comes_after_the_events_before_it(
    impl: types.SimpleNamespace,
) -> None:
    sink = impl.Sink(1 << 20)
    sink.feed([piece("a"), piece("b")[:20], 5, piece("b")[20:] + piece("c")])
    assert [e.text for e in sink.take()] == ["a"]  # "b" was cut by the refused piece
    raise_again = None
    for _ in range(2):
        with pytest.raises(TypeError, match="a bytes-like object is required, not 'int'") as err:
            sink.take()
        assert raise_again is None or err.value is raise_again
        raise_again = err.value
    sink.feed([piece("d")])  # ignored: nothing is kept after a failed feed
    with pytest.raises(TypeError) as at_end:
        sink.end()
    assert at_end.value is raise_again


def test_done_ends_the_body_before_a_later_failure(impl: types.SimpleNamespace) -> None:
    """Nothing after `data: [DONE]` is read: not a fault in the bytes, not a failed feed."""
    sink = impl.Sink(1 << 20)
    sink.feed([piece("a") + FINISH + DONE_LINE + b"data: \xff\n\n", 5])
    assert drain(sink) == ["a"]
    assert sink.done and sink.backlog == 0
    assert sink.end().content == "a"


def test_a_sink_fed_bytes_and_never_taken_still_ends_with_them(impl: types.SimpleNamespace) -> None:
    sink = impl.Sink(1 << 20)
    sink.feed([BODY, FINISH])
    assert sink.end().content == "".join(TEXTS)
    sink = impl.Sink(1 << 20)
    sink.feed([BODY])
    with pytest.raises(StreamClosedEarlyError):
        sink.end()


# --- one caller at a time ---------------------------------------------------------------------


def call_from(where: str, call: Callable[[], Any]) -> object:
    """What `call()` returned or raised, called here or in another thread started and joined
    here (which can run while this thread is inside a Sink's call: it waits in join)."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as err:
            outcome.append(err)

    if where == "another thread":
        worker = threading.Thread(target=run)
        worker.start()
        worker.join()
    else:
        run()
    return outcome[0]


WHERE = ["this thread", "another thread"]


def pieces_calling_back(sink: Any, call: Callable[[], Any], where: str, seen: list[object]):
    """The pieces of BODY and FINISH, with `call` made from `where` between the first two: the
    code of the caller's iterable runs inside feed()."""
    yield BODY
    seen.append(call_from(where, call))
    yield FINISH


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("method", ["take", "end", "__init__"])
def test_a_second_caller_inside_feed_is_refused(
    impl: types.SimpleNamespace, where: str, method: str
) -> None:
    sink = impl.Sink(1 << 20)
    seen: list[object] = []
    call = {"take": sink.take, "end": sink.end, "__init__": lambda: sink.__init__(1 << 20)}[method]
    sink.feed(pieces_calling_back(sink, call, where, seen))
    assert len(seen) == 1 and refused(seen[0], method), seen
    assert drain(sink) == TEXTS  # the first caller went on: nothing lost
    assert sink.end().content == "".join(TEXTS)


@pytest.mark.parametrize("where", WHERE)
def test_a_second_feed_inside_feed_keeps_nothing_after_it(
    impl: types.SimpleNamespace, where: str
) -> None:
    sink = impl.Sink(1 << 20)
    seen: list[object] = []
    sink.feed(pieces_calling_back(sink, lambda: sink.feed([b": more\n"]), where, seen))
    assert seen == [None]  # feed never raises: its refusal is latched
    texts: list[str] = []
    with pytest.raises(RuntimeError) as err:
        while True:
            events = sink.take()
            assert events, "the refused feed is raised, never a quiet end"
            texts += [e.text for e in events]
    assert texts == TEXTS  # everything fed before it, then the error
    assert refused(err.value, "feed")
    with pytest.raises(RuntimeError) as at_end:  # latched; FINISH, fed after it, was not kept
        sink.end()
    assert at_end.value is err.value


@contextmanager
def collecting_at_every_allocation(
    callback: Callable[[str, dict[str, int]], None],
) -> Iterator[None]:
    """A collection (and so `callback`, the way a finalizer runs) at nearly every allocation."""
    threshold = gc.get_threshold()
    gc.collect()
    gc.callbacks.append(callback)
    gc.set_threshold(1)
    try:
        yield
    finally:
        gc.callbacks.remove(callback)
        gc.set_threshold(*threshold)


def rich(text: str) -> bytes:
    """An item that builds three events (Progress, Reasoning, Content): several allocations
    inside one take, so that a collection can start there."""
    delta = {"reasoning_content": text, "content": text}
    return data({"id": "c", "prompt_progress": PROGRESS, "choices": [{"index": 0, "delta": delta}]})


RICH = b"".join(rich(t) for t in TEXTS)


def contents(events: list[Any]) -> list[str]:
    return [e.text for e in events if type(e) is Content]


def inside_take_is_seen(impl: types.SimpleNamespace) -> bool:
    """Whether a collection can run inside take: always in the pure twin; in the Cython one
    only before 3.12, which runs the collector between bytecodes only."""
    return impl.IMPLEMENTATION == "python" or sys.version_info < (3, 12)


@pytest.mark.parametrize("where", WHERE)
def test_a_second_take_inside_take_is_refused(impl: types.SimpleNamespace, where: str) -> None:
    sink = impl.Sink(1 << 20)
    sink.feed([RICH, FINISH])
    inside = False
    outcomes: list[object] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if inside and phase == "start":
            outcomes.append(call_from(where, sink.take))

    step = sink.take
    got: list[Any] = []
    with collecting_at_every_allocation(callback):
        while True:
            inside = True
            try:
                events = step()
            finally:
                inside = False
            if not events:
                break
            got += events
    # a take a collection made just outside a call (the flag is not exact to the bytecode)
    # took events of the stream's own, in order; none is lost or repeated
    taken = [e for o in outcomes if isinstance(o, list) for e in o]
    assert sorted(contents(got) + contents(taken), key=TEXTS.index) == TEXTS
    assert len(got) + len(taken) == 3 * len(TEXTS)
    refusals = [o for o in outcomes if not isinstance(o, list)]
    assert all(refused(o, "take") for o in refusals), refusals
    if inside_take_is_seen(impl):
        assert refusals
    assert sink.end().content == "".join(TEXTS)


@pytest.mark.parametrize("where", WHERE)
def test_a_feed_inside_take_is_raised_after_everything_before_it(
    impl: types.SimpleNamespace, where: str
) -> None:
    """A finalizer or a thread feeding while take() reads a line must not move it: refused,
    and raised once every event fed before it has been handed out (none is swallowed)."""
    sink = impl.Sink(1 << 20)
    sink.feed([RICH])
    inside = False
    outcomes: list[object] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if inside and phase == "start":
            # a comment line: if a collection just outside take() lets it in, it changes nothing
            outcomes.append(call_from(where, lambda: sink.feed([b": " + b"x" * 100_000 + b"\n"])))

    step = sink.take
    got: list[Any] = []
    error: BaseException | None = None
    with collecting_at_every_allocation(callback):
        while True:
            inside = True
            try:
                events = step()
            except RuntimeError as err:
                error = err
                break
            finally:
                inside = False
            if not events:
                break
            got += events
    assert outcomes and all(o is None for o in outcomes)  # feed never raises
    assert contents(got) == TEXTS and len(got) == 3 * len(TEXTS)
    if inside_take_is_seen(impl):
        assert refused(error, "feed")
    if error is not None:
        with pytest.raises(RuntimeError) as again:
            sink.take()
        assert again.value is error


# --- made without __init__ ----------------------------------------------------------------------


@pytest.mark.parametrize("how", ["__new__", "subclass"])
def test_a_sink_never_initialised_raises_instead_of_crashing(
    impl: types.SimpleNamespace, how: str
) -> None:
    if how == "__new__":
        sink = impl.Sink.__new__(impl.Sink)
    else:
        sink = type("Sub", (impl.Sink,), {"__init__": lambda self, *a: None})(1 << 20)
    assert sink.take() == [] and sink.backlog == 0
    assert sink.done is False and sink.assembler is None
    with pytest.raises(RuntimeError, match=UNINIT):
        sink.end()
    sink.feed([piece("a")])
    for _ in range(2):  # latched, as a decoder's
        with pytest.raises(RuntimeError, match=UNINIT):
            sink.take()
    with pytest.raises(RuntimeError, match=UNINIT):
        sink.end()


def test_init_again_when_idle_starts_over(impl: types.SimpleNamespace) -> None:
    sink = impl.Sink(1 << 20)
    sink.feed([piece("a") + b"data: {not json\n\n"])
    assert [e.text for e in sink.take()] == ["a"]
    with pytest.raises(ProtocolError):
        sink.take()
    sink.__init__(1 << 20)
    sink.feed([piece("b"), FINISH])
    assert drain(sink) == ["b"]
    assert sink.end().content == "b"


def test_max_line_is_checked(impl: types.SimpleNamespace) -> None:
    for bad in (0, -1, True, 1.5, "10"):
        with pytest.raises(ValueError, match="max_line must be an integer"):
            impl.Sink(bad)
