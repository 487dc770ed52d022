"""The limits both twins enforce, defined once: each twin imports them from here (the Cython
twin's compile-time copies are checked against them by the tests).

Only the standard library's `typing` is imported, so every module of the package, either
twin's, can import this one without a cycle.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "BACKLOG",
    "BUFFER",
    "COUNT_MAX",
    "JSON_INT_MAX",
    "JSON_INT_MIN",
    "MAX_DEPTH",
    "MAX_LINE",
    "READ_SIZE",
    "SHOW_BYTES",
    "WHOLE_PAD",
    "WHOLE_SPARES",
]

# --- the SSE reader (docs/sse.md) -----------------------------------------------------------

MAX_LINE: Final = 1 << 20
"""The default `max_line`: the longest event-stream line, in bytes (rule MAX-LINE)."""

READ_SIZE: Final = 1 << 16
"""Bytes asked of the reader per read (rule READER); the Cython twin's SSE_READ_SIZE."""

SHOW_BYTES: Final = 64
"""Bytes of the offending line kept in NotUtf8Error / TruncatedError."""

# --- the assembler's strict JSON (docs/assembler.md, rules STRICT-JSON and COUNTS) ----------

MAX_DEPTH: Final = 256
"""The deepest nesting of objects and arrays a payload may have (its own object is depth 1,
an empty [] or {} counts as a level): both twins accept exactly this deep and reject deeper."""

JSON_INT_MIN: Final = -(1 << 63)
"""The smallest integer a payload may hold (simdjson holds int64 or uint64)."""

JSON_INT_MAX: Final = (1 << 64) - 1
"""The largest integer a payload may hold."""

COUNT_MAX: Final = (1 << 63) - 1
"""A count's upper bound (token counts, prompt progress)."""

# --- the clients' HTTP transport --------------------------------------------------------------

BUFFER: Final = 1 << 16
"""The response parser's read buffer; also the longest head and chunk-size line accepted."""

BACKLOG: Final = 1 << 21
"""Bytes of body a slow consumer has not taken before reading pauses."""

WHOLE_PAD: Final = 64
"""Spare bytes after a body read whole (docs/client.md, WHOLE-BODY): a reader may parse it where
it landed (simdjson reads up to SIMDJSON_PADDING, 64, bytes past the end)."""

WHOLE_SPARES: Final = 16 << 20
"""Bytes of whole-body buffers the Cython twin keeps for reuse across answers."""
