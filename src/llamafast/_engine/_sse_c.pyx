# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: cdivision=True, embedsignature=True
"""The SSE reader, Cython twin of `_sse_py.py`: the rules of docs/sse.md.

Strategy: one malloc'd buffer holding the unfinished line, and a `scanned` cursor up to which
the current line has been searched for its end AND validated as UTF-8, so each byte is looked at
once however the bytes are split (like h11's receive buffer). One pass does both: 16 bytes at a
time (SSE2; 8 with plain 64-bit words elsewhere) test for '\n', '\r' and non-ASCII at once; only
a block holding one of them is walked byte by byte through a table-driven strict UTF-8 DFA (the
bytes `bytes.decode("utf-8")` rejects), which also counts the line's continuation bytes and
keeps its largest byte. Those two numbers give the str's length and kind, so a data line's str
is allocated once at its final size and filled in one pass (ASCII runs copied or widened 16
bytes at a time) instead of going through PyUnicode_DecodeUTF8's grow-and-widen path; an ASCII
line is a memcpy. `feed` scans the caller's bytes where they lie and copies only the unfinished
tail; `Events` and the fused ChatStream read straight into the buffer (`BoundReader`), and the
ChatStream takes each payload as (pointer, length) through the cdef API in `_sse_c.pxd`.
"""

from cpython.buffer cimport (
    PyBUF_FORMAT,
    PyBUF_ND,
    PyBUF_SIMPLE,
    PyBUF_STRIDES,
    PyBuffer_Release,
    PyObject_GetBuffer,
)
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize
from cpython.bytes cimport PyBytes_GET_SIZE
from cpython.list cimport PyList_Append
from cpython.mem cimport PyMem_Calloc, PyMem_Free, PyMem_Realloc
from cpython.memoryview cimport PyMemoryView_FromObject
from libc.string cimport memcmp, memcpy, memmove, memset

from http.client import IncompleteRead

from llamafast._errors import (
    CancelledReadError,
    LineTooLongError,
    NotUtf8Error,
    SseIoError,
    SseTimeoutError,
    TruncatedError,
    busy_error,
    uninitialised_error,
)
from llamafast._limits import MAX_LINE
from llamafast._limits import SHOW_BYTES as _SHOW_BYTES
from llamafast._engine._reader_contract import check_chunk, check_count
from llamafast._values import DONE

# The line-end search, strict UTF-8 validation and the str of a validated line are C, in
# _sse_scan.h beside this file (its comment names the DFA's states and byte classes).
cdef extern from "_sse_scan.h":
    Py_ssize_t llf_scan(const unsigned char* p, Py_ssize_t n, unsigned int* st,
                        Py_ssize_t* ncont, unsigned int* umax) noexcept nogil
    Py_ssize_t llf_find_eol(const char* p, Py_ssize_t n) noexcept nogil
    object llf_str(const char* s, Py_ssize_t n, Py_ssize_t ncont, unsigned int umax)

cdef enum:
    U8_ACCEPT = 0
    U8_REJECT = 1
    # BoundReader's read methods, in order of preference: readinto1 / read1 return what has
    # arrived instead of blocking until a whole 64 KiB buffer is full on a chunked http.client
    # body, which readinto / read do (docs/sse.md, rule READER).
    MODE_READINTO1 = 0
    MODE_READ1 = 1
    MODE_READINTO = 2
    MODE_READ = 3
    # The buffer's size between long lines: Events reads 64 KiB after an unfinished line, so
    # 128 KiB holds both for every line up to 64 KiB. A block grown past it for a longer line
    # shrinks back to it (or to what the line still needs) once that line is done.
    NORMAL_CAP = 2 * SSE_READ_SIZE

# Errors carry line[:SHOW_BYTES] / partial[:SHOW_BYTES] (docs/sse.md, rules UTF8 and END).
cdef Py_ssize_t SHOW_BYTES = _SHOW_BYTES

cdef tuple _MODE_NAMES = ("readinto1", "read1", "readinto", "read")

READ_SIZE = SSE_READ_SIZE  # _limits.READ_SIZE (the tests check it)

# The pure twin's public names (the stub, _sse_c.pyi, declares them for both).
__all__ = ["MAX_LINE", "READ_SIZE", "Events", "SseDecoder", "aiter_events", "iter_events"]


cdef Py_ssize_t _check_max_line(object max_line) except -1:
    # The pure twin's rule: an int >= 1 and not a bool, else ValueError naming the value.
    if isinstance(max_line, bool) or not isinstance(max_line, int) or max_line < 1:
        raise ValueError(f"max_line must be an integer >= 1, not {max_line!r}")
    if max_line > <object>(<Py_ssize_t>1 << 62):
        return <Py_ssize_t>1 << 62  # no line can be that long: the same as no limit
    return max_line


cdef int _get_view(object data, Py_buffer* view) except -1:
    """`view` of a bytes-like object's bytes (PyBuffer_Release it). A non-contiguous one (a
    BufferError) is copied first, as the pure twin's bytes(memoryview(data)); anything else that
    is not bytes-like is its TypeError."""
    try:
        PyObject_GetBuffer(data, view, PyBUF_SIMPLE)
    except BufferError:
        PyObject_GetBuffer(bytes(data), view, PyBUF_SIMPLE)
    return 0


cdef inline void _advance(SseDecoder self, Py_ssize_t nxt) noexcept:
    """Start the next line at `nxt`: reset the cursor and the line's UTF-8 state."""
    self.start = nxt
    self.scanned = nxt
    self.u8 = U8_ACCEPT
    self.ncont = 0
    self.umax = 0


# The reader's hot loop. Its states: a latched fault (SSE_FAULT again); the BOM undecided (a
# proper prefix of EF BB BF buffered); a CR just ended a line (skip_lf: a LF next is its end
# too); a line being scanned, its UTF-8 DFA state in u8 (accept or reject at a character
# boundary, else mid-sequence) from `start` up to `scanned`; and a line found, which is an
# item (data, or DONE) or is skipped.
cdef inline int _scan(SseDecoder self, const char** data, Py_ssize_t* length) except -1:
    """The next data item in [start, end) of `base`: SSE_ITEM / SSE_DONE / SSE_NEED, or
    SSE_FAULT after latching the fault in `self.error` (not raised here, so `feed` needs no
    try/except)."""
    cdef Py_ssize_t eol, nxt, n, vlen
    cdef const char* base = self.base
    cdef const char* line
    cdef const char* v
    if self.error is not None:
        return SSE_FAULT
    if not self.bom_done:
        # docs/sse.md, rule BOM: a BOM at the very start of the stream is dropped, even split;
        # undecided (a proper prefix of EF BB BF buffered) means wait, and check no length.
        n = self.end - self.start
        if n == 0:
            return SSE_NEED
        if memcmp(base + self.start, b"\xef\xbb\xbf", 3 if n >= 3 else n) == 0:
            if n < 3:
                return SSE_NEED
            _advance(self, self.start + 3)
        self.bom_done = True
    while True:
        if self.skip_lf:
            # The last line ended in a lone-looking '\r'; a '\n' right after is its end too.
            if self.start == self.end:
                return SSE_NEED
            self.skip_lf = False
            if base[self.start] == b'\n':
                _advance(self, self.start + 1)
        eol = self.scanned + llf_scan(
            <const unsigned char*>base + self.scanned,
            self.end - self.scanned,
            &self.u8,
            &self.ncont,
            &self.umax,
        )
        if eol == self.end:
            self.scanned = eol
            # A partial line over max_line fails now (docs/sse.md, rule MAX-LINE).
            if self.end - self.start > self.max_line:
                return self._fault(LineTooLongError(self.max_line))
            return SSE_NEED
        n = eol - self.start
        # The whole line at once, length before UTF-8 (docs/sse.md, rules MAX-LINE and
        # LENGTH-FIRST).
        if n > self.max_line:
            return self._fault(LineTooLongError(self.max_line))
        line = base + self.start
        if self.u8 != U8_ACCEPT:  # docs/sse.md, rule UTF8
            return self._fault(
                NotUtf8Error(PyBytes_FromStringAndSize(line, SHOW_BYTES if n > SHOW_BYTES else n))
            )
        # "data:" and the space are ASCII: the payload has all the line's non-ASCII bytes.
        self.item_ncont = self.ncont
        self.item_umax = self.umax
        self.item_ascii = self.umax < 0x80
        if base[eol] == b'\r':
            if eol + 1 < self.end:
                nxt = eol + 2 if base[eol + 1] == b'\n' else eol + 1
            else:
                nxt = eol + 1
                self.skip_lf = True
        else:
            nxt = eol + 1
        _advance(self, nxt)
        # Field name = bytes before the first ':'; exactly "data", no ':' -> "" (docs/sse.md,
        # rule FIELD).
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


cdef class ReadBuffer:
    """The memory a reader's readinto writes into, as an object that owns it.

    A reader may keep what it was handed (the memoryview, a slice, a cast, memoryview(b), a
    ctypes array from_buffer, a pickle.PickleBuffer): each of those holds a buffer-protocol view
    of this object, and the memory is freed only when the last one and the decoder are gone.
    `exports` counts the live views, so the decoder knows when it must not move or reuse the
    block. A view can be made only while a read into the block runs (`open`): one made later
    (from `memoryview.obj`) could reach bytes the decoder has already scanned.
    """

    def __getbuffer__(self, Py_buffer* view, int flags):
        if not self.open:
            raise BufferError("the read buffer can be viewed only while a read into it runs")
        # what PyBuffer_FillInfo does, writable, with `obj` set the way Cython counts it
        view.buf = self.data + self.win_off
        view.len = self.win_len
        view.readonly = 0
        view.itemsize = 1
        view.format = <char*>"B" if (flags & PyBUF_FORMAT) == PyBUF_FORMAT else NULL
        view.ndim = 1
        view.shape = &view.len if (flags & PyBUF_ND) == PyBUF_ND else NULL
        view.strides = &view.itemsize if (flags & PyBUF_STRIDES) == PyBUF_STRIDES else NULL
        view.suboffsets = NULL
        view.internal = NULL
        view.obj = self
        self.exports += 1

    def __releasebuffer__(self, Py_buffer* view):
        self.exports -= 1

    def __dealloc__(self):
        PyMem_Free(self.data)
        self.data = NULL


cdef ReadBuffer _new_block(Py_ssize_t size):
    """A zeroed block of `size` usable bytes (and the padding): no byte of it is left over
    from other uses of the heap, so nothing the reader did not write can ever be read."""
    cdef ReadBuffer blk = ReadBuffer.__new__(ReadBuffer)
    blk.data = <char*>PyMem_Calloc(size + SSE_PADDING, 1)
    if blk.data == NULL:
        raise MemoryError()
    blk.size = size
    return blk


cdef class SseDecoder:
    """Push bytes, get SSE items back: the same rules as `Events`, with no I/O.

    `feed` returns every item before a fault; the fault is raised by the next `feed` or `close`
    and by every call after that.
    """

    def __cinit__(self, *args, **kwargs):
        # Every field has a safe value before __init__ runs: an object made without it
        # (SseDecoder.__new__, a subclass that skips super().__init__) raises on use.
        self.busy = False
        self.ready = False
        self._reset()

    def __init__(self, max_line=MAX_LINE):
        if self.busy:
            raise busy_error(self, "__init__")
        self.max_line = _check_max_line(max_line)
        self._reset()
        self.ready = True

    cdef int _reset(self) except -1:
        """An empty decoder at the start of a stream (what __init__ gives)."""
        self.blk = None
        self.buf = NULL
        self.base = NULL
        self.cap = self.start = self.end = self.scanned = 0
        self.u8 = U8_ACCEPT
        self.ncont = 0
        self.umax = 0
        self.skip_lf = False
        self.bom_done = False
        self.item_ncont = 0
        self.item_umax = 0
        self.item_ascii = False
        self.error = None
        return 0

    @property
    def _buffer_size(self):
        """The usable size of the buffer (for tests of what a long line leaves behind)."""
        return self.cap

    # --- the buffer ------------------------------------------------------------------------

    cdef int _move(self, Py_ssize_t need) except -1:
        """Put the unfinished line [start, end) at the front of a new block of at least `need`
        bytes. The old block is left to whatever still views it (or freed, when nothing does)."""
        cdef Py_ssize_t live = self.end - self.start
        cdef Py_ssize_t newcap = self.cap if self.cap < NORMAL_CAP else NORMAL_CAP
        if newcap < need:
            newcap = need
        if newcap < 4096:
            newcap = 4096
        cdef ReadBuffer blk = _new_block(newcap)
        if live:
            memcpy(blk.data, self.buf + self.start, live)
        self.blk = blk
        self.base = self.buf = blk.data
        self.cap = newcap
        self.scanned -= self.start
        self.start = 0
        self.end = live
        return 0

    cdef int _resize(self, Py_ssize_t newcap) except -1:
        """Grow or shrink the block in place (no view of it is alive), the line at the front."""
        cdef char* newbuf
        cdef Py_ssize_t live = self.end - self.start
        if self.start:
            if live:
                memmove(self.buf, self.buf + self.start, live)
            self.scanned -= self.start
            self.start = 0
            self.end = live
        if newcap == self.cap:
            return 0
        newbuf = <char*>PyMem_Realloc(self.buf, newcap + SSE_PADDING)
        if newbuf == NULL:
            raise MemoryError()
        if newcap > self.cap:  # zeroed, as a new block is (see _new_block)
            memset(newbuf + self.cap + SSE_PADDING, 0, newcap - self.cap)
        self.blk.data = self.base = self.buf = newbuf
        self.blk.size = self.cap = newcap
        return 0

    cdef char* reserve(self, Py_ssize_t n) except NULL:
        """At least `n` writable bytes at the end of the buffer; compacts, grows or shrinks it,
        and never moves or reuses a block that a view (kept by a reader) still points at."""
        cdef Py_ssize_t live = self.end - self.start
        cdef Py_ssize_t newcap
        if self.blk is None or self.blk.exports:
            self._move(live + n)
        elif self.cap > NORMAL_CAP and live + n <= NORMAL_CAP:
            # after a long line: back to the normal size, so one long line is not kept for as
            # long as the stream lives
            self._resize(NORMAL_CAP)
        elif self.cap - self.end < n:
            newcap = self.cap * 2
            if newcap < live + n:
                newcap = live + n
            self._resize(newcap if live + n > self.cap else self.cap)
        elif self.start == self.end and self.start != 0:
            self.start = self.end = self.scanned = 0  # nothing to keep: start over, for free
        self.base = self.buf
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

    cdef int append(self, object data) except -1:
        """Append any bytes-like object to the buffer (no scanning)."""
        cdef Py_buffer view
        if PyBytes_CheckExact(data):
            return self.feed_raw(PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))
        _get_view(data, &view)
        try:
            return self.feed_raw(<const char*>view.buf, view.len)
        finally:
            PyBuffer_Release(&view)

    # --- scanning ----------------------------------------------------------------------------

    cdef int _fault(self, object error) except -1:
        self.error = error
        return SSE_FAULT

    cdef int next_line(self, const char** data, Py_ssize_t* length) except -1:
        cdef int code = _scan(self, data, length)
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
        if _scan(self, &d, &ln) != SSE_NEED:
            if self.error is not None:
                raise self.error
            raise RuntimeError("finish() called with items still buffered")
        n = self.end - self.start
        if n > self.max_line:
            # Only an undecided BOM prefix (b"\xef\xbb" with max_line 1) gets here: like the
            # pure twin, too long before cut (docs/sse.md, rule MAX-LINE before rule END).
            self.error = LineTooLongError(self.max_line)
            raise self.error
        if n > 0:  # the stream ended inside a line (docs/sse.md, rule END)
            self.error = TruncatedError(
                PyBytes_FromStringAndSize(self.buf + self.start, SHOW_BYTES if n > SHOW_BYTES else n)
            )
            raise self.error
        return 0

    cdef object item_str(self, const char* data, Py_ssize_t length):
        return llf_str(data, length, self.item_ncont, self.item_umax)

    # --- feed: the caller's bytes scanned where they lie ---------------------------------------

    cdef int _drain(self, list items) except -1:
        """Every item in [start, end) into `items`; 1 when it stopped at a (latched) fault."""
        cdef const char* d
        cdef Py_ssize_t ln
        cdef int code
        while True:
            code = _scan(self, &d, &ln)
            if code == SSE_ITEM:
                PyList_Append(items, llf_str(d, ln, self.item_ncont, self.item_umax))
            elif code == SSE_DONE:
                PyList_Append(items, DONE)
            elif code == SSE_NEED:
                return 0
            else:
                return 1

    cdef list _feed(self, const char* data, Py_ssize_t length):
        cdef list items = []
        cdef Py_ssize_t take
        if self.start < self.end:
            # An unfinished line (or an undecided BOM) is buffered: complete it in the buffer,
            # copying only up to the first line end (all of `data` if it has none).
            take = llf_find_eol(data, length)
            take = length if take == length else take + 1
            self.feed_raw(data, take)
            if self._drain(items) or take == length:
                return items
            data += take
            length -= take
            if self.start < self.end:  # (not expected: a line end completes the line)
                self.feed_raw(data, length)
                self._drain(items)
                return items
        if length:
            self._feed_in_place(data, length, items)
        return items

    cdef int _feed_in_place(self, const char* data, Py_ssize_t length, list items) except -1:
        """Scan data[0:length) where it lies (the buffer holds no bytes), then keep only the
        unfinished tail, in the buffer."""
        cdef Py_ssize_t tail, scanned
        cdef int fault
        self.base = data
        self.start = self.scanned = 0
        self.end = length
        try:
            fault = self._drain(items)
        except BaseException:
            self._keep(NULL, 0, 0)  # (MemoryError) never leave `base` at the caller's bytes
            raise
        if fault:
            return self._keep(NULL, 0, 0)
        tail = self.end - self.start
        scanned = self.scanned - self.start  # < tail only before the BOM check has run
        return self._keep(data + self.start, tail, scanned)

    cdef int _keep(self, const char* tail, Py_ssize_t n, Py_ssize_t scanned) except -1:
        """Make the buffer hold `tail[0:n)`, of which `scanned` bytes are already scanned (the
        line's UTF-8 state stays as it is)."""
        self.base = self.buf
        self.start = self.end = self.scanned = 0
        if n:
            self.feed_raw(tail, n)
            self.scanned = scanned
        return 0

    # --- the Python API ----------------------------------------------------------------------

    def feed(self, data):
        """Append `data` (bytes-like); return the items of every line it completes."""
        cdef Py_buffer view
        if self.busy:  # one caller at a time (another thread, a finalizer calling back)
            raise busy_error(self, "feed")
        if not self.ready:
            raise uninitialised_error(self)
        self.busy = True
        try:
            if self.error is not None:
                raise self.error
            if not PyBytes_CheckExact(data):
                # Scanned where they lie only when immutable: another thread may write into a
                # bytearray (recv_into) between its check and the str made from it.
                _get_view(data, &view)
                try:
                    data = PyBytes_FromStringAndSize(<const char*>view.buf, view.len)
                finally:
                    PyBuffer_Release(&view)
            return self._feed(PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))
        finally:
            self.busy = False

    def close(self):
        """End of input: None on a clean end, else TruncatedError (or the latched fault)."""
        if self.busy:
            raise busy_error(self, "close")
        if not self.ready:
            raise uninitialised_error(self)
        self.busy = True
        try:
            self.finish()
        finally:
            self.busy = False
        return None


cdef object _read_error(object err):
    """Map a reader's exception per docs/sse.md, rule READ-ERRORS, or None to let it propagate
    unchanged."""
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


cdef inline Py_ssize_t _count(object got, str method) except -1:
    """What readinto returned, if it is an int in [0, SSE_READ_SIZE]; else check_count raises
    the TypeError / ValueError that says what it was (the message both twins give)."""
    cdef Py_ssize_t n = -1
    if type(got) is int:
        try:
            n = got
        except OverflowError:
            n = -1
        if 0 <= n <= SSE_READ_SIZE:
            return n
    return check_count(got, SSE_READ_SIZE, method)


cdef class BoundReader:
    """A blocking reader bound to a decoder: each `fill` is one read into the decoder's buffer
    (the C-level API in `_sse_c.pxd`; what `Events` and the fused ChatStream read with)."""

    def __init__(self, reader, SseDecoder dec not None):
        self.dec = dec
        self.eof = False
        self.error = None
        for mode, name in enumerate(_MODE_NAMES):
            method = getattr(reader, name, None)
            if callable(method):
                self.mode = mode
                self.method = name
                self.read = method
                break
        else:
            raise TypeError(f"the reader has no read(n) method: {type(reader).__name__}")

    cdef int fill(self) except -1:
        """One read into the decoder; sets `eof` when the reader is at its end."""
        cdef Py_ssize_t n
        cdef object got
        cdef ReadBuffer blk
        if self.error is not None:
            raise self.error
        while True:
            try:
                if self.mode == MODE_READINTO1 or self.mode == MODE_READINTO:
                    self.dec.reserve(SSE_READ_SIZE)
                    # The reader gets a view of the block's free space (a ReadBuffer window),
                    # so whatever it keeps of it keeps that memory alive.
                    blk = self.dec.blk
                    blk.win_off = self.dec.end
                    blk.win_len = SSE_READ_SIZE
                    blk.open = True
                    try:
                        got = self.read(PyMemoryView_FromObject(blk))
                    finally:
                        blk.open = False
                    n = _count(got, self.method)
                    if n == 0:
                        self.eof = True
                    else:
                        self.dec.commit(n)
                    if blk.exports:
                        # The reader kept a view: the unfinished line goes to a block of its
                        # own before any of it is scanned, so nothing the reader writes
                        # through that view later can change bytes already checked.
                        self.dec._move(self.dec.end - self.dec.start)
                else:
                    got = self.read(SSE_READ_SIZE)
                    if got is None:
                        check_chunk(got, self.method)
                    if not got:
                        self.eof = True
                    else:
                        self.dec.append(got)
                return 0
            except InterruptedError:
                continue  # retried
            except BaseException as err:
                mapped = _read_error(err)
                if mapped is None:
                    raise
                self.error = mapped
                raise mapped


cdef class Events:
    """The SSE items of `reader` (anything with readinto1 / read1 / readinto / read)."""

    cdef SseDecoder dec
    cdef BoundReader src
    cdef bint busy  # a call is running: a second one (a thread, the reader) is refused

    def __init__(self, reader, max_line=MAX_LINE):
        if self.busy:
            raise busy_error(self, "__init__")
        self.busy = True  # getattr(reader, ...) may run the reader's code
        try:
            dec = SseDecoder(max_line)
            src = BoundReader(reader, dec)
            self.dec = dec
            self.src = src
        finally:
            self.busy = False

    @property
    def _buffer_size(self):
        """The usable size of the read buffer (for tests of what a long line leaves behind)."""
        return 0 if self.dec is None else self.dec.cap

    cdef object _next(self):
        cdef const char* d
        cdef Py_ssize_t ln
        cdef int code
        if self.busy:
            raise busy_error(self, "next_item")
        if self.src is None:
            raise uninitialised_error(self)
        self.busy = True
        try:
            if self.src.error is not None:
                raise self.src.error
            while True:
                code = self.dec.next_line(&d, &ln)
                if code == SSE_ITEM:
                    return llf_str(d, ln, self.dec.item_ncont, self.dec.item_umax)
                if code == SSE_DONE:
                    return DONE
                if self.src.eof:
                    self.dec.finish()
                    return None
                self.src.fill()
        finally:
            self.busy = False

    cpdef object next_item(self):
        """The next item, or None when the stream ended cleanly between lines (again if asked)."""
        return self._next()

    def __iter__(self):
        return self

    def __next__(self):
        item = self._next()
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
    return AsyncEvents(source, max_line)


cdef class AsyncEvents:
    """What `aiter_events` returns (as the pure twin's): an async iterator, not an async
    generator, so that a cancelled `__anext__` does not end the iteration. The next `__anext__`
    goes on from the source; if the source then ends without having delivered anything since (an
    async generator source ends for good when a read of it is cancelled), that is
    CancelledReadError, never a clean end. Errors are latched."""

    cdef SseDecoder _dec
    cdef object _source
    cdef object _chunks       # the source's async iterator, from the first __anext__ on
    cdef object _error        # latched: the source's exception or the decoder's fault
    cdef list _pending        # items decoded and not handed out, from _pos on
    cdef Py_ssize_t _pos
    cdef bint _busy
    cdef bint _interrupted    # a read was cancelled and nothing arrived since
    cdef bint _closed

    def __cinit__(self, *args, **kwargs):
        self._pending = []

    def __init__(self, source, max_line=MAX_LINE):
        if self._busy:
            raise busy_error(self, "__init__")
        self._dec = SseDecoder(max_line)
        self._source = source
        self._chunks = None
        self._error = None
        self._pending = []
        self._pos = 0
        self._interrupted = self._closed = False

    def __aiter__(self):
        return self

    async def __anext__(self):
        if self._busy:
            raise busy_error(self, "__anext__")
        if self._pos < len(self._pending):
            self._pos += 1
            return self._pending[self._pos - 1]
        if self._dec is None:
            raise uninitialised_error(self)
        self._busy = True
        try:
            while True:
                if self._error is not None:
                    raise self._error
                # After the items that precede it (docs/sse.md, rule LATCH).
                if self._dec.error is not None:
                    self._error = self._dec.error
                    raise self._error
                if self._closed:
                    raise StopAsyncIteration
                if self._chunks is None:
                    self._chunks = self._source.__aiter__()
                try:
                    chunk = await self._chunks.__anext__()
                except StopAsyncIteration:
                    if self._interrupted:
                        self._error = CancelledReadError()
                        raise self._error from None
                    self._dec.close()
                    self._closed = True
                    raise
                except Exception as err:  # the source's own error: latched
                    self._error = err
                    raise
                except BaseException:  # cancelled (or interrupted) while waiting for the source
                    self._interrupted = True
                    raise
                self._interrupted = False
                items = self._dec.feed(chunk)
                if items:
                    self._pending = items
                    self._pos = 1
                    return items[0]
        finally:
            self._busy = False

    async def aclose(self):
        """Stop the iteration (as an async generator's aclose does); the source is left open."""
        self._closed = True
        self._pending = []
        self._pos = 0
