# Strategy: `complete(req, on_event)` is iteration handed to a callback. The sync client's is just
# that. The asyncio client's hands a plain function the body's events from the event loop's
# arrival callback (a `_Handout` set as the connection's `deliver`), so the awaiting task is not
# woken once per arrival, which is most of what `async for` costs on many slow streams; the task
# wakes only when the handout must stop or pause, and the ordinary iteration then gives the end or
# the failure exactly as `async for` would.
"""`complete`'s delivery of events to `on_event`, for both clients (rule HANDOUT)."""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from .._values import ChatEvent, Completion

__all__ = ["async_deliver", "deliver"]


def deliver(stream: Any, on_event: Callable[[ChatEvent], object] | None) -> Completion:
    """Iterate `stream`, handing each event to `on_event`; the Completion."""
    for event in stream:
        if on_event is not None:
            on_event(event)
    return stream.completion  # type: ignore[no-any-return]


async def async_deliver(
    stream: Any, on_event: Callable[[ChatEvent], Awaitable[object] | object] | None
) -> Completion:
    """The same for an AsyncClientStream: what `on_event` returns is awaited when it is
    awaitable; a plain function (or None), with no thinking budget, gets the events of the
    body after the first from the arrival callback."""

    async def hand(event: ChatEvent) -> None:
        if on_event is not None:
            result = on_event(event)
            if inspect.isawaitable(result):
                await result

    fast = not inspect.iscoroutinefunction(on_event)
    async for event in stream:
        await hand(event)
        if fast and (body := stream._handout_start()) is not None:
            break  # the body has begun: what comes next is handed out as it arrives
    else:
        return stream.completion  # type: ignore[no-any-return]
    held = stream._held()
    while held:  # the rest of the item that gave the first event
        await hand(held.pop())
    conn, sink = body
    handout = _Handout(conn, sink, on_event)
    conn.deliver = handout
    try:
        handout()  # what came with the first event
        while True:
            pending = handout.pending
            if pending is not None:  # delivery waits for it, whatever came meanwhile
                handout.pending = None
                await pending
                conn.deliver = handout
                handout()
                continue
            if not handout.running or conn.eof or conn.stalled or conn.error:
                break
            await conn.pump()  # reads again if a backlog grew meanwhile
    finally:
        conn.deliver = None
    if handout.fault is not None:
        raise handout.fault
    stream._hold(handout.rest)
    async for event in stream:  # the end, or the failure, as iteration gives them
        await hand(event)
    return stream.completion  # type: ignore[no-any-return]


class _Handout:
    """The delivery from the arrival callback: each item's events go to `on_event` as soon as
    they are decoded. It stops (`running` false, the task woken) at the body's end or failure
    (left latched in the Sink or on the connection, for the task to raise as iteration does)
    and when `on_event` raises (`fault`); it pauses when `on_event` returns an awaitable
    (`pending`; the task awaits it, then calls this again)."""

    __slots__ = ("conn", "context", "fault", "on_event", "pending", "rest", "running", "sink")

    def __init__(
        self,
        conn: Any,
        sink: Any,
        on_event: Callable[[ChatEvent], Awaitable[object] | object] | None,
    ) -> None:
        self.conn = conn
        self.sink = sink
        self.on_event = on_event
        self.context = contextvars.copy_context()  # the caller's context variables
        self.running = True
        self.pending: Awaitable[object] | None = None
        self.fault: BaseException | None = None
        self.rest: list[ChatEvent] = []  # an item's events not handed out yet, reversed

    def __call__(self) -> None:
        conn, sink, on_event = self.conn, self.sink, self.on_event
        while True:
            rest = self.rest
            if rest:
                event = rest.pop()
            else:
                try:
                    events = sink.take()
                except Exception:  # latched in the Sink: the task raises it
                    self._stop()
                    return
                if not events:
                    break
                if on_event is None:
                    continue
                if len(events) == 1:
                    event = events[0]
                else:
                    events.reverse()
                    event = events.pop()
                    self.rest = events
            assert on_event is not None
            try:
                result = self.context.run(on_event, event)
            except Exception as err:
                self.fault = err
                self._stop()
                return
            if result is not None and inspect.isawaitable(result):
                self.pending = result
                conn.deliver = None  # until the task has awaited it
                conn.wake()
                return
        if sink.done or conn.parser.done:
            self._stop()

    def _stop(self) -> None:
        self.running = False
        self.conn.deliver = None
        self.conn.wake()
