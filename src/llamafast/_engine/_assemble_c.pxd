# cython: language_level=3
# The Cython assembler's C-level surface, for the fused ChatStream in _chat_c.pyx.
# Only C types here (the simdjson parser is a void*), so a C module can cimport it.

ctypedef struct TextBuf:        # UTF-8 text pieces, concatenated (decoded once, by finish())
    char* data
    Py_ssize_t len
    Py_ssize_t cap


cdef class Assembler:
    cdef void* _parser          # simdjson::dom::parser*, owned; only while the shared one was busy
    cdef char* _pad             # payload copy with SIMDJSON_PADDING readable bytes after it
    cdef size_t _pad_cap
    cdef object _id             # str | None
    cdef TextBuf _content       # the answer text so far (len 0: there never was any)
    cdef TextBuf _reasoning
    cdef list _calls            # one [id, name, [argument pieces]] per tool call
    cdef long long _cache_n
    cdef long long _prompt_n
    cdef long long _predicted_n
    cdef double _prompt_ms
    cdef double _predicted_ms
    cdef long long _reasoning_tokens
    cdef bint _in_reasoning
    cdef object _finish_reason  # FinishReason | None
    cdef dict _partials         # partial_arguments' parsers, per call
    cdef bint _busy             # a push or finish is running: a second one is refused
    cdef object _model          # str | None: the first "model" a chunk carried
    cdef object _usage          # Usage | None: the latest "usage"
    cdef list _logprobs         # the TokenLogprobs of the Content events, in order

    # One payload as UTF-8 bytes (need not be NUL-terminated): appends its events to `out`, or
    # raises the error push() raises for it (then `out` may hold some of its events: drop them).
    # It raises RuntimeError, and changes nothing, while another push or finish of this
    # Assembler is running. `src` is the payload object when the caller has one (str or bytes,
    # used only for error messages and HttpError's body), else None (then they show the payload
    # as str, as the pure ChatStream, which pushes the SSE item, does). `padded`: at least
    # _assemble_c.PADDING (simdjson's SIMDJSON_PADDING) readable bytes follow data + n, so
    # simdjson parses in place; else the payload is copied into a padded buffer first.
    cdef int push_into(
        self, const char* data, Py_ssize_t n, object src, bint padded, list out
    ) except -1
