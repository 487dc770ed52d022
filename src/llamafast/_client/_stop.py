# Strategy: a stream closed before its end asks the server to stop generating (docs/client.md,
# rule RESUME: with a conversation id, closing the connection no longer stops it). The request is
# the core's (`Resumable.stop_request`); sending it is this module's, on a thread of its own over a
# fresh blocking connection, so that no caller waits for it: not `close()`, not a cancelled task,
# not a finalizer (which may run anywhere, even with no event loop). The thread ends within
# connect_timeout, whatever the server does, and hands the answer's status to the core.
"""Stop a stream's generation on the server in the background: `stop_in_background`."""

from __future__ import annotations

import ssl
import threading
import time
from typing import Any

from .._url import Target

__all__ = ["stop_in_background"]


def stop_in_background(
    engine: Any, target: Target, tls: ssl.SSLContext | None, request: bytes, exchange: Any
) -> threading.Thread:
    """Send `request` (the DELETE of `exchange`, a chat exchange) on a thread; its answer's
    status goes to `exchange.stop_answered`. The thread is returned (tests join it)."""
    timeout = exchange.limits.connect_timeout
    thread = threading.Thread(
        target=_stop,
        args=(engine, target, tls, request, timeout, exchange),
        name="llamafast-stop",
        daemon=True,
    )
    thread.start()
    return thread


def _stop(
    engine: Any,
    target: Target,
    tls: ssl.SSLContext | None,
    request: bytes,
    timeout: float,
    exchange: Any,
) -> None:
    """Connect, send, and read the answer's head, all within `timeout`; then close."""
    until = time.monotonic() + timeout
    conn: Any = None
    try:
        conn = engine.SyncConnection.open(target, until, tls)
        conn.send(request, until)
        parser = conn.parser
        while not parser.head_done and time.monotonic() < until:
            if conn.eof or conn.error is not None:
                return
            conn.receive(until)
        if parser.head_done:
            exchange.stop_answered(parser.status)
    except (OSError, ValueError):  # the server is gone, or answered nonsense: nothing to do
        pass
    finally:
        if conn is not None:
            conn.close()
