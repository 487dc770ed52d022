# Strategy: a client's pinned requests queue per slot, FIFO, under one lock, so the rule holds
# across the threads of a sync client and the tasks of an async one alike. The core only reads a
# ticket's place (`ahead`); the driver sleeps on `WaitTurn` and wakes the tickets `leave` moved.
"""The per-slot lines of one client's requests: `Ticket` and `Lines`."""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["Lines", "Ticket"]


class Ticket:
    """One pinned request's place in its slot's line; `moves` counts how often it moved up,
    `waker` is the driver's own (an asyncio future, say) to wake it."""

    __slots__ = ("moves", "slot", "waker")

    def __init__(self, slot: int) -> None:
        self.slot = slot
        self.moves = 0
        self.waker: Any = None


class Lines:
    """FIFO per slot among one client's requests: the head of a slot's line runs. Safe across
    threads (one lock); `leave` returns the tickets that moved up, for the driver to wake."""

    def __init__(self) -> None:
        # Re-entrant: a dropped stream's finalizer leaves its line, whatever thread runs it.
        self._lock = threading.RLock()
        self._lines: dict[int, list[Ticket]] = {}

    def enter(self, ticket: Ticket) -> None:
        with self._lock:
            self._lines.setdefault(ticket.slot, []).append(ticket)

    def leave(self, ticket: Ticket) -> list[Ticket]:
        with self._lock:
            line = self._lines.get(ticket.slot, [])
            if ticket not in line:
                return []
            at = line.index(ticket)
            del line[at]
            moved = line[at:]
            for behind in moved:
                behind.moves += 1
            ticket.moves += 1  # its own waiter (closed from elsewhere) wakes and sees it left
            moved.append(ticket)
            if not line:
                del self._lines[ticket.slot]
            return moved

    def ahead(self, ticket: Ticket) -> tuple[int, int] | None:
        """(requests ahead of `ticket`, its `moves`), or None once it has left."""
        with self._lock:
            line = self._lines.get(ticket.slot)
            if line is None or ticket not in line:
                return None
            return line.index(ticket), ticket.moves
