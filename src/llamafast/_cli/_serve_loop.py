"""How `llamafast serve` holds its connections: one thread reads every request, a few answer.

One selector thread accepts the connections and reads each request whole (`RequestReader`: the
head and the body within their bounds) against one deadline for the whole request, counted
from the accept however the bytes trickle in. Only a whole request goes to the pool of at most
`workers` threads that answer (an answer holds its thread while it streams or waits for a
slot). So a slow, silent or huge client costs a socket and a buffer, never a thread: past its
deadline it gets 408, past a bound 400 / 413 / 431, and the server goes on. At most `max_open`
connections are held at once (being read, waiting for a worker, or answered); past that the
loop stops accepting, and the next clients wait in the listen backlog until one ends.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import queue
import selectors
import socket
import sys
import threading
import time
from typing import Self

from ._serve_reader import REQUEST_DEADLINE, Refusal, Request, RequestReader, timed_out

__all__ = ["LINGER", "MAX_OPEN", "WORKERS", "LoopServer"]

WORKERS = 64
"""Threads that answer whole requests at most: more than a client's connections to one server
(Limits.max_connections, 32) and the README's examples need at once."""
MAX_OPEN = 512
"""Connections held at once at most; the next wait in the listen backlog (BACKLOG)."""
BACKLOG = 256
LINGER = 2.0
"""After a refusal, seconds the rest of the request is read and dropped, so the client reads
the answer rather than a reset (a close with unread bytes resets the connection)."""
SEND_TIMEOUT = 60.0
"""A client that takes no byte of an answer's piece for this long is dropped (its worker freed)."""


class _Conn:
    """A connection the loop holds until its request is whole (or it is refused and lingers)."""

    __slots__ = ("deadline", "lingering", "reader", "sock")

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock, self.deadline = sock, deadline
        self.reader = RequestReader()
        self.lingering = False


class LoopServer:
    """Listens on `host:port`; `serve_forever()` answers until `shutdown()` (from another
    thread). A subclass answers one whole request in `answer(conn, req)`, on a worker thread;
    the connection is closed after it returns."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        deadline: float = REQUEST_DEADLINE,
        workers: int = WORKERS,
        max_open: int = MAX_OPEN,
    ) -> None:
        self.deadline, self.workers, self.max_open = deadline, workers, max_open
        self.socket = socket.create_server((host, port), backlog=BACKLOG)
        self.server_address: tuple[str, int] = self.socket.getsockname()[:2]
        self._wake_r, self._wake_w = socket.socketpair()
        for sock in (self.socket, self._wake_r, self._wake_w):
            sock.setblocking(False)
        self._lock = threading.Lock()
        self._open = 0  # connections held: being read, queued or being answered
        self._jobs: queue.SimpleQueue[tuple[socket.socket, Request] | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)  # workers waiting for a job
        self._threads = 0
        self._stop = False
        self._stopped = threading.Event()
        self._stopped.set()

    def answer(self, conn: socket.socket, req: Request) -> None:
        raise NotImplementedError

    # --- life -------------------------------------------------------------------------------

    def serve_forever(self) -> None:
        self._stopped.clear()
        try:
            _Loop(self).run()
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        """Stop `serve_forever` and wait for it to end; idle workers end too."""
        self._stop = True
        self._wake()
        self._stopped.wait()
        for _ in range(self._threads):
            self._jobs.put(None)

    def server_close(self) -> None:
        for sock in (self.socket, self._wake_r, self._wake_w):
            sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.server_close()

    # --- for the loop -----------------------------------------------------------------------

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # full: a wake is pending already
            self._wake_w.send(b"\0")

    def _opened(self) -> bool:
        """Count one more connection; False when `max_open` are held already."""
        with self._lock:
            if self._open >= self.max_open:
                return False
            self._open += 1
            return True

    def _closed(self, sock: socket.socket | None) -> None:
        """Count one connection fewer (closing `sock`, if there is one)."""
        if sock is not None:
            sock.close()
        with self._lock:
            self._open -= 1
            full = self._open == self.max_open - 1
        if full:  # the loop stopped accepting: it may again
            self._wake()

    def _submit(self, sock: socket.socket, req: Request) -> None:
        """Hand a whole request to an idle worker, or to a new one while there are fewer than
        `workers`; else it waits in the queue for the next worker free."""
        self._jobs.put((sock, req))
        if not self._idle.acquire(blocking=False) and self._threads < self.workers:
            self._threads += 1
            threading.Thread(target=self._work, name="llamafast-serve", daemon=True).start()

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            sock, req = job
            try:
                sock.settimeout(SEND_TIMEOUT)
                self.answer(sock, req)
            except OSError:
                pass  # the client went away, or took no byte for SEND_TIMEOUT
            except Exception as err:  # the worker survives a bug, saying which request hit it
                print(f"llamafast serve: {req.method} {req.path}: {err!r}", file=sys.stderr)
            finally:
                self._closed(sock)
            self._idle.release()


class _Loop:
    """The selector thread's state: the connections being read, their deadlines (a heap, the
    earliest first; an entry whose connection moved on is skipped when it comes up)."""

    def __init__(self, server: LoopServer) -> None:
        self.server = server
        self.sel = selectors.DefaultSelector()
        self.deadlines: list[tuple[float, int, _Conn]] = []
        self.order = itertools.count()
        self.accepting = False
        self.resume_at = 0.0  # out of descriptors: accept again from then
        self.sel.register(server._wake_r, selectors.EVENT_READ)

    def run(self) -> None:
        server = self.server
        try:
            while not server._stop:
                self._accept_while_room()
                for key, _ in self.sel.select(self._timeout()):
                    if key.fileobj is server.socket:
                        self._accept()
                    elif key.fileobj is server._wake_r:
                        with contextlib.suppress(OSError):
                            server._wake_r.recv(4096)
                    else:
                        self._read(key.data)
                self._expire(time.monotonic())
        finally:
            for at, _, conn in self.deadlines:
                if at == conn.deadline:  # held here, not handed to a worker
                    self._close(conn)
            self.sel.close()

    def _timeout(self) -> float | None:
        """Seconds until the next deadline (or the accepts' resumption); None: none."""
        at = [self.deadlines[0][0]] if self.deadlines else []
        if self.resume_at:
            at.append(self.resume_at)
        return max(min(at) - time.monotonic(), 0.0) if at else None

    def _accept_while_room(self) -> None:
        server = self.server
        if self.resume_at and time.monotonic() >= self.resume_at:
            self.resume_at = 0.0
        with server._lock:
            room = server._open < server.max_open and not self.resume_at
        if room != self.accepting:
            if room:
                self.sel.register(server.socket, selectors.EVENT_READ)
            else:
                self.sel.unregister(server.socket)
            self.accepting = room

    def _accept(self) -> None:
        server = self.server
        while server._opened():
            try:
                sock, _ = server.socket.accept()
            except OSError as err:
                server._closed(None)
                if not isinstance(err, BlockingIOError):  # out of descriptors, say: wait a bit
                    self.resume_at = time.monotonic() + 0.1
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(sock, time.monotonic() + server.deadline)
            self.sel.register(sock, selectors.EVENT_READ, conn)
            heapq.heappush(self.deadlines, (conn.deadline, next(self.order), conn))

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data or conn.lingering:
            if not data:  # the peer closed (before its request was whole, or after a refusal)
                self._close(conn)
            return
        try:
            req = conn.reader.feed(data)
        except Refusal as refusal:
            self._refuse(conn, refusal)
            return
        if req is not None:
            self.sel.unregister(conn.sock)
            conn.deadline = -1.0  # the heap's entry is stale from now on
            self.server._submit(conn.sock, req)

    def _refuse(self, conn: _Conn, refusal: Refusal) -> None:
        """Answer, then read and drop what still comes for LINGER seconds before closing."""
        try:
            conn.sock.send(refusal.answer())  # a few hundred bytes: the socket buffer takes them
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(conn)
            return
        conn.lingering = True
        conn.deadline = time.monotonic() + LINGER
        heapq.heappush(self.deadlines, (conn.deadline, next(self.order), conn))

    def _expire(self, now: float) -> None:
        while self.deadlines and self.deadlines[0][0] <= now:
            at, _, conn = heapq.heappop(self.deadlines)
            if at != conn.deadline:
                continue  # whole and handed on, or lingering with a later deadline
            if not conn.lingering:
                with contextlib.suppress(OSError):
                    conn.sock.send(timed_out(self.server.deadline).answer())
            self._close(conn)

    def _close(self, conn: _Conn) -> None:
        conn.deadline = -1.0
        self.sel.unregister(conn.sock)
        self.server._closed(conn.sock)
