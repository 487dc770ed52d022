# Strategy: a request is a plain generator (a Phase) that yields these commands and is sent their
# results (h11's manner: the rules have no I/O). The drivers (_client/_async.py and the sync one
# generated from it) and the fake-clock tests carry them out; every loop that does so steps the
# phase through `step`, the one place that sends a result in, throws a failure in, and turns the
# phase's return into `Done`.
"""The commands of the sans-I/O core, and the one step of every loop that carries them out."""

from __future__ import annotations

import dataclasses
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, TypeVar

from .._values import ChatEvent

if TYPE_CHECKING:
    from ._connection import Arrival
    from ._lines import Ticket

__all__ = [
    "Close",
    "Connect",
    "Done",
    "Emit",
    "Phase",
    "Receive",
    "Release",
    "Sleep",
    "WaitTurn",
    "step",
]

T = TypeVar("T")
Phase = Generator[Any, Any, T]  # yields commands, is sent their results, returns T


@dataclasses.dataclass(frozen=True, slots=True)
class Emit:
    """Hand `event` to the caller."""

    event: ChatEvent


@dataclasses.dataclass(frozen=True, slots=True)
class Sleep:
    """Sleep until the clock reads `until`."""

    until: float


@dataclasses.dataclass(frozen=True, slots=True)
class WaitTurn:
    """Wait until the ticket has moved in its slot's line (its `moves` is no longer `seen`) or
    the clock reads `until`, whichever comes first."""

    ticket: Ticket
    seen: int
    until: float


@dataclasses.dataclass(frozen=True, slots=True)
class Connect:
    """Send `request` on a connection to the server: a kept-alive one of the client's pool
    (its `reused` is then True), else one opened before the clock reads `until`. With
    `stale` (a reused connection that ended before any byte of its answer: the server had
    closed it) that one is dropped and a fresh connection opened. A request beyond the
    client's `max_connections` waits for one until `queue_until` (WaitTimeoutError). `server`:
    which of the client's servers (its place in `urls`; rule FLEET). The result is the
    connection (an `Arrival`) into which the driver parses every byte that
    arrives. A failure to connect or send is thrown in as the OSError."""

    request: bytes
    until: float
    queue_until: float
    stale: Arrival | None = None
    server: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class Receive:
    """Wait until bytes arrive on `conn` (parsed into it), it ends or fails (`eof`, `error`
    set), or the clock reads `until`, whichever comes first. The result is None: the core
    reads what happened from `conn`."""

    conn: Arrival
    until: float


@dataclasses.dataclass(frozen=True, slots=True)
class Close:
    """Close `conn` now (the server sees it at once)."""

    conn: Arrival


@dataclasses.dataclass(frozen=True, slots=True)
class Release:
    """The answer on `conn` was read to its end: the driver keeps the connection for the
    client's next request when the server allows it (rule KEEP-ALIVE), else closes it.
    `streamed`: the answer was an event stream (some servers close after those)."""

    conn: Arrival
    streamed: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Done:
    """Not a command: what `step` gives once the phase has returned `value`."""

    value: Any


def step(phase: Phase[Any], result: Any, failure: BaseException | None) -> Any:
    """The phase's next command, after sending it `result` (or throwing `failure` into it, the
    OSError of the last command); `Done(value)` once it has returned."""
    try:
        return phase.send(result) if failure is None else phase.throw(failure)
    except StopIteration as stop:
        return Done(stop.value)
