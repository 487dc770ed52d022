# The SSE reader's C-level API (Cython twin), for the fused ChatStream in _chat_c.pyx.
#
#     from llamafast._engine._sse_c cimport SseDecoder, BoundReader, SSE_NEED, SSE_ITEM, SSE_DONE
#
#     dec = SseDecoder(max_line)            # validates max_line (ValueError), as the Python class
#     dec.feed_raw(p, n)                    # append n bytes (copied)
#     dec.append(obj)                       # append any bytes-like object (copied)
#       or, to read straight into the buffer (no intermediate bytes object):
#     p = dec.reserve(n)                    # >= n writable bytes at p (valid until the next call)
#     ... write k <= n bytes at p ...
#     dec.commit(k)                         # k of them arrived
#       or let a BoundReader do that with a blocking reader (below).
#     The buffer is a ReadBuffer object (dec.blk): it is freed only when the decoder and every
#     buffer-protocol view of it are gone, and reserve() never moves or frees a block that a view
#     still points at (it copies the unfinished line into a new block instead).
#     while True:
#         code = dec.next_line(&data, &length)
#         if code == SSE_ITEM:  data[0:length] is one data payload: the text after "data:" with
#                               its one leading space dropped, line ending excluded, already
#                               checked to be valid UTF-8 (the whole line was). It points INTO the
#                               decoder's buffer and stays valid only until the next call of any
#                               method of this decoder. At least SSE_PADDING (64) readable bytes
#                               follow data + length inside the allocation (for simdjson's
#                               padded parsing; their content is arbitrary).
#                               dec.item_ascii is true when the payload is pure ASCII;
#                               dec.item_str(data, length) builds the str (as `feed` hands out).
#         elif code == SSE_DONE: "data: [DONE]"
#         else (SSE_NEED): every buffered byte is used; append more or call finish().
#     dec.finish()                          # end of input: returns 0 on a clean end, else raises
#                                           # TruncatedError(partial[:64]) (latched)
#
# Errors: next_line raises (returns -1 with the exception set) LineTooLongError / NotUtf8Error
# when it reaches the faulty line, i.e. after every item before it has been handed out; the error
# is latched: every later next_line / finish (and Python-level feed / close) raises it again.
# reserve / commit / feed_raw / append never raise a latched fault (only MemoryError, and
# append's TypeError for what is not bytes-like); the next next_line or finish does.
# dec.error is the latched exception or None.
#
# A blocking reader bound to a decoder (what Events and ChatStream read with):
#
#     src = BoundReader(reader, dec)        # TypeError if reader has none of the read methods
#     src.fill()                            # one read of READ_SIZE bytes into dec; src.eof is
#                                           # set when the reader is at its end
#
# fill() uses readinto1 / read1 / readinto / read, the first the reader has (readinto* write
# straight into the decoder's buffer); it retries InterruptedError and maps the reader's
# exceptions: TimeoutError -> SseTimeoutError, http.client.IncompleteRead -> TruncatedError,
# other OSError -> SseIoError (each with the original as __cause__). A mapped error is latched in
# src.error and raised again by every later fill(); anything else propagates unchanged.

cdef enum:
    SSE_NEED = 0      # every buffered byte is consumed: append more input, or finish()
    SSE_ITEM = 1      # *data / *length: a data payload (valid UTF-8, inside the buffer)
    SSE_DONE = 2      # the line "data: [DONE]"
    SSE_FAULT = 3     # (internal: a fault was found and latched in .error; next_line raises it)
    SSE_PADDING = 64  # readable bytes guaranteed after every payload handed out
    SSE_READ_SIZE = 65536  # bytes asked of a reader per read (docs/sse.md, rule READER)

cdef class ReadBuffer:
    cdef char* data             # PyMem; size + SSE_PADDING bytes, zeroed when allocated
    cdef Py_ssize_t size        # usable bytes
    cdef Py_ssize_t exports     # live buffer-protocol views of it
    cdef Py_ssize_t win_off     # what a view made now covers: data[win_off : win_off + win_len]
    cdef Py_ssize_t win_len
    cdef bint open              # views can be made (only while a read into it runs)


cdef class SseDecoder:
    cdef ReadBuffer blk         # owns the buffer (None until the first reserve)
    cdef char* buf              # blk.data, cached; allocation is cap + SSE_PADDING bytes
    cdef const char* base       # what start / scanned / end index: buf, except inside feed(),
                                # which scans the caller's bytes where they lie
    cdef Py_ssize_t cap         # usable capacity of buf
    cdef Py_ssize_t start       # first byte of the current (unfinished) line
    cdef Py_ssize_t end         # end of the buffered bytes
    cdef Py_ssize_t scanned     # [start, scanned): no line end there, and UTF-8-validated
    cdef Py_ssize_t max_line
    cdef unsigned int u8        # UTF-8 DFA state of [start, scanned) (0: at a boundary, 1: bad)
    cdef Py_ssize_t ncont       # continuation bytes (80-BF) in [start, scanned)
    cdef unsigned int umax      # the largest byte in [start, scanned) (0 if none)
    cdef bint skip_lf           # the last line ended in '\r': a '\n' at `start` belongs to it
    cdef bint bom_done          # the stream start has been checked for a BOM
    cdef Py_ssize_t item_ncont  # the last SSE_ITEM payload's continuation bytes ...
    cdef unsigned int item_umax # ... and largest byte (what item_str sizes the str from)
    cdef readonly bint item_ascii   # the last SSE_ITEM payload is pure ASCII
    cdef readonly object error      # the latched fault (an SseError) or None
    cdef bint busy                  # a Python-level call (feed, close, __init__) is running
    cdef bint ready                 # __init__ has run

    cdef char* reserve(self, Py_ssize_t n) except NULL
    cdef int commit(self, Py_ssize_t n) except -1
    cdef int feed_raw(self, const char* data, Py_ssize_t length) except -1
    cdef int append(self, object data) except -1
    cdef int next_line(self, const char** data, Py_ssize_t* length) except -1
    cdef int finish(self) except -1
    cdef object item_str(self, const char* data, Py_ssize_t length)

    cdef list _feed(self, const char* data, Py_ssize_t length)
    cdef int _feed_in_place(self, const char* data, Py_ssize_t length, list items) except -1
    cdef int _drain(self, list items) except -1
    cdef int _keep(self, const char* tail, Py_ssize_t n, Py_ssize_t scanned) except -1
    cdef int _fault(self, object error) except -1
    cdef int _reset(self) except -1
    cdef int _move(self, Py_ssize_t need) except -1
    cdef int _resize(self, Py_ssize_t newcap) except -1


cdef class BoundReader:
    cdef SseDecoder dec
    cdef object read                # the reader's bound read method
    cdef int mode                   # which one (MODE_* in _sse_c.pyx)
    cdef str method                 # its name, for the messages about what it returned
    cdef readonly bint eof          # the reader returned no bytes: it is at its end
    cdef readonly object error      # the latched, mapped reader error, or None

    cdef int fill(self) except -1
