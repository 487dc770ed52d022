# Strategy: the waits of a request that are not I/O on its connection, in both drivers' forms
# (unasync maps each asyncio name to its blocking twin): its turn in a slot's line, a sleep until
# a deadline, and the requests of one call run side by side (the asyncio client) or in turn.
"""The clients' waits: slot turns, sleeps, and the requests of one call run together."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from .._core import Ticket, WaitTurn

__all__ = ["AsyncTurns", "Turns", "async_run_all", "async_sleep_until", "run_all", "sleep_until"]


# --- running several requests of one call -------------------------------------------------------


async def async_run_all(calls: list[Any], width: int) -> None:
    """Await every `call()` (a coroutine function), at most `width` at a time; the first
    failure cancels the rest and is raised."""
    pending = list(reversed(calls))

    async def lane() -> None:
        while pending:
            await pending.pop()()

    lanes = [asyncio.ensure_future(lane()) for _ in range(max(1, min(width, len(calls))))]
    try:
        await asyncio.gather(*lanes)
    except BaseException:
        for task in lanes:
            task.cancel()
        await asyncio.gather(*lanes, return_exceptions=True)
        raise


def run_all(calls: list[Any], width: int) -> None:
    """The sync client's: every `call()` in turn, one at a time (`width` is the async
    client's; a blocking client sends the next request when the last has been read)."""
    for call in calls:
        call()


# --- waiting and sleeping ------------------------------------------------------------------------


class Turns:
    """The sync client's waits for a turn in a slot's line: one condition per client, notified
    only while some thread waits on it (a request whose slot is free pays no turn)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._waiting = 0  # threads inside wait()

    def wait(self, cmd: WaitTurn) -> None:
        with self._cond:
            self._waiting += 1
            try:
                while cmd.ticket.moves == cmd.seen:
                    left = cmd.until - time.monotonic()
                    if left <= 0:
                        return
                    self._cond.wait(left)
            finally:
                self._waiting -= 1

    def wake(self, moved: list[Ticket]) -> None:
        # Moved before `_waiting` is read: a thread not counted yet sees it before it waits.
        if moved and self._waiting:
            with self._cond:
                self._cond.notify_all()


class AsyncTurns:
    """The asyncio client's waits for a turn: each waiting request sleeps on a future of its
    own, woken when a request ahead of it leaves."""

    async def wait(self, cmd: WaitTurn) -> None:
        ticket = cmd.ticket
        if ticket.moves != cmd.seen:
            return
        loop = asyncio.get_running_loop()
        waker = ticket.waker = loop.create_future()
        try:
            async with asyncio.timeout_at(loop.time() + (cmd.until - time.monotonic())):
                await waker
        except TimeoutError:
            pass
        finally:
            ticket.waker = None

    def wake(self, moved: list[Ticket]) -> None:
        for ticket in moved:
            waker = ticket.waker
            if waker is not None and not waker.done():
                waker.set_result(None)


def sleep_until(until: float) -> None:
    time.sleep(max(0.0, until - time.monotonic()))


async def async_sleep_until(until: float) -> None:
    await asyncio.sleep(max(0.0, until - time.monotonic()))
