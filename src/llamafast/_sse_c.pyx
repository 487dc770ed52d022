# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: cdivision=True, embedsignature=True
"""The SSE reader, Cython twin of `_sse_py.py` (05-loopd-sse.md plus API.md's WHATWG rules).

Strategy: one malloc'd buffer holding [start, end) unconsumed bytes, a `scanned` cursor up to
which the current line has been searched for its end AND validated as UTF-8 (so each byte is
looked at once however the bytes are split, like h11's receive buffer), `memchr` for '\n' and
'\r' with both results cached so '\r'-only streams stay O(n), and a table-driven strict UTF-8
DFA (the same bytes `bytes.decode("utf-8")` rejects) with a word-at-a-time ASCII fast path. A
`str` is built only for a data line that is handed out; the fused ChatStream takes the payload
as (pointer, length) through the cdef API documented in `_sse_c.pxd`, with no `str` at all.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyObject_GetBuffer, PyBuffer_Release
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize
from cpython.bytes cimport PyBytes_GET_SIZE
from cpython.list cimport PyList_Append
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.stdint cimport uint64_t
from libc.string cimport memchr, memcmp, memcpy, memmove

from http.client import IncompleteRead

from llamafast._errors import (
    LineTooLongError,
    NotUtf8Error,
    SseIoError,
    SseTimeoutError,
    TruncatedError,
)
from llamafast._values import DONE

cdef extern from "Python.h":
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)
    void* PyUnicode_DATA(object o)
    object PyUnicode_DecodeUTF8(const char* s, Py_ssize_t size, const char* errors)
    object PyMemoryView_FromMemory(char* mem, Py_ssize_t size, int flags)
    int PyBUF_WRITE

# Strict UTF-8 as a DFA over byte classes (Unicode Table 3-7, "well-formed byte sequences"):
# no overlongs (C0, C1, E0 80-9F, F0 80-8F), no surrogates (ED A0-BF), nothing past U+10FFFF
# (F4 90-BF, F5-FF), no stray continuation bytes, no sequence cut short by the line end.
# States: 0 accept (at a character boundary), 1 reject (sticky), 2 one continuation byte
# needed, 3 two needed, 4 after E0, 5 after ED, 6 three needed, 7 after F0, 8 after F4.
# Classes: 0 00-7F, 1 80-8F, 2 90-9F, 3 A0-BF, 4 C0-C1 F5-FF, 5 C2-DF, 6 E0, 7 E1-EC EE-EF,
# 8 ED, 9 F0, 10 F1-F3, 11 F4.
cdef extern from *:
    """
    static const unsigned char llf_u8_class[256] = {
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
        3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3,
        4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5,
        6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 7, 9, 10, 10, 10, 11, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4
    };
    static const unsigned char llf_u8_next[9 * 12] = {
        0, 1, 1, 1, 1, 2, 4, 3, 5, 7, 6, 8,
        1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
        1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
        1, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1,
        1, 1, 1, 2, 1, 1, 1, 1, 1, 1, 1, 1,
        1, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1,
        1, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1,
        1, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1,
        1, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1
    };
    """
    const unsigned char llf_u8_class[256]
    const unsigned char llf_u8_next[108]

cdef extern from *:
    """
    #define LLF_HIGH_BITS 0x8080808080808080ULL
    """
    const uint64_t HIGH_BITS "LLF_HIGH_BITS"

cdef enum:
    U8_ACCEPT = 0
    U8_REJECT = 1
    C_READ_SIZE = 65536
    SHOW_BYTES = 64  # errors carry line[:64] / partial[:64] (API.md's shared semantics)
    # Events' read methods, in order of preference (API.md: readinto1 / read1 return what has
    # arrived instead of blocking until a whole 64 KiB buffer is full on a chunked http.client
    # body, which readinto / read do).
    MODE_READINTO1 = 0
    MODE_READ1 = 1
    MODE_READINTO = 2
    MODE_READ = 3

MAX_LINE = 1 << 20
READ_SIZE = C_READ_SIZE


cdef Py_ssize_t _check_max_line(object max_line) except -1:
    # The pure twin's rule: an int >= 1 and not a bool, else ValueError naming the value.
    if isinstance(max_line, bool) or not isinstance(max_line, int) or max_line < 1:
        raise ValueError(f"max_line must be an integer >= 1, not {max_line!r}")
    if max_line > <object>(<Py_ssize_t>1 << 62):
        return <Py_ssize_t>1 << 62  # no line can be that long: the same as no limit
    return max_line


cdef class SseDecoder:
    """Push bytes, get SSE items back: the same rules as `Events`, with no I/O.

    `feed` returns every item before a fault; the fault is raised by the next `feed` or `close`
    and by every call after that.
    """

    def __cinit__(self, *args, **kwargs):
        self.buf = NULL
        self.cap = 0
        self.error = None

    def __init__(self, max_line=MAX_LINE):
        self.max_line = _check_max_line(max_line)

    def __dealloc__(self):
        if self.buf != NULL:
            PyMem_Free(self.buf)
            self.buf = NULL

    # --- the buffer ------------------------------------------------------------------------

    cdef char* reserve(self, Py_ssize_t n) except NULL:
        """At least `n` writable bytes at the end of the buffer; compacts and grows it."""
        cdef Py_ssize_t live, shift, newcap
        cdef char* newbuf
        if self.start == self.end and self.start != 0:
            shift = self.start
        elif self.cap - self.end < n and self.start != 0:
            shift = self.start
        else:
            shift = 0
        if shift:
            # Only the current partial line is left in the buffer; move it to the front, once.
            live = self.end - shift
            if live:
                memmove(self.buf, self.buf + shift, live)
            self.start = 0
            self.end = live
            self.scanned -= shift
            self.nl_pos -= shift
            self.cr_pos -= shift
        if self.cap - self.end < n or self.buf == NULL:
            newcap = self.cap * 2
            if newcap < self.end + n:
                newcap = self.end + n
            if newcap < 4096:
                newcap = 4096
            newbuf = <char*>PyMem_Realloc(self.buf, newcap + SSE_PADDING)
            if newbuf == NULL:
                raise MemoryError()
            self.buf = newbuf
            self.cap = newcap
        return self.buf + self.end

    cdef int commit(self, Py_ssize_t n) except -1:
        self.end += n
        return 0

    cdef int feed_raw(self, const char* data, Py_ssize_t length) except -1:
        cdef char* dst
        if length <= 0:
            return 0
        dst = self.reserve(length)
        memcpy(dst, data, length)
        self.end += length
        return 0

    # --- scanning ----------------------------------------------------------------------------

    cdef Py_ssize_t _find_eol(self) noexcept nogil:
        """The offset of the first '\\n' or '\\r' at/after `scanned`, or -1 when none is buffered.

        Both memchr results are kept: a found one stays valid until the lines before it are
        consumed, a miss records how far it searched. So lines ending in a lone '\\r' do not
        rescan up to a far '\\n' every time.
        """
        cdef const char* p
        cdef Py_ssize_t limit
        if not self.nl_found and self.nl_pos < self.end:
            p = <const char*>memchr(self.buf + self.nl_pos, b'\n', self.end - self.nl_pos)
            if p != NULL:
                self.nl_pos = p - self.buf
                self.nl_found = True
            else:
                self.nl_pos = self.end
        limit = self.nl_pos if self.nl_found else self.end
        if not self.cr_found and self.cr_pos < limit:
            p = <const char*>memchr(self.buf + self.cr_pos, b'\r', limit - self.cr_pos)
            if p != NULL:
                self.cr_pos = p - self.buf
                self.cr_found = True
            else:
                self.cr_pos = limit
        if self.cr_found and (not self.nl_found or self.cr_pos < self.nl_pos):
            return self.cr_pos
        if self.nl_found:
            return self.nl_pos
        return -1

    cdef void _advance(self, Py_ssize_t nxt) noexcept nogil:
        """Start the next line at `nxt`: reset the cursor, the UTF-8 state and the caches."""
        self.start = nxt
        self.scanned = nxt
        self.u8 = U8_ACCEPT
        self.nonascii = False
        if self.nl_found:
            if self.nl_pos < nxt:
                self.nl_found = False
                self.nl_pos = nxt
        elif self.nl_pos < nxt:
            self.nl_pos = nxt
        if self.cr_found:
            if self.cr_pos < nxt:
                self.cr_found = False
                self.cr_pos = nxt
        elif self.cr_pos < nxt:
            self.cr_pos = nxt

    cdef void _validate(self, Py_ssize_t a, Py_ssize_t b) noexcept nogil:
        """Run the UTF-8 DFA over [a, b), continuing the state of [start, a)."""
        cdef unsigned int st = self.u8
        cdef const unsigned char* p
        cdef const unsigned char* e
        cdef uint64_t w0, w1, w2, w3
        if st == U8_REJECT:
            return
        p = <const unsigned char*>self.buf + a
        e = <const unsigned char*>self.buf + b
        while p < e:
            if st == U8_ACCEPT:
                # ASCII fast path: 32, then 8 bytes at a time against the high-bit mask.
                while e - p >= 32:
                    memcpy(&w0, p, 8)
                    memcpy(&w1, p + 8, 8)
                    memcpy(&w2, p + 16, 8)
                    memcpy(&w3, p + 24, 8)
                    if (w0 | w1 | w2 | w3) & HIGH_BITS:
                        break
                    p += 32
                while e - p >= 8:
                    memcpy(&w0, p, 8)
                    if w0 & HIGH_BITS:
                        break
                    p += 8
                while p < e and p[0] < 0x80:
                    p += 1
                if p == e:
                    break
            self.nonascii = True
            st = llf_u8_next[st * 12 + llf_u8_class[p[0]]]
            p += 1
            if st == U8_REJECT:
                break
        self.u8 = st

    cdef int _fault(self, object error) except -1:
        self.error = error
        return SSE_FAULT

    cdef int _scan(self, const char** data, Py_ssize_t* length) except -1:
        """The next data item in the buffer: SSE_ITEM / SSE_DONE / SSE_NEED, or SSE_FAULT after
        latching the fault in `self.error` (not raised here, so `feed` needs no try/except)."""
        cdef Py_ssize_t eol, nxt, n, vlen
        cdef const char* line
        cdef const char* v
        cdef bint ok
        if self.error is not None:
            return SSE_FAULT
        if not self.bom_done:
            # API.md: a BOM at the very start of the stream is dropped, even split over reads;
            # undecided (a proper prefix of EF BB BF buffered) means wait, and check no length.
            n = self.end - self.start
            if n == 0:
                return SSE_NEED
            if memcmp(self.buf + self.start, b"\xef\xbb\xbf", 3 if n >= 3 else n) == 0:
                if n < 3:
                    return SSE_NEED
                self._advance(self.start + 3)
            self.bom_done = True
        while True:
            if self.skip_lf:
                # The last line ended in a lone-looking '\r'; a '\n' right after is its end too.
                if self.start == self.end:
                    return SSE_NEED
                self.skip_lf = False
                if self.buf[self.start] == b'\n':
                    self._advance(self.start + 1)
            eol = self._find_eol()
            if eol < 0:
                # 05-loopd-sse.md rule 2: a partial line over max_line fails now.
                if self.end - self.start > self.max_line:
                    return self._fault(LineTooLongError(self.max_line))
                self._validate(self.scanned, self.end)
                self.scanned = self.end
                return SSE_NEED
            n = eol - self.start
            if n > self.max_line:  # rule 2, the whole line at once; length before UTF-8
                return self._fault(LineTooLongError(self.max_line))
            self._validate(self.scanned, eol)
            line = self.buf + self.start
            ok = self.u8 == U8_ACCEPT
            self.item_ascii = not self.nonascii
            if self.buf[eol] == b'\r':
                if eol + 1 < self.end:
                    nxt = eol + 2 if self.buf[eol + 1] == b'\n' else eol + 1
                else:
                    nxt = eol + 1
                    self.skip_lf = True
            else:
                nxt = eol + 1
            self._advance(nxt)
            if not ok:  # rule 5
                return self._fault(
                    NotUtf8Error(PyBytes_FromStringAndSize(line, SHOW_BYTES if n > SHOW_BYTES else n))
                )
            # Field name = bytes before the first ':'; exactly "data" (API.md), no ':' -> "".
            if n < 4 or memcmp(line, b"data", 4) != 0:
                continue
            if n == 4:
                data[0] = line + 4
                length[0] = 0
                return SSE_ITEM
            if line[4] != b':':
                continue
            v = line + 5
            vlen = n - 5
            if vlen and v[0] == b' ':  # exactly one leading space is dropped
                v += 1
                vlen -= 1
            if vlen == 6 and memcmp(v, b"[DONE]", 6) == 0:
                return SSE_DONE
            data[0] = v
            length[0] = vlen
            return SSE_ITEM

    cdef int next_line(self, const char** data, Py_ssize_t* length) except -1:
        cdef int code = self._scan(data, length)
        if code == SSE_FAULT:
            raise self.error
        return code

    cdef int finish(self) except -1:
        cdef Py_ssize_t n
        cdef const char* d
        cdef Py_ssize_t ln
        if self.error is not None:
            raise self.error
        # Drain first, so finish() after feed_raw without next_line still sees every fault.
        if self._scan(&d, &ln) != SSE_NEED:
            if self.error is not None:
                raise self.error
            raise RuntimeError("finish() called with items still buffered")
        n = self.end - self.start
        if n > self.max_line:
            # Only an undecided BOM prefix (b"\xef\xbb" with max_line 1) gets here: like the
            # pure twin, rule 2 (too long) before rule 3 (cut).
            self.error = LineTooLongError(self.max_line)
            raise self.error
        if n > 0:  # rule 3: the stream ended inside a line
            self.error = TruncatedError(
                PyBytes_FromStringAndSize(self.buf + self.start, SHOW_BYTES if n > SHOW_BYTES else n)
            )
            raise self.error
        return 0

    cdef object item_str(self, const char* data, Py_ssize_t length):
        cdef object s
        if self.item_ascii:
            s = PyUnicode_New(length, 127)
            memcpy(PyUnicode_DATA(s), data, length)
            return s
        return PyUnicode_DecodeUTF8(data, length, NULL)

    # --- the Python API ----------------------------------------------------------------------

    def feed(self, data):
        """Append `data` (bytes-like); return the items of every line it completes."""
        cdef const char* d
        cdef Py_ssize_t ln
        cdef int code
        cdef list items
        if self.error is not None:
            raise self.error
        _append(self, data)
        items = []
        while True:
            code = self._scan(&d, &ln)
            if code == SSE_ITEM:
                PyList_Append(items, self.item_str(d, ln))
            elif code == SSE_DONE:
                PyList_Append(items, DONE)
            elif code == SSE_NEED:
                return items
            else:  # latched: the items before it go out now, the fault with the next call
                return items

    def close(self):
        """End of input: None on a clean end, else TruncatedError (or the latched fault)."""
        self.finish()
        return None


cdef int _append(SseDecoder dec, object data) except -1:
    """Append any bytes-like object to the decoder's buffer (no scanning)."""
    cdef Py_buffer view
    if PyBytes_CheckExact(data):
        return dec.feed_raw(PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))
    try:
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    except BufferError:  # e.g. a non-contiguous memoryview: the pure twin takes bytes(data)
        data = bytes(data)
        return dec.feed_raw(PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))
    try:
        dec.feed_raw(<const char*>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    return 0


cdef object _read_error(object err):
    """Map a reader's exception per 05-loopd-sse.md rule 4 (API.md's Python terms), or None to
    let it propagate unchanged."""
    if isinstance(err, TimeoutError):  # socket.timeout is TimeoutError
        e = SseTimeoutError()
    elif isinstance(err, IncompleteRead):  # http.client's cut chunked body
        e = TruncatedError()
    elif isinstance(err, OSError):
        e = SseIoError(err)
    else:
        return None
    e.__cause__ = err  # as the pure twin's `raise ... from err`
    e.__suppress_context__ = True
    return e


cdef class Events:
    """The SSE items of `reader` (anything with readinto1 / read1 / readinto / read)."""

    cdef SseDecoder dec
    cdef object reader
    cdef object _read
    cdef int mode
    cdef bint eof
    cdef object error

    def __init__(self, reader, max_line=MAX_LINE):
        self.dec = SseDecoder(max_line)
        self.reader = reader
        self.eof = False
        self.error = None
        for mode, name in enumerate(("readinto1", "read1", "readinto", "read")):
            method = getattr(reader, name, None)
            if callable(method):
                self.mode = mode
                self._read = method
                break
        else:
            raise TypeError(f"the reader has no read(n) method: {type(reader).__name__}")

    cdef int _fill(self) except -1:
        """One read into the decoder; sets `eof` when the reader is at its end."""
        cdef char* p
        cdef Py_ssize_t n
        cdef object got, view
        while True:
            try:
                if self.mode == MODE_READINTO1 or self.mode == MODE_READINTO:
                    p = self.dec.reserve(C_READ_SIZE)
                    view = PyMemoryView_FromMemory(p, C_READ_SIZE, PyBUF_WRITE)
                    try:
                        got = self._read(view)
                    finally:
                        view.release()
                    n = 0 if got is None else got
                    if n < 0 or n > C_READ_SIZE:
                        raise ValueError(f"readinto returned {got!r} for a {C_READ_SIZE}-byte buffer")
                    if n == 0:
                        self.eof = True
                    else:
                        self.dec.commit(n)
                else:
                    got = self._read(C_READ_SIZE)
                    if not got:
                        self.eof = True
                    else:
                        _append(self.dec, got)
                return 0
            except InterruptedError:
                continue
            except BaseException as err:
                mapped = _read_error(err)
                if mapped is None:
                    raise
                self.error = mapped
                raise mapped

    cpdef object next_item(self):
        """The next item, or None when the stream ended cleanly between lines (again if asked)."""
        cdef const char* d
        cdef Py_ssize_t ln
        cdef int code
        if self.error is not None:
            raise self.error
        while True:
            code = self.dec.next_line(&d, &ln)
            if code == SSE_ITEM:
                return self.dec.item_str(d, ln)
            if code == SSE_DONE:
                return DONE
            if self.eof:
                self.dec.finish()
                return None
            self._fill()

    def __iter__(self):
        return self

    def __next__(self):
        item = self.next_item()
        if item is None:
            raise StopIteration
        return item


# iter_events / aiter_events match the pure twin: max_line is checked at the call (not at the
# first next()), and a fault is raised right after the items before it, without waiting for
# another chunk.

def iter_events(source, max_line=MAX_LINE):
    """The SSE items of an iterable of byte chunks (e.g. a `requests` `iter_content`)."""
    return _iter_events(SseDecoder(max_line), source)


def _iter_events(SseDecoder dec, source):
    for chunk in source:
        yield from dec.feed(chunk)
        if dec.error is not None:
            raise dec.error
    dec.close()


def aiter_events(source, max_line=MAX_LINE):
    """The SSE items of an async iterable of byte chunks (httpx `aiter_bytes`, aiohttp)."""
    return _aiter_events(SseDecoder(max_line), source)


async def _aiter_events(SseDecoder dec, source):
    async for chunk in source:
        for item in dec.feed(chunk):
            yield item
        if dec.error is not None:
            raise dec.error
    dec.close()
