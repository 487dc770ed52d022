# cython: language_level=3
# The Sink's C-level surface, for the arrival path (_http_c.Receiver) and the chat streams of
# _chat_c.pyx: the body's bytes to ChatEvents with no Python call per arrival or per item.
#
#     sink._feed_all(pieces)     # feed(): append the bytes-like pieces to the decoder's buffer;
#                                # never raises: a failure is latched for take (after the rest)
#     sink._backlog()            # the backlog property: bytes fed and not taken
#     sink._take_into(out)       # take(): appends the next item's events to `out` and returns
#                                # 1, or 0 when none is complete yet or the body is done
#                                # (`done`); raises the latched error once nothing precedes it
#     sink._end()                # end(): the Completion, or the error that says why there is none
#
# The streams also write into `_dec` directly (a BoundReader reads into it, an async chunk is
# appended to it): they own their Sink, so no other caller can be inside it meanwhile.

from ._assemble_c cimport Assembler
from ._sse_c cimport SseDecoder


cdef class Sink:
    cdef SseDecoder _dec        # the bytes fed and not taken yet: the queue (None until __init__)
    cdef Assembler _asm
    cdef object _error          # latched by take: every later take raises it
    cdef object _feed_error     # a failed feed: take raises it after everything fed before it
    cdef bint _busy             # a feed, take or end is running: a second caller is refused
    cdef public bint done
    cdef readonly object assembler

    cdef int _feed_all(self, object pieces) except -1
    cdef Py_ssize_t _backlog(self) noexcept
    cdef int _take_into(self, list out) except -1
    cdef object _end(self)
