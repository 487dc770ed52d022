# Strategy: a stream closed before its end asks the server to stop generating (docs/client.md,
# rule RESUME: with a conversation id, closing the connection no longer stops it). The request is
# the core's (`Resumable.stop_request`); sending it is this module's, on threads of the client's
# `Stopper`, over blocking connections of its own, so that no caller waits for it: not `close()`,
# not a cancelled task, not a finalizer (which may run anywhere, even with no event loop). Each
# stop ends within connect_timeout of its start, whatever the server does, and hands the
# answer's status to the core. A client that closes many streams reuses both: at most
# MAX_THREADS threads, each ending after IDLE_S with nothing to send, and a connection whose
# answer was read to its end carries the next stop to that server (rule KEEP-ALIVE), so a burst
# of closes starts neither a thread nor, over https, a handshake per stream.
"""Stop a closed stream's generation on the server in the background: `Stopper`."""

from __future__ import annotations

import os
import ssl
import threading
import time
from collections import deque
from typing import Any

from .._url import Target
from ._pool import IDLE_S, Pool, give_back

__all__ = ["MAX_THREADS", "Stopper"]

MAX_THREADS = 4  # per client: the stops beyond wait their turn, in order


class Stopper:
    """One client's stops: `stop(target, request, exchange)` queues the DELETE of `exchange` (a
    chat exchange) for `target`; a thread sends it and gives its answer's status to
    `exchange.stop_answered`. Threads start as stops come (at most MAX_THREADS), and end once
    idle for IDLE_S, the last closing the kept connections. Safe to call from any thread; a
    client's close leaves the stops already queued to be sent."""

    def __init__(self, engine: Any, tls: ssl.SSLContext | None) -> None:
        self._engine = engine
        self._tls = tls
        # Reentrant: a stream's finalizer may run (and stop) wherever the collector runs.
        self._cond = threading.Condition(threading.RLock())
        self._reset()

    def _reset(self) -> None:
        # (Also in a child process after fork: the parent's threads, connections and lock
        # state are not its own.)
        self._pid = os.getpid()
        self._jobs: deque[tuple[Target, bytes, Any]] = deque()
        self._pools: dict[Target, Pool] = {}
        self._threads = 0
        self._busy = 0

    def stop(self, target: Target, request: bytes, exchange: Any) -> None:
        if self._pid != os.getpid():
            self._cond = threading.Condition(threading.RLock())
            self._reset()
        with self._cond:
            self._jobs.append((target, request, exchange))
            self._cond.notify()  # an idle thread takes it, if there is one
            if self._busy + len(self._jobs) > self._threads < MAX_THREADS:
                thread = threading.Thread(target=self._work, name="llamafast-stop", daemon=True)
                try:
                    thread.start()
                except RuntimeError:  # exiting, or out of threads: the running ones send it
                    if not self._threads:
                        self._jobs.pop()
                    return
                self._threads += 1

    def threads(self) -> int:
        """The threads running now (tests read it)."""
        with self._cond:
            return self._threads

    def _work(self) -> None:
        while True:
            with self._cond:
                # Whatever ended the wait (a notify, or its timeout racing one), the queue
                # decides: a thread ends only when there is nothing to send.
                if not self._jobs:
                    self._cond.wait(IDLE_S)
                if not self._jobs:
                    self._threads -= 1
                    pools = []
                    if self._threads == 0:  # the last: nothing is kept past the stops
                        pools, self._pools = list(self._pools.values()), {}
                    break
                target, request, exchange = self._jobs.popleft()
                self._busy += 1
                pool = self._pools.get(target)
                if pool is None:
                    pool = self._pools[target] = Pool(MAX_THREADS)
            try:
                self._send(pool, target, request, exchange)
            except Exception:  # the server is gone, or answered nonsense: nothing to do
                pass
            finally:
                # Not held while idle: the exchange holds its stream's connection and Sink.
                del target, request, exchange
                with self._cond:
                    self._busy -= 1
        for pool in pools:
            pool.close()

    def _send(self, pool: Pool, target: Target, request: bytes, exchange: Any) -> None:
        """Send `request` and read its answer, all within connect_timeout. A kept connection
        that fails or ends before any byte of the answer had been closed by the server while
        idle: the stop goes once more on a fresh one (a DELETE may go twice: it is
        idempotent). The connection is kept when its answer was read to its end."""
        until = time.monotonic() + exchange.limits.connect_timeout
        fresh = False
        while True:
            conn = pool.acquire(until, fresh)
            if conn is None:
                try:
                    conn = self._engine.SyncConnection.open(target, until, self._tls)
                except BaseException:
                    pool.unreserve()
                    raise
                pool.opened_one(conn)
            parser = conn.parser
            try:
                conn.send(request, until)
                while not parser.done and time.monotonic() < until:
                    if conn.eof or conn.error is not None:
                        break
                    conn.receive(until)
            except OSError:  # the send failed: what follows decides, as for an end
                pass
            if parser.done:
                exchange.stop_answered(parser.status)
                give_back(conn, False)
                return
            if conn.reused and not conn.received and not fresh:
                pool.stale(conn)
                fresh = True
                continue
            if parser.head_done:
                exchange.stop_answered(parser.status)
            conn.close()
            return
