# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: embedsignature=True
# distutils: language = c++
"""The assembler, Cython twin: simdjson's C++ DOM parses each payload, and only the fields the
rules need are read, by walking objects' key/value pairs (a missing key costs nothing, and the
last of duplicate keys wins, as with json.loads). Nothing becomes a dict; event objects are built
by storing straight into their slots (see "building the frozen slotted dataclasses"). Same rules,
same checks in the same order and the same messages as _assemble_py.py (the pure twin decides);
a push is all or nothing there too: state changes are made only once the whole chunk is valid.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF
from cython.operator cimport dereference as deref, preincrement as inc
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcmp, memcpy, memset

from .. import _limits
from .._errors import (
    ProtocolError,
    StreamClosedEarlyError,
    assembler_busy_error,
    cut,
    http_error,
)
from .._partial_json import partial_arguments
from .._strict_json import parse as strict_parse

# The pure twin's public names (the stub, _assemble_c.pyi, declares them for both).
__all__ = ["Assembler"]
from .._values import (
    Completion,
    Content,
    FinishReason,
    Progress,
    Reasoning,
    Timings,
    TokenLogprob,
    ToolCall,
    ToolCallDelta,
    Usage,
)

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object, Py_ssize_t*) except NULL
    object PyType_GenericAlloc(PyTypeObject*, Py_ssize_t)
    str PyUnicode_DecodeUTF8(const char*, Py_ssize_t, const char*)
    ctypedef struct PyMemberDef:
        int type
        Py_ssize_t offset
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member
    PyTypeObject PyMemberDescr_Type
    bint PyObject_TypeCheck(object, PyTypeObject*)
    PyTypeObject* Py_TYPE(PyObject*)

cdef extern from "simdjson.h" namespace "simdjson::dom" nogil:
    cdef cppclass Element "simdjson::dom::element":
        Element()
    cdef cppclass Object "simdjson::dom::object":
        Object()
        cppclass iterator:
            iterator()
            iterator operator++()
            bint operator!=(iterator)
            uint32_t key_length()
            const char* key_c_str()
            Element value()
        iterator begin()
        iterator end()
    cdef cppclass Array "simdjson::dom::array":
        Array()
        cppclass iterator:
            iterator()
            iterator operator++()
            bint operator!=(iterator)
            Element operator*()
        iterator begin()
        iterator end()

# Non-throwing access to simdjson (its error codes, not C++ exceptions: a missing key or a
# wrong type never goes through a throw). The element's type is checked before each get.
cdef extern from *:
    """
    #include "simdjson.h"
    static inline void* lf_new_parser(size_t max_depth) {
        simdjson::dom::parser* p = new (std::nothrow) simdjson::dom::parser();
        if (p && p->allocate(4096, max_depth) != simdjson::SUCCESS) { delete p; p = nullptr; }
        return p;
    }
    static inline void lf_delete_parser(void* p) {
        delete static_cast<simdjson::dom::parser*>(p);
    }
    static inline int lf_parse(void* p, const char* buf, size_t n, simdjson::dom::element* out) {
        return (int)static_cast<simdjson::dom::parser*>(p)->parse(buf, n, false).get(*out);
    }
    static inline const char* lf_error_message(int code) {
        return simdjson::error_message((simdjson::error_code)code);
    }
    static inline char lf_type(const simdjson::dom::element& e) { return (char)e.type(); }
    static inline simdjson::dom::object lf_obj(const simdjson::dom::element& e) {
        simdjson::dom::object o; if (e.get(o)) {} return o;
    }
    static inline simdjson::dom::array lf_arr(const simdjson::dom::element& e) {
        simdjson::dom::array a; if (e.get(a)) {} return a;
    }
    static inline const char* lf_str(const simdjson::dom::element& e, size_t* n) {
        std::string_view s; if (e.get(s)) {} *n = s.size(); return s.data();
    }
    static inline int64_t lf_i64(const simdjson::dom::element& e) {
        int64_t v = 0; if (e.get(v)) {} return v;
    }
    static inline uint64_t lf_u64(const simdjson::dom::element& e) {
        uint64_t v = 0; if (e.get(v)) {} return v;
    }
    static inline double lf_f64(const simdjson::dom::element& e) {
        double v = 0; if (e.get(v)) {} return v;
    }
    """
    void* lf_new_parser(size_t max_depth)
    void lf_delete_parser(void* p)
    int lf_parse(void* p, const char* buf, size_t n, Element* out)
    const char* lf_error_message(int code)
    char lf_type(const Element& e)
    Object lf_obj(const Element& e)
    Array lf_arr(const Element& e)
    const char* lf_str(const Element& e, size_t* n)
    int64_t lf_i64(const Element& e)
    uint64_t lf_u64(const Element& e)
    double lf_f64(const Element& e)
    const size_t SIMDJSON_PADDING "simdjson::SIMDJSON_PADDING"
    const int DEPTH_ERROR "simdjson::DEPTH_ERROR"

# simdjson::dom::element_type values
cdef enum:
    T_ARRAY = 0x5b      # '['
    T_OBJECT = 0x7b     # '{'
    T_INT64 = 0x6c      # 'l'
    T_UINT64 = 0x75     # 'u'
    T_DOUBLE = 0x64     # 'd'
    T_STRING = 0x22     # '"'
    T_BOOL = 0x74       # 't'
    T_NULL = 0x6e       # 'n'

# The nesting limit both twins enforce (objects and arrays, the payload's own object counting as
# 1): deeper is a ProtocolError; the pure twin checks this number exactly. A parser allocated for
# depth N rejects N non-empty levels (its level 0 is the document) and does not count an empty
# [] or {} as a level, so it cannot say "at most MAX_DEPTH" alone. The hot parser is allocated
# for MAX_DEPTH: all it accepts is at most MAX_DEPTH deep. What it rejects for depth is asked of
# the pure twin's strict parser, and what that accepts (exactly MAX_DEPTH deep) is parsed again
# by a parser allocated for MAX_DEPTH + 1, on that cold path only. The number is _limits'.
cdef size_t MAX_DEPTH = _limits.MAX_DEPTH

cdef inline bint _key(Object.iterator& it, const char* name, uint32_t n) noexcept:
    return it.key_length() == n and memcmp(it.key_c_str(), name, n) == 0


cdef inline str _mkstr(const Element& e):
    cdef size_t n
    cdef const char* p = lf_str(e, &n)
    return PyUnicode_DecodeUTF8(p, <Py_ssize_t>n, NULL)


cdef str _kind(const Element& e):
    """The JSON kind of a value, for messages; the same words as the pure twin's."""
    cdef char t = lf_type(e)
    if t == T_OBJECT:
        return "an object"
    if t == T_ARRAY:
        return "an array"
    if t == T_STRING:
        return "a string"
    if t == T_INT64 or t == T_UINT64:
        return "an integer"
    if t == T_DOUBLE:
        return "a number"
    if t == T_BOOL:
        return "a boolean"
    return "null"


# --- building the frozen slotted dataclasses -------------------------------------------------
# Content(text) through the dataclass __init__ costs ~0.55 us (three Python-level calls and
# object.__setattr__ per field), as much as parsing the chunk. An identical object is allocated
# the way object.__new__ does it (the type's tp_alloc, PyType_GenericAlloc for these classes)
# and its slots are filled by the offsets their member descriptors publish; a class that is not
# laid out like that (no slots, a different member type) falls back to calling the class.

cdef Py_ssize_t[2] _OFF_CONTENT
cdef Py_ssize_t _OFF_REASONING_TEXT = -1
cdef Py_ssize_t[3] _OFF_PROGRESS
cdef Py_ssize_t[4] _OFF_DELTA
cdef PyTypeObject* _TP_CONTENT = <PyTypeObject*>Content
cdef PyTypeObject* _TP_REASONING = <PyTypeObject*>Reasoning
cdef PyTypeObject* _TP_PROGRESS = <PyTypeObject*>Progress
cdef PyTypeObject* _TP_TOOLCALLDELTA = <PyTypeObject*>ToolCallDelta
cdef bint _FAST_CONTENT = False
cdef bint _FAST_REASONING = False
cdef bint _FAST_PROGRESS = False
cdef bint _FAST_DELTA = False
# The stream's end builds a Completion and its Timings the same way (~3 us through __init__,
# a twentieth of a short request's whole cost).
cdef Py_ssize_t[11] _OFF_COMPLETION
cdef Py_ssize_t[5] _OFF_TIMINGS
cdef PyTypeObject* _TP_COMPLETION = <PyTypeObject*>Completion
cdef PyTypeObject* _TP_TIMINGS = <PyTypeObject*>Timings
cdef bint _FAST_COMPLETION = False
cdef bint _FAST_TIMINGS = False


cdef Py_ssize_t _slot_offset(object cls, str name):
    """The byte offset of slot `name` of `cls`, or -1 when it is not a plain object slot."""
    if "__slots__" not in cls.__dict__ or type(cls).__new__ is not type.__new__:
        return -1
    if getattr(cls, "__new__") is not object.__new__ or getattr(cls, "__post_init__", None):
        return -1
    d = cls.__dict__.get(name)
    if d is None or not PyObject_TypeCheck(d, &PyMemberDescr_Type):
        return -1
    cdef PyMemberDef* m = (<PyMemberDescrObject*><PyObject*>d).d_member
    if m.type != 16:  # T_OBJECT_EX
        return -1
    return m.offset


cdef bint _offsets(object cls, tuple names, Py_ssize_t* out):
    cdef Py_ssize_t i
    for i in range(len(names)):
        out[i] = _slot_offset(cls, names[i])
        if out[i] < 0:
            return False
    return True


cdef inline void _put(object obj, Py_ssize_t off, object value) noexcept:
    Py_INCREF(value)
    (<PyObject**>((<char*><PyObject*>obj) + off))[0] = <PyObject*>value


cdef tuple _NO_LOGPROBS = ()


cdef inline object _content(str text, tuple logprobs):
    if not _FAST_CONTENT:
        return Content(text, logprobs)
    obj = PyType_GenericAlloc(_TP_CONTENT, 0)
    _put(obj, _OFF_CONTENT[0], text)
    _put(obj, _OFF_CONTENT[1], logprobs)
    return obj


cdef inline object _reasoning(str text):
    if not _FAST_REASONING:
        return Reasoning(text)
    obj = PyType_GenericAlloc(_TP_REASONING, 0)
    _put(obj, _OFF_REASONING_TEXT, text)
    return obj


cdef inline object _progress(object total, object cache, object processed):
    if not _FAST_PROGRESS:
        return Progress(total, cache, processed)
    obj = PyType_GenericAlloc(_TP_PROGRESS, 0)
    _put(obj, _OFF_PROGRESS[0], total)
    _put(obj, _OFF_PROGRESS[1], cache)
    _put(obj, _OFF_PROGRESS[2], processed)
    return obj


cdef inline object _new_delta(object index, object id_, object name, object arguments):
    if not _FAST_DELTA:
        return ToolCallDelta(index, id_, name, arguments)
    obj = PyType_GenericAlloc(_TP_TOOLCALLDELTA, 0)
    _put(obj, _OFF_DELTA[0], index)
    _put(obj, _OFF_DELTA[1], id_)
    _put(obj, _OFF_DELTA[2], name)
    _put(obj, _OFF_DELTA[3], arguments)
    return obj


cdef object _filled(PyTypeObject* tp, Py_ssize_t* offsets, tuple values):
    """An object of `tp` whose slots (at `offsets`) hold `values`, one each, in order."""
    cdef Py_ssize_t i
    obj = PyType_GenericAlloc(tp, 0)
    for i in range(len(values)):
        _put(obj, offsets[i], values[i])
    return obj


cdef inline object _timings(tuple values):
    if not _FAST_TIMINGS or len(values) != 5:
        return Timings(*values)
    return _filled(_TP_TIMINGS, _OFF_TIMINGS, values)


cdef inline object _completion(tuple values):
    if not _FAST_COMPLETION or len(values) != 11:
        return Completion(*values)
    return _filled(_TP_COMPLETION, _OFF_COMPLETION, values)


def _init_fast_paths():
    global _FAST_CONTENT, _FAST_REASONING, _FAST_PROGRESS, _FAST_DELTA
    global _FAST_COMPLETION, _FAST_TIMINGS
    global _OFF_REASONING_TEXT
    names = ("text", "logprobs")
    _FAST_CONTENT = _offsets(Content, names, _OFF_CONTENT) and Content.__slots__ == names
    _OFF_REASONING_TEXT = _slot_offset(Reasoning, "text")
    _FAST_REASONING = _OFF_REASONING_TEXT >= 0 and Reasoning.__slots__ == ("text",)
    names = ("total", "cache", "processed")
    _FAST_PROGRESS = _offsets(Progress, names, _OFF_PROGRESS) and Progress.__slots__ == names
    names = ("index", "id", "name", "arguments")
    _FAST_DELTA = _offsets(ToolCallDelta, names, _OFF_DELTA) and ToolCallDelta.__slots__ == names
    names = ("cache_n", "prompt_n", "predicted_n", "prompt_ms", "predicted_ms")
    _FAST_TIMINGS = _offsets(Timings, names, _OFF_TIMINGS) and Timings.__slots__ == names
    names = (
        "id", "content", "reasoning_content", "tool_calls", "finish_reason", "timings",
        "reasoning_tokens", "thinking_capped", "model", "usage", "logprobs",
    )
    _FAST_COMPLETION = (
        _offsets(Completion, names, _OFF_COMPLETION) and Completion.__slots__ == names
    )
    return (
        _FAST_CONTENT, _FAST_REASONING, _FAST_PROGRESS, _FAST_DELTA, _FAST_TIMINGS,
        _FAST_COMPLETION,
    )


FAST_EVENTS = _init_fast_paths()

PADDING = SIMDJSON_PADDING
"""push_raw(..., padded=True) needs this many readable bytes after the payload."""


def _build_event(cls, args):
    """The fast construction path, exposed for the tests that compare it with cls(*args)."""
    if cls is Content:
        return _content(args[0], args[1])
    if cls is Reasoning:
        return _reasoning(args[0])
    if cls is Progress:
        return _progress(args[0], args[1], args[2])
    if cls is ToolCallDelta:
        return _new_delta(args[0], args[1], args[2], args[3])
    if cls is Timings:
        return _timings(tuple(args))
    if cls is Completion:
        return _completion(tuple(args))
    raise TypeError(cls)


cdef dict _FINISH = {
    "stop": FinishReason.STOP,
    "tool_calls": FinishReason.TOOL_CALLS,
    "length": FinishReason.LENGTH,
}

cdef class Assembler:
    """Folds streamed chunks into a Completion, following the rules of docs/assembler.md."""

    # Every field is set here (the TextBufs and counts are zeroed by the allocation), so an
    # Assembler made by `Assembler.__new__(Assembler)`, or by a subclass whose __init__ skips
    # super().__init__(), is a working, empty one, as in the pure twin.
    def __cinit__(self):
        self._pad = NULL
        self._pad_cap = 0
        self._id = None
        self._calls = []
        self._finish_reason = None
        self._busy = False
        self._partials = {}
        self._parser = NULL  # made only when the shared one is busy (see _push)
        self._model = None
        self._usage = None
        self._logprobs = []

    def __init__(self):
        pass

    def __dealloc__(self):
        if self._parser != NULL:
            lf_delete_parser(self._parser)
        free(self._pad)
        free(self._content.data)
        free(self._reasoning.data)

    @property
    def id(self):
        return self._id

    @property
    def reasoning_tokens(self):
        return self._reasoning_tokens

    @property
    def in_reasoning(self):
        return self._in_reasoning

    @property
    def is_finished(self):
        return self._finish_reason is not None

    def partial_arguments(self, index):
        """The arguments of tool call `index` parsed so far (as the pure twin's, which it
        shares: the parse reads each new piece once, and is no hot path worth a C twin)."""
        if self._busy:  # one caller at a time, as in push_into: it reads what push folds
            raise assembler_busy_error(self, "partial_arguments")
        self._busy = True
        try:
            return partial_arguments(
                self._partials, self._calls, index, self._finish_reason is not None
            )
        finally:
            self._busy = False

    def push(self, data):
        """One `data:` payload (str or UTF-8 bytes): the events it stands for, in order."""
        cdef Py_ssize_t n
        cdef const char* p
        if self._busy:  # refused before the payload is looked at, as in the pure twin
            raise assembler_busy_error(self, "push")
        if type(data) is bytes:
            events = []
            self.push_into(PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), data, False, events)
            return events
        if type(data) is str:
            try:
                p = PyUnicode_AsUTF8AndSize(data, &n)
            except UnicodeEncodeError:  # a lone surrogate: no valid JSON text holds one
                raise ProtocolError(f"the chunk is not valid JSON (a lone surrogate): {cut(data)}")
            events = []
            self.push_into(p, n, data, False, events)
            return events
        if isinstance(data, bytes):
            return self.push(bytes(data))
        if isinstance(data, str):
            return self.push(str(data))
        raise TypeError(f"push takes str or bytes, not {type(data).__name__}")

    cdef int push_into(
        self, const char* data, Py_ssize_t n, object src, bint padded, list out
    ) except -1:
        # One caller at a time: a push that starts while another runs (another thread while
        # this one waits for the GIL, a finalizer or any code that runs when an object is made)
        # would reuse the parser whose document the first one is reading, and the text buffers
        # it writes past their committed length. It is refused, and the first goes on. The
        # flag is read and set with the GIL held and no Python code in between.
        if self._busy:
            raise assembler_busy_error(self, "push")
        self._busy = True
        try:
            return _push(self, data, n, src, padded, out)
        finally:
            self._busy = False

    def finish(self, thinking_capped=False):
        """The Completion (docs/assembler.md, rule FINISH): StreamClosedEarlyError without a
        finish_reason, ProtocolError without an id or with a tool call that never got an id or a
        name."""
        if self._busy:  # one caller at a time, as in push_into
            raise assembler_busy_error(self, "finish")
        self._busy = True
        try:
            return _finish(self, thinking_capped)
        finally:
            self._busy = False


# simdjson's parser keeps the capacity of the largest document it has parsed, and the padded
# copy keeps its largest size: after a payload longer than this, both go back to their normal
# size, so one huge chunk does not cost its size for as long as the stream lives. Payloads are
# a few hundred bytes; this is the default max_line, so only a rare payload pays the shrink.
cdef Py_ssize_t RETAIN = 1 << 20


# One simdjson parser serves every Assembler of the process: a parse runs with the GIL held
# from start to end, so one at a time is the rule, and many streams read in turn (an event
# loop's) keep one parser's buffers in the cache instead of one per stream. A push that starts
# while the shared parser's document is still being read (a finalizer, or a thread that got
# the GIL while one ran, calling another Assembler) takes that Assembler's own parser.
cdef void* _shared_parser = NULL
cdef bint _shared_busy = False


cdef int _push(
    Assembler self, const char* data, Py_ssize_t n, object src, bint padded, list out
) except -1:
    global _shared_busy
    cdef bint shared = not _shared_busy
    cdef void** slot = &_shared_parser if shared else &self._parser
    if slot[0] == NULL:  # the first push, or shrunk after a huge payload
        slot[0] = lf_new_parser(MAX_DEPTH)
        if slot[0] == NULL:
            raise MemoryError()
    _shared_busy = True
    try:
        return _parse_fold(self, slot[0], data, n, src, padded, out)
    finally:  # the events hold copies: nothing points into the parser's document any more
        if shared:
            _shared_busy = False
        if n > RETAIN:
            lf_delete_parser(slot[0])
            slot[0] = NULL
            if self._pad_cap > RETAIN:
                free(self._pad)
                self._pad = NULL
                self._pad_cap = 0


cdef int _parse_fold(
    Assembler self, void* parser, const char* data, Py_ssize_t n, object src, bint padded,
    list out
) except -1:
    cdef Element root
    cdef int err
    cdef size_t need = <size_t>n + SIMDJSON_PADDING
    cdef const char* buf = data
    if not padded:  # simdjson reads up to SIMDJSON_PADDING bytes past the end: copy
        if need > self._pad_cap:
            free(self._pad)
            self._pad_cap = 0
            self._pad = <char*>malloc(need if need > 4096 else 4096)
            if self._pad == NULL:
                raise MemoryError()
            self._pad_cap = need if need > 4096 else 4096
            memset(self._pad, 0, self._pad_cap)
        memcpy(self._pad, data, n)
        buf = self._pad
    if n >= 3 and memcmp(data, b"\xef\xbb\xbf", 3) == 0:
        # simdjson skips a leading byte order mark; the pure twin's json rejects it
        raise _parse_fault(data, n, src, -1)
    err = lf_parse(parser, buf, <size_t>n, &root)
    if err == DEPTH_ERROR:
        return _push_deep(self, buf, data, n, src, out)
    if err != 0:
        raise _parse_fault(data, n, src, err)
    return _fold(self, root, data, n, src, out)


# The hot loop of one chunk, kept in one function (a call per part would cost every chunk). Its
# phases, in order: the top-level keys walked once, each value kept as an Element; the chunk
# checked (error, choices, id, model, timings, usage) and its progress event made, in the pure
# twin's order; the choices walked (the pure twin's _choices), each delta by _delta; and, once
# all of it is valid, the commit. Until the commit the state is untouched: new text is written
# past each buffer's .len, and the other changes wait in locals.
cdef int _fold(
    Assembler self, Element& root, const char* data, Py_ssize_t n, object src, list events
) except -1:
    cdef Object obj
    cdef Object.iterator it, end
    cdef Element e_error, e_choices, e_id, e_timings, e_progress, e_c, e_p, e_d, e_pm, e_dm
    cdef Element e_model, e_usage
    cdef bint has_error = False, has_choices = False, has_id = False
    cdef bint has_model = False, has_usage = False
    cdef bint has_c, has_p, has_d, has_pm, has_dm
    cdef double prompt_ms, predicted_ms
    cdef bint has_timings = False, has_progress = False
    cdef long long cache_n, prompt_n, predicted_n
    cdef long long p_total = 0, p_cache = 0, p_processed = 0
    cdef Py_ssize_t content_len = self._content.len    # text is written past .len, and
    cdef Py_ssize_t reasoning_len = self._reasoning.len  # .len moves only once all is valid
    cdef long long reasoning_tokens = self._reasoning_tokens
    cdef bint in_reasoning = self._in_reasoning
    cdef size_t slen
    cdef uint32_t kl
    cdef const char* kp

    if lf_type(root) != T_OBJECT:
        raise _bad(data, n, src, f"the chunk is {_kind(root)}, not a JSON object")
    obj = lf_obj(root)
    it = obj.begin()
    end = obj.end()
    while it != end:
        kl = it.key_length()
        if kl == 7:
            if _key(it, "choices", 7):
                e_choices = it.value()
                has_choices = True
            elif _key(it, "timings", 7):
                e_timings = it.value()
                has_timings = True
        elif kl == 2:
            if _key(it, "id", 2):
                e_id = it.value()
                has_id = True
        elif kl == 15:
            if _key(it, "prompt_progress", 15):
                e_progress = it.value()
                has_progress = True
        elif kl == 5:
            if _key(it, "model", 5):
                e_model = it.value()
                has_model = True
            elif _key(it, "usage", 5):
                e_usage = it.value()
                has_usage = True
            elif _key(it, "error", 5):
                e_error = it.value()
                has_error = True
        inc(it)

    # An error object mid-stream is the server's failure (docs/assembler.md, rule SERVER-ERROR)
    if has_error and lf_type(e_error) == T_OBJECT:
        raise http_error(_error_status(e_error), _text(data, n, src))

    if not has_choices:
        raise _bad(data, n, src, 'the chunk has no "choices"')
    if lf_type(e_choices) != T_ARRAY:
        raise _bad(data, n, src, f'"choices" is {_kind(e_choices)}, not an array')

    new_id = None
    if has_id:
        if lf_type(e_id) != T_STRING:
            raise _bad(data, n, src, f'"id" is {_kind(e_id)}, not a string')
        if self._id is None:
            new_id = _mkstr(e_id)

    new_model = None  # docs/assembler.md, rule MODEL
    if has_model:
        if lf_type(e_model) != T_STRING:
            raise _bad(data, n, src, f'"model" is {_kind(e_model)}, not a string')
        if self._model is None:
            new_model = _mkstr(e_model)

    cache_n = self._cache_n
    prompt_n = self._prompt_n
    predicted_n = self._predicted_n
    prompt_ms = self._prompt_ms
    predicted_ms = self._predicted_ms
    if has_timings:
        if lf_type(e_timings) != T_OBJECT:
            raise _bad(data, n, src, f'"timings" is {_kind(e_timings)}, not an object')
        # walked first, checked after (the last of duplicate keys wins), in the pure order
        has_c = has_p = has_d = has_pm = has_dm = False
        obj = lf_obj(e_timings)
        it = obj.begin()
        end = obj.end()
        while it != end:
            kl = it.key_length()
            if kl == 7 and _key(it, "cache_n", 7):
                e_c = it.value()
                has_c = True
            elif kl == 8 and _key(it, "prompt_n", 8):
                e_p = it.value()
                has_p = True
            elif kl == 11 and _key(it, "predicted_n", 11):
                e_d = it.value()
                has_d = True
            elif kl == 9 and _key(it, "prompt_ms", 9):
                e_pm = it.value()
                has_pm = True
            elif kl == 12 and _key(it, "predicted_ms", 12):
                e_dm = it.value()
                has_dm = True
            inc(it)
        cache_n = _count(e_c, "timings.cache_n", data, n, src) if has_c else 0
        prompt_n = _count(e_p, "timings.prompt_n", data, n, src) if has_p else 0
        predicted_n = _count(e_d, "timings.predicted_n", data, n, src) if has_d else 0
        prompt_ms = _millis(e_pm, "timings.prompt_ms", data, n, src) if has_pm else 0.0
        predicted_ms = _millis(e_dm, "timings.predicted_ms", data, n, src) if has_dm else 0.0

    new_usage = None  # docs/assembler.md, rule USAGE
    if has_usage and lf_type(e_usage) != T_NULL:
        new_usage = _usage(e_usage, data, n, src)

    cdef Py_ssize_t start = len(events)
    if has_progress:
        _progress_counts(e_progress, &p_total, &p_cache, &p_processed, data, n, src)
        events.append(_progress(p_total, p_cache, p_processed))

    # The choices; state changes are kept aside and made only once the whole chunk is valid.
    cdef Array choices = lf_arr(e_choices)
    cdef Array.iterator ci = choices.begin()
    cdef Array.iterator cend = choices.end()
    cdef Element choice, delta, e_finish, e_logprobs
    cdef bint has_delta, has_finish, has_logprobs
    cdef tuple logprobs
    cdef list logprobs_kept = None  # the Content events' logprobs, kept once all is valid
    cdef Py_ssize_t ncalls = len(self._calls)
    finish_reason = self._finish_reason
    while ci != cend:
        choice = deref(ci)
        inc(ci)
        if lf_type(choice) != T_OBJECT:
            raise _bad(data, n, src, f"a choice is {_kind(choice)}, not an object")
        has_delta = has_finish = has_logprobs = False
        obj = lf_obj(choice)
        it = obj.begin()
        end = obj.end()
        while it != end:
            kl = it.key_length()
            if kl == 5 and _key(it, "delta", 5):
                delta = it.value()
                has_delta = True
            elif kl == 13 and _key(it, "finish_reason", 13):
                e_finish = it.value()
                has_finish = True
            elif kl == 8 and _key(it, "logprobs", 8):
                e_logprobs = it.value()
                has_logprobs = True
            inc(it)
        if has_finish and lf_type(e_finish) != T_NULL:
            if lf_type(e_finish) != T_STRING:
                raise _bad(data, n, src, f'"finish_reason" is {_kind(e_finish)}, not a string')
            reason = _FINISH.get(_mkstr(e_finish))
            if reason is None:
                raise _bad(
                    data, n, src, f'unknown "finish_reason" {_mkstr(e_finish)!r}'
                )
            finish_reason = reason
        # checked whatever the delta holds; kept on its Content (docs/assembler.md,
        # rule LOGPROBS)
        logprobs = None
        if has_logprobs and lf_type(e_logprobs) != T_NULL:
            logprobs = _logprobs(e_logprobs, data, n, src)
            if logprobs is not None and logprobs_kept is None:
                logprobs_kept = []
        if not has_delta or lf_type(delta) == T_NULL:
            continue
        if lf_type(delta) != T_OBJECT:
            raise _bad(data, n, src, f'"delta" is {_kind(delta)}, not an object')
        ncalls = _delta(self,
            delta, events, &in_reasoning, &reasoning_tokens, predicted_n, ncalls,
            &content_len, &reasoning_len, data, n, src, logprobs, logprobs_kept
        )

    # commit
    if new_id is not None:
        self._id = new_id
    if new_model is not None:
        self._model = new_model
    if new_usage is not None:
        self._usage = new_usage
    if logprobs_kept:
        self._logprobs.extend(logprobs_kept)
    self._cache_n = cache_n
    self._prompt_n = prompt_n
    self._predicted_n = predicted_n
    self._prompt_ms = prompt_ms
    self._predicted_ms = predicted_ms
    self._reasoning_tokens = reasoning_tokens
    self._in_reasoning = in_reasoning
    self._content.len = content_len
    self._reasoning.len = reasoning_len
    self._finish_reason = finish_reason
    _commit(self, events, start)
    return 0

# The hot loop of one delta, part of _fold's: its keys walked once (content, reasoning_content,
# tool_calls kept as Elements), then handled in the pure twin's order: the reasoning text (it
# sets the reasoning state and count), the answer text (it ends the reasoning state), the tool
# calls (_tool_calls; a piece ends the reasoning state). It writes only past the buffers' .len
# and into _fold's locals through their pointers: the commit stays _fold's.
cdef Py_ssize_t _delta(
    Assembler self, Element& delta, list events, bint* in_reasoning, long long* reasoning_tokens,
    long long predicted_n, Py_ssize_t ncalls, Py_ssize_t* content_len, Py_ssize_t* reasoning_len,
    const char* data, Py_ssize_t n, object src, tuple logprobs, list logprobs_kept,
) except -1:
    cdef Object obj = lf_obj(delta)
    cdef Object.iterator it = obj.begin()
    cdef Object.iterator end = obj.end()
    cdef Element e_content, e_reasoning, e_calls
    cdef bint has_content = False, has_reasoning = False, has_calls = False
    cdef uint32_t kl
    cdef size_t slen
    cdef const char* p
    cdef Py_ssize_t before
    while it != end:
        kl = it.key_length()
        if kl == 7 and _key(it, "content", 7):
            e_content = it.value()
            has_content = True
        elif kl == 17 and _key(it, "reasoning_content", 17):
            e_reasoning = it.value()
            has_reasoning = True
        elif kl == 10 and _key(it, "tool_calls", 10):
            e_calls = it.value()
            has_calls = True
        inc(it)
    if has_reasoning and lf_type(e_reasoning) != T_NULL:
        if lf_type(e_reasoning) != T_STRING:
            raise _bad(
                data, n, src, f'"reasoning_content" is {_kind(e_reasoning)}, not a string'
            )
        p = lf_str(e_reasoning, &slen)
        if slen:
            events.append(_reasoning(PyUnicode_DecodeUTF8(p, slen, NULL)))
            _put_text(&self._reasoning, reasoning_len, p, slen)
            # timings were updated first (docs/assembler.md, rule REASONING-TOKENS)
            reasoning_tokens[0] = predicted_n
            in_reasoning[0] = True
    if has_content and lf_type(e_content) != T_NULL:
        if lf_type(e_content) != T_STRING:
            raise _bad(data, n, src, f'"content" is {_kind(e_content)}, not a string')
        p = lf_str(e_content, &slen)
        if slen:
            if logprobs is None:
                events.append(_content(PyUnicode_DecodeUTF8(p, slen, NULL), _NO_LOGPROBS))
            else:
                events.append(_content(PyUnicode_DecodeUTF8(p, slen, NULL), logprobs))
                logprobs_kept.extend(logprobs)
            _put_text(&self._content, content_len, p, slen)
            in_reasoning[0] = False
    if has_calls and lf_type(e_calls) != T_NULL:
        if lf_type(e_calls) != T_ARRAY:
            raise _bad(data, n, src, f'"tool_calls" is {_kind(e_calls)}, not an array')
        before = PyList_GET_SIZE(events)
        ncalls = _tool_calls(self, e_calls, events, ncalls, data, n, src)
        # after a tool-call piece (docs/assembler.md, rule IN-REASONING)
        if PyList_GET_SIZE(events) > before:
            in_reasoning[0] = False
    return ncalls

# A hot loop over a delta's tool_calls entries: for each, its keys walked once (index, id,
# function), then checked in the pure twin's order (index present, an integer, not negative,
# not past the calls so far; id a string; function an object with a string name and a string
# arguments), then its ToolCallDelta appended; `ncalls` grows when an entry starts a new call.
cdef Py_ssize_t _tool_calls(
    Assembler self, Element& calls, list events, Py_ssize_t ncalls, const char* data, Py_ssize_t n, object src,
) except -1:
    cdef Array arr = lf_arr(calls)
    cdef Array.iterator ai = arr.begin()
    cdef Array.iterator aend = arr.end()
    cdef Element entry, e_index, e_id, e_function, e_name, e_args
    cdef bint has_index, has_id, has_function, has_name, has_args
    cdef Object obj
    cdef Object.iterator it, end
    cdef uint32_t kl
    cdef char t
    cdef int64_t index
    while ai != aend:
        entry = deref(ai)
        inc(ai)
        if lf_type(entry) != T_OBJECT:
            raise _bad(data, n, src, f"a tool call is {_kind(entry)}, not an object")
        has_index = has_id = has_function = has_name = has_args = False
        obj = lf_obj(entry)
        it = obj.begin()
        end = obj.end()
        while it != end:
            kl = it.key_length()
            if kl == 5 and _key(it, "index", 5):
                e_index = it.value()
                has_index = True
            elif kl == 2 and _key(it, "id", 2):
                e_id = it.value()
                has_id = True
            elif kl == 8 and _key(it, "function", 8):
                e_function = it.value()
                has_function = True
            inc(it)
        if not has_index:
            raise _bad(data, n, src, 'a tool call has no "index"')
        t = lf_type(e_index)
        if t == T_INT64:
            index = lf_i64(e_index)
            if index < 0:
                raise _bad(data, n, src, f'tool call "index" {index} is negative')
            if index > ncalls:
                raise _bad(
                    data, n, src,
                    f'tool call "index" {index} skips ahead: only {ncalls} calls so far',
                )
        elif t == T_UINT64:
            raise _bad(
                data, n, src,
                f'tool call "index" {lf_u64(e_index)} skips ahead: only {ncalls} calls so far',
            )
        else:
            raise _bad(
                data, n, src, f'tool call "index" is {_kind(e_index)}, not an integer'
            )
        id_ = None
        if has_id and lf_type(e_id) != T_NULL:
            if lf_type(e_id) != T_STRING:
                raise _bad(data, n, src, f'tool call "id" is {_kind(e_id)}, not a string')
            id_ = _mkstr(e_id)
        name = None
        arguments = ""
        if has_function and lf_type(e_function) != T_NULL:
            if lf_type(e_function) != T_OBJECT:
                raise _bad(
                    data, n, src, f'tool call "function" is {_kind(e_function)}, not an object'
                )
            obj = lf_obj(e_function)
            it = obj.begin()
            end = obj.end()
            while it != end:
                kl = it.key_length()
                if kl == 4 and _key(it, "name", 4):
                    e_name = it.value()
                    has_name = True
                elif kl == 9 and _key(it, "arguments", 9):
                    e_args = it.value()
                    has_args = True
                inc(it)
            if has_name and lf_type(e_name) != T_NULL:
                if lf_type(e_name) != T_STRING:
                    raise _bad(
                        data, n, src, f'tool call "name" is {_kind(e_name)}, not a string'
                    )
                name = _mkstr(e_name)
            if has_args and lf_type(e_args) != T_NULL:
                if lf_type(e_args) != T_STRING:
                    raise _bad(
                        data, n, src,
                        f'tool call "arguments" is {_kind(e_args)}, not a string',
                    )
                arguments = _mkstr(e_args)
        events.append(_new_delta(index, id_, name, arguments))
        if index == ncalls:
            ncalls += 1
    return ncalls

cdef int _commit(Assembler self, list events, Py_ssize_t start) except -1:
    """Folds a valid chunk's tool-call pieces into the state (docs/assembler.md, rule CALLS): its
    events are events[start:]. (Its text went into the TextBufs as it was read.)"""
    cdef Py_ssize_t i, index
    cdef PyObject* ev
    cdef PyTypeObject* t
    for i in range(start, PyList_GET_SIZE(events)):
        ev = PyList_GET_ITEM(events, i)
        t = Py_TYPE(ev)
        if t == _TP_TOOLCALLDELTA:
            d = <object>ev
            index = d.index
            if index == len(self._calls):
                self._calls.append([d.id, d.name, [d.arguments]])
            else:
                call = self._calls[index]
                if call[0] is None:
                    call[0] = d.id
                if call[1] is None:
                    call[1] = d.name
                call[2].append(d.arguments)
    return 0


cdef object _finish(Assembler self, object thinking_capped):
    if self._finish_reason is None:
        raise StreamClosedEarlyError()
    if self._id is None:
        raise ProtocolError("the stream finished but no chunk carried an id")
    calls = []
    for i, (id_, name, args) in enumerate(self._calls):
        if id_ is None:
            raise ProtocolError(f"tool call {i} never got an id")
        if name is None:
            raise ProtocolError(f"tool call {i} never got a name")
        calls.append(ToolCall(id_, name, "".join(args)))
    return _completion((
        self._id,
        _decode(&self._content),
        _decode(&self._reasoning),
        tuple(calls),
        self._finish_reason,
        _timings((
            self._cache_n, self._prompt_n, self._predicted_n, self._prompt_ms, self._predicted_ms
        )),
        self._reasoning_tokens,
        thinking_capped,
        self._model,
        self._usage,
        tuple(self._logprobs),
    ))

cdef int _put_text(TextBuf* buf, Py_ssize_t* at, const char* p, size_t n) except -1:
    """Writes n bytes at buf.data + *at (past the committed buf.len), growing the buffer."""
    cdef Py_ssize_t need = at[0] + <Py_ssize_t>n
    cdef Py_ssize_t cap
    cdef char* grown
    if need > buf.cap:
        cap = buf.cap * 2 if buf.cap else 1024
        while cap < need:
            cap *= 2
        grown = <char*>realloc(buf.data, cap)
        if grown == NULL:
            raise MemoryError()
        buf.data = grown
        buf.cap = cap
    memcpy(buf.data + at[0], p, n)
    at[0] = need
    return 0


cdef object _decode(TextBuf* buf):
    """The concatenated text, or None if there never was any (docs/assembler.md, rule TEXT)."""
    if buf.len == 0:
        return None
    return PyUnicode_DecodeUTF8(buf.data, buf.len, NULL)


cdef object _error_status(Element& error):
    """error.code when it is an integer, else 500 (the last "code" wins, as in json.loads)."""
    cdef Object obj = lf_obj(error)
    cdef Object.iterator it = obj.begin()
    cdef Object.iterator end = obj.end()
    cdef Element code
    cdef bint has = False
    while it != end:
        if _key(it, "code", 4):
            code = it.value()
            has = True
        inc(it)
    if has:
        if lf_type(code) == T_INT64:
            return lf_i64(code)
        if lf_type(code) == T_UINT64:
            return lf_u64(code)
    return 500


cdef inline long long _count(
    const Element& e, const char* what, const char* data, Py_ssize_t n, object src
) except -1:
    """A count: an integer (not bool, not float) with 0 <= value <= 2**63-1; `what` names it."""
    cdef int64_t v
    if lf_type(e) == T_INT64:
        v = lf_i64(e)
        if v >= 0:
            return v
    return _bad_count(e, what, data, n, src)


cdef long long _bad_count(
    const Element& e, const char* what, const char* data, Py_ssize_t n, object src
) except -1:
    cdef str where = what.decode()
    if lf_type(e) == T_INT64:
        raise _bad(data, n, src, f'"{where}" is negative: {lf_i64(e)}')
    if lf_type(e) == T_UINT64:
        raise _bad(data, n, src, f'"{where}" is out of range: {lf_u64(e)}')
    raise _bad(data, n, src, f'"{where}" is {_kind(e)}, not an integer')


cdef double _millis(
    const Element& e, const char* what, const char* data, Py_ssize_t n, object src
) except -1.0:
    """A time in milliseconds, as the pure twin's _millis: a number, not negative."""
    cdef char t = lf_type(e)
    cdef double v
    if t == T_DOUBLE:
        v = lf_f64(e)
    elif t == T_INT64:
        v = <double>lf_i64(e)
    elif t == T_UINT64:
        v = <double>lf_u64(e)
    else:
        raise _bad(data, n, src, f'"{what.decode()}" is {_kind(e)}, not a number')
    if v < 0.0:
        raise _bad(data, n, src, f'"{what.decode()}" is negative: {v!r}')
    return v


cdef int _progress_counts(
    Element& e, long long* total, long long* cache, long long* processed,
    const char* data, Py_ssize_t n, object src,
) except -1:
    cdef Object obj
    cdef Object.iterator it, end
    cdef Element e_total, e_cache, e_processed
    cdef bint has_total = False, has_cache = False, has_processed = False
    if lf_type(e) != T_OBJECT:
        raise _bad(data, n, src, f'"prompt_progress" is {_kind(e)}, not an object')
    obj = lf_obj(e)
    it = obj.begin()
    end = obj.end()
    while it != end:
        if _key(it, "total", 5):
            e_total = it.value()
            has_total = True
        elif _key(it, "cache", 5):
            e_cache = it.value()
            has_cache = True
        elif _key(it, "processed", 9):
            e_processed = it.value()
            has_processed = True
        inc(it)
    # the pure order: each name is looked up, then checked, before the next
    if not has_total:
        raise _bad(data, n, src, '"prompt_progress" has no "total"')
    total[0] = _count(e_total, "prompt_progress.total", data, n, src)
    if not has_cache:
        raise _bad(data, n, src, '"prompt_progress" has no "cache"')
    cache[0] = _count(e_cache, "prompt_progress.cache", data, n, src)
    if not has_processed:
        raise _bad(data, n, src, '"prompt_progress" has no "processed"')
    processed[0] = _count(e_processed, "prompt_progress.processed", data, n, src)
    return 0


cdef int _push_deep(
    Assembler self, const char* buf, const char* data, Py_ssize_t n, object src, list out
) except -1:
    """A payload the MAX_DEPTH parser rejected for its depth (see MAX_DEPTH): a fault unless it
    is exactly MAX_DEPTH deep, then parsed by a parser one level deeper and folded in."""
    fault = _pure_fault(data, n, src)
    if fault is not None:
        raise fault
    cdef Element root
    cdef void* deep = lf_new_parser(MAX_DEPTH + 1)
    if deep == NULL:
        raise MemoryError()
    try:
        err = lf_parse(deep, buf, <size_t>n, &root)
        if err != 0:
            raise _parse_fault(data, n, src, err)
        return _fold(self, root, data, n, src, out)
    finally:
        lf_delete_parser(deep)


cdef object _pure_fault(const char* data, Py_ssize_t n, object src):
    """The ProtocolError the pure twin's push gives for this payload's text, word for word, or
    None when its strict parser accepts the payload (cold path: once per rejected payload)."""
    raw = data[:n]
    if type(src) is str:
        text = src
    else:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            return _bad(data, n, src, f"the chunk is not valid UTF-8 ({e.reason})")
    try:
        strict_parse(text, raw)
    except ValueError as e:  # the strict reader's only fault, at any depth
        return _bad(data, n, src, f"the chunk is not valid JSON ({e})")
    return None


cdef object _parse_fault(const char* data, Py_ssize_t n, object src, int err):
    """The ProtocolError for a payload simdjson rejected (`err`; -1: a leading BOM).

    Only the message is at stake here (the twins reject the same payloads: see the pure twin's
    "strict JSON" notes), so it is the pure twin's, word for word: the bytes are decoded and
    handed to its strict parser, whose complaint (json's, or its range/surrogate/depth checks)
    is what the pure push would have said.
    """
    fault = _pure_fault(data, n, src)
    if fault is not None:
        return fault
    what = "a byte order mark" if err < 0 else lf_error_message(err).decode()
    return _bad(data, n, src, f"the chunk is not valid JSON ({what})")


cdef object _text(const char* data, Py_ssize_t n, object src):
    """The payload as str (HttpError's body): src itself, or the bytes decoded."""
    if type(src) is str:
        return src
    return PyUnicode_DecodeUTF8(data, n, "replace")


cdef object _bad(const char* data, Py_ssize_t n, object src, str what):
    """Every ProtocolError says what was wrong and shows a cut of the payload
    (docs/assembler.md, rule MESSAGE): the object pushed, or (fused path, where the pure twin
    pushes the SSE item) the payload as str."""
    shown = src if src is not None else PyUnicode_DecodeUTF8(data, n, "replace")
    return ProtocolError(f"{what}: {cut(shown)}")


cdef object _usage(Element& e, const char* data, Py_ssize_t n, object src):
    """The pure twin's _usage: prompt_tokens and completion_tokens, counts, 0 when absent; the
    cached tokens from prompt_tokens_details.cached_tokens, 0 when it or the details (which may
    be null) are absent. Checked in the pure order."""
    cdef Object obj
    cdef Object.iterator it, end
    cdef Element e_prompt, e_completion, e_details, e_cached
    cdef bint has_prompt = False, has_completion = False, has_details = False, has_cached = False
    cdef long long prompt = 0, completion = 0, cached = 0
    cdef uint32_t kl
    if lf_type(e) != T_OBJECT:
        raise _bad(data, n, src, f'"usage" is {_kind(e)}, not an object')
    obj = lf_obj(e)
    it = obj.begin()
    end = obj.end()
    while it != end:
        kl = it.key_length()
        if kl == 13 and _key(it, "prompt_tokens", 13):
            e_prompt = it.value()
            has_prompt = True
        elif kl == 17 and _key(it, "completion_tokens", 17):
            e_completion = it.value()
            has_completion = True
        elif kl == 21 and _key(it, "prompt_tokens_details", 21):
            e_details = it.value()
            has_details = True
        inc(it)
    if has_prompt:
        prompt = _count(e_prompt, "usage.prompt_tokens", data, n, src)
    if has_completion:
        completion = _count(e_completion, "usage.completion_tokens", data, n, src)
    if has_details and lf_type(e_details) != T_NULL:
        if lf_type(e_details) != T_OBJECT:
            raise _bad(
                data, n, src,
                f'"usage.prompt_tokens_details" is {_kind(e_details)}, not an object',
            )
        obj = lf_obj(e_details)
        it = obj.begin()
        end = obj.end()
        while it != end:
            if _key(it, "cached_tokens", 13):
                e_cached = it.value()
                has_cached = True
            inc(it)
        if has_cached:
            cached = _count(e_cached, "usage.prompt_tokens_details.cached_tokens", data, n, src)
    return Usage(prompt, completion, cached)


cdef object _logprobs(Element& e, const char* data, Py_ssize_t n, object src):
    """The pure twin's _logprobs: None when content is absent or null, else a tuple of
    TokenLogprob, checked in the same order with the same messages."""
    cdef Object obj
    cdef Object.iterator it, end
    cdef Element e_content, entry, e_top, alt
    cdef bint has_content = False, has_top
    cdef Array arr, tops
    cdef Array.iterator ai, aend, ti, tend
    cdef Py_ssize_t i = 0, j
    if lf_type(e) != T_OBJECT:
        raise _bad(data, n, src, f'"logprobs" is {_kind(e)}, not an object')
    obj = lf_obj(e)
    it = obj.begin()
    end = obj.end()
    while it != end:
        if _key(it, "content", 7):
            e_content = it.value()
            has_content = True
        inc(it)
    if not has_content or lf_type(e_content) == T_NULL:
        return None
    if lf_type(e_content) != T_ARRAY:
        raise _bad(data, n, src, f'"logprobs.content" is {_kind(e_content)}, not an array')
    out = []
    arr = lf_arr(e_content)
    ai = arr.begin()
    aend = arr.end()
    while ai != aend:
        entry = deref(ai)
        inc(ai)
        token, logprob = _token_logprob(entry, i, -1, &e_top, &has_top, data, n, src)
        if not has_top or lf_type(e_top) == T_NULL:
            out.append(TokenLogprob(token, logprob))
        else:
            if lf_type(e_top) != T_ARRAY:
                raise _bad(
                    data, n, src,
                    f'"logprobs.content[{i}].top_logprobs" is {_kind(e_top)}, not an array',
                )
            alternatives = []
            tops = lf_arr(e_top)
            ti = tops.begin()
            tend = tops.end()
            j = 0
            while ti != tend:
                alt = deref(ti)
                inc(ti)
                alternatives.append(_token_logprob(alt, i, j, NULL, NULL, data, n, src))
                j += 1
            out.append(TokenLogprob(token, logprob, tuple(alternatives)))
        i += 1
    return tuple(out)


cdef tuple _token_logprob(
    Element& entry, Py_ssize_t i, Py_ssize_t j, Element* e_top, bint* has_top,
    const char* data, Py_ssize_t n, object src,
):
    """(token, logprob) of logprobs.content[i] (j < 0), or of its top_logprobs[j]; for an
    entry (e_top not NULL) its top_logprobs too. As the pure twin's _token_logprob."""
    cdef Object obj
    cdef Object.iterator it, end
    cdef Element e_token, e_logprob
    cdef bint has_token = False, has_logprob = False
    cdef uint32_t kl
    cdef char t
    where = f"logprobs.content[{i}]" if j < 0 else f"logprobs.content[{i}].top_logprobs[{j}]"
    if lf_type(entry) != T_OBJECT:
        raise _bad(data, n, src, f'"{where}" is {_kind(entry)}, not an object')
    if e_top != NULL:
        has_top[0] = False
    obj = lf_obj(entry)
    it = obj.begin()
    end = obj.end()
    while it != end:
        kl = it.key_length()
        if kl == 5 and _key(it, "token", 5):
            e_token = it.value()
            has_token = True
        elif kl == 7 and _key(it, "logprob", 7):
            e_logprob = it.value()
            has_logprob = True
        elif e_top != NULL and kl == 12 and _key(it, "top_logprobs", 12):
            e_top[0] = it.value()
            has_top[0] = True
        inc(it)
    if not has_token:
        raise _bad(data, n, src, f'"{where}" has no "token"')
    if lf_type(e_token) != T_STRING:
        raise _bad(data, n, src, f'"{where}.token" is {_kind(e_token)}, not a string')
    if not has_logprob:
        raise _bad(data, n, src, f'"{where}" has no "logprob"')
    t = lf_type(e_logprob)
    if t == T_DOUBLE:
        logprob = lf_f64(e_logprob)
    elif t == T_INT64:
        logprob = <double>lf_i64(e_logprob)
    elif t == T_UINT64:
        logprob = <double>lf_u64(e_logprob)
    else:
        raise _bad(data, n, src, f'"{where}.logprob" is {_kind(e_logprob)}, not a number')
    return (_mkstr(e_token), logprob)
