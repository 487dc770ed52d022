# cython: language_level=3, boundscheck=False, wraparound=False
# cython: embedsignature=True
"""Events and Assembler fused, Cython twin (docs/assembler.md, "The whole response in one loop").

The reader's bytes land straight in the SSE decoder's buffer (_sse_c's BoundReader: readinto1 /
readinto into the space `reserve` hands out, the reader's errors mapped as Events maps them);
each data line's payload goes from there to simdjson as a pointer and a length (`next_line`,
then `push_into`, parsing in place thanks to the decoder's padding): no bytes object and no str
is built for a payload, only the events. Same behaviour, errors and
latching as _chat_py.py (whose structure this follows: pending events, one latched error).
"""

from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE

from ._assemble_c cimport Assembler
from ._sse_c cimport SSE_DONE, SSE_ITEM, SSE_PADDING, BoundReader, SseDecoder

from ._assemble_c import PADDING
from ._errors import CancelledReadError, busy_error, uninitialised_error
from ._limits import MAX_LINE

# The pure twin's public names (the stub, _chat_c.pyi, declares them for both).
__all__ = ["AsyncChatStream", "ChatStream", "aiter_chat"]

__all__ = ["AsyncChatStream", "ChatStream", "aiter_chat"]

cdef str _NOT_ENDED = "the stream has not ended yet: iterate it to the end first"
cdef str _CLOSED = "the stream was closed before it ended"

# The decoder guarantees SSE_PADDING readable bytes after each payload; when that covers
# simdjson's SIMDJSON_PADDING, payloads are parsed where they lie (else push_into copies them).
cdef bint _PADDED = SSE_PADDING >= PADDING


cdef class _State:
    """What the sync and async streams share (as _chat_py._State): the decoder, the assembler,
    the current item's events not handed out yet, and the outcome."""

    cdef SseDecoder _dec
    cdef Assembler _asm
    cdef list _pending           # events; those before _pos have been handed out
    cdef Py_ssize_t _pos
    cdef object _completion
    cdef object _error           # the latched error
    cdef bint _ended             # iteration is over: it ended cleanly, or the stream was closed
    cdef bint _closed
    cdef bint _eof               # the reader / source has no more bytes
    cdef bint _busy              # a call is running: a second one (a thread, the reader, a
                                 # finalizer, another task) is refused and the first goes on

    def __cinit__(self, *args, **kwargs):
        # Every field has a safe value before __init__ runs: an object made without it
        # (X.__new__(X), a subclass that skips super().__init__) raises on use (_dec is None).
        self._asm = Assembler()
        self._pending = []
        self._pos = 0

    cdef int _reset(self) except -1:
        """The state of a new stream, for __init__ called again (as the pure twin's)."""
        self._asm = Assembler()
        self._pending = []
        self._pos = 0
        self._completion = None
        self._error = None
        self._ended = self._closed = self._eof = False
        return 0

    cdef inline int _ready(self) except -1:
        """RuntimeError for a stream whose __init__ never ran (as the pure twin's, for every
        property and method)."""
        if self._dec is None:
            raise uninitialised_error(self)
        return 0

    cdef int _latch(self, object err) except -1:
        """Latch `err`. A chunk is all or nothing: the events already built from the chunk
        that failed (past _pos) are dropped, never handed out after its error."""
        del self._pending[self._pos:]
        self._error = err
        return 0

    @property
    def completion(self):
        """The Completion once iteration has ended cleanly.

        docs/assembler.md, rule STREAM-COMPLETION.
        """
        self._ready()
        if self._completion is not None:
            return self._completion
        if self._error is not None:
            raise self._error
        raise RuntimeError(_CLOSED if self._closed else _NOT_ENDED)

    @property
    def id(self):
        self._ready()
        return self._asm._id

    @property
    def reasoning_tokens(self):
        self._ready()
        return self._asm._reasoning_tokens

    @property
    def in_reasoning(self):
        self._ready()
        return self._asm._in_reasoning

    @property
    def is_finished(self):
        self._ready()
        return self._asm._finish_reason is not None

    def partial_arguments(self, index):
        """The assembler's partial_arguments: tool call `index`'s arguments parsed so far."""
        self._ready()
        return self._asm.partial_arguments(index)

    cdef object _drain(self):
        """The next event from the bytes already buffered; None when more bytes are needed or the
        stream is over (then `_ended` is set). Errors propagate (the caller latches them)."""
        cdef const char* data
        cdef Py_ssize_t length
        cdef int code
        cdef list pending = self._pending
        while True:
            code = self._dec.next_line(&data, &length)
            if code == SSE_ITEM:
                # every event in `pending` has been handed out (_pos == len): rather than empty
                # the list per item, let it grow a little and empty it now and then
                if self._pos >= 16:
                    del pending[:]
                    self._pos = 0
                self._asm.push_into(data, length, None, _PADDED, pending)
                if self._pos < PyList_GET_SIZE(pending):
                    self._pos += 1
                    return <object>PyList_GET_ITEM(pending, self._pos - 1)
            elif code == SSE_DONE:  # DONE ends the iteration (docs/assembler.md, rule STREAM-DONE)
                self._end()
                return None
            elif self._eof:  # a clean end of the body (or TruncatedError) also ends it
                self._dec.finish()
                self._end()
                return None
            else:
                return None

    cdef int _end(self) except -1:
        # StreamClosedEarlyError or ProtocolError (docs/assembler.md, rules STREAM-DONE and FINISH).
        self._completion = self._asm.finish()
        self._ended = True
        return 0

    cdef int _mark_closed(self) except -1:
        """Stop the iteration; 1 if this is the first close."""
        self._ready()
        cdef bint first = not self._closed
        self._closed = self._ended = True
        self._pending = []
        self._pos = 0
        return first


cdef class ChatStream(_State):
    """The ChatEvents of a blocking reader's response, in order; then `.completion`."""

    cdef object _reader
    cdef BoundReader _src

    def __init__(self, reader, max_line=MAX_LINE):
        if self._busy:
            raise busy_error(self, "__init__")
        self._busy = True  # getattr(reader, ...) may run the reader's code
        try:
            dec = SseDecoder(max_line)
            src = BoundReader(reader, dec)
            if self._dec is not None:
                self._reset()
            self._dec = dec
            self._reader = reader
            self._src = src
        finally:
            self._busy = False

    def __iter__(self):
        return self

    def __next__(self):
        cdef list pending = self._pending
        if self._busy:
            raise busy_error(self, "__next__")
        if self._pos < PyList_GET_SIZE(pending):
            self._pos += 1
            return <object>PyList_GET_ITEM(pending, self._pos - 1)
        if self._error is not None:
            raise self._error  # errors are latched (docs/assembler.md, rule STREAM-LATCH)
        if self._ended:
            raise StopIteration
        if self._src is None:
            raise uninitialised_error(self)
        self._busy = True
        try:
            while True:
                event = self._drain()
                if event is not None:
                    return event
                if self._ended:
                    raise StopIteration
                self._fill()
        except StopIteration:
            raise
        except Exception as err:
            self._latch(err)
            raise
        finally:
            self._busy = False

    cdef int _fill(self) except -1:
        """One read into the decoder's buffer; sets `_eof` at the end of the body."""
        self._src.fill()
        self._eof = self._src.eof
        return 0

    def close(self):
        """Close the reader (if it has close()); iteration stops."""
        if self._mark_closed():
            close = getattr(self._reader, "close", None)
            if callable(close):
                close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close()


cdef class AsyncChatStream(_State):
    """The same over an async byte source (httpx `aiter_bytes`, aiohttp `iter_any`)."""

    cdef object _source
    cdef object _chunks  # the source's async iterator, from the first __anext__ on
    cdef bint _interrupted  # a read was cancelled and nothing arrived since

    def __init__(self, source, max_line=MAX_LINE):
        if self._busy:
            raise busy_error(self, "__init__")
        dec = SseDecoder(max_line)
        if self._dec is not None:
            self._reset()
        self._dec = dec
        self._source = source
        self._chunks = None
        self._interrupted = False

    def __aiter__(self):
        return self

    async def __anext__(self):
        cdef list pending = self._pending
        if self._busy:
            raise busy_error(self, "__anext__")
        if self._pos < PyList_GET_SIZE(pending):
            self._pos += 1
            return <object>PyList_GET_ITEM(pending, self._pos - 1)
        if self._error is not None:
            raise self._error
        if self._ended:
            raise StopAsyncIteration
        if self._dec is None:
            raise uninitialised_error(self)
        self._busy = True
        try:
            while True:
                event = self._drain()
                if event is not None:
                    return event
                if self._ended:
                    break
                if self._chunks is None:
                    self._chunks = self._source.__aiter__()
                try:
                    chunk = await self._chunks.__anext__()
                except StopAsyncIteration:
                    # A cancelled read may have ended an async generator source for good: its
                    # end then is not the end of the body (as aiter_events, in both twins).
                    if self._interrupted:
                        raise CancelledReadError() from None
                    self._eof = True
                except Exception:
                    raise
                except BaseException:  # cancelled while waiting: the next call goes on
                    self._interrupted = True
                    raise
                else:
                    self._interrupted = False
                    self._dec.append(chunk)
        except Exception as err:
            self._latch(err)
            raise
        finally:
            self._busy = False
        raise StopAsyncIteration

    async def aclose(self):
        """Close the source (if it has aclose()); iteration stops."""
        if self._mark_closed():
            close = getattr(self._source, "aclose", None)
            if callable(close):
                await close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, exc_type, exc, tb):
        await self.aclose()


def aiter_chat(source, max_line=MAX_LINE):
    """`async for event in aiter_chat(source)`, then `.completion` (docs/assembler.md)."""
    return AsyncChatStream(source, max_line)
