// The embeddings decoder's C++ side (Cython twin, _vectors_c.pyx includes this file): an
// answer's bytes in a padded buffer, parsed by simdjson's DOM parser, its vectors written as
// float32 into the call's rows (base64 through AVX2 or lookup tables, numbers from the tape),
// with the fault codes of _errors.py. The parser first reads the answer's skeleton, its long
// base64 vectors cut out and decoded where they lie (_vectors_skeleton.hpp: the DOM parser would
// copy each into its string buffer first); an answer the skeleton cannot vouch for, and every
// fault, is read again in full (lf_vecs_add). Read as strictly as the pure twin reads
// (docs/assembler.md, rule STRICT-JSON): a byte order mark is refused (simdjson would skip it),
// nesting is bounded by the parser's depth (see lf_vecs_add). Every size product is checked
// (lf_fix_dim), and neither the parser's capacity nor the skeleton outlives a large answer
// (LF_RETAIN).
#ifndef LLAMAFAST_VECTORS_PARSE_HPP
#define LLAMAFAST_VECTORS_PARSE_HPP

#include "simdjson.h"
#include "_vectors_skeleton.hpp"
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <string>
#include <vector>
#include <new>

using namespace simdjson;

// The fault codes of _errors.py (E_*), then what is not the answer's fault: memory not had, rows
// of more bytes than one buffer holds (v->got is the dimension), nesting for the pyx to judge.
enum { LF_NOT_JSON = 1, LF_NOT_LIST, LF_MISSING, LF_EXTRA, LF_NO_EMBEDDING, LF_NOT_NUMBER,
       LF_BASE64, LF_PARTIAL, LF_EMPTY, LF_LENGTH, LF_NOT_FINITE, LF_BAD_INDEX,
       LF_REPEATED };
enum { LF_NO_MEMORY = -1, LF_TOO_BIG = -2, LF_TOO_DEEP = -3 };
// The skeleton's read cannot vouch for the answer (_vectors_skeleton.hpp): read it in full.
enum { LF_RETRY = -4 };

// A parser whose capacity (the longest answer it has read) passes this many bytes is freed
// after its answer: what stays allocated is bounded (docs/client.md, rule EMBEDDINGS) and every
// answer up to it (64 vectors of 4,096 numbers are 5.5 MB) reuses the parser.
static const size_t LF_RETAIN = (size_t)8 << 20;

// Base64 (RFC 4648, the standard alphabet) four characters at a time: each table gives a
// character's six bits already in their place in the three little-endian output bytes, or
// a bit at 24 and above for a character outside the alphabet.
static uint32_t lf_b64[4][256];
static bool lf_b64_ready = false;
static void lf_b64_init() {
    static const char* abc =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int t = 0; t < 4; t++)
        for (int c = 0; c < 256; c++) lf_b64[t][c] = 0x01000000u;
    for (uint32_t v = 0; v < 64; v++) {
        unsigned char c = (unsigned char)abc[v];
        lf_b64[0][c] = v << 2;
        lf_b64[1][c] = (v >> 4) | ((v & 0xF) << 12);
        lf_b64[2][c] = ((v >> 2) << 8) | ((v & 0x3) << 22);
        lf_b64[3][c] = v << 16;
    }
    lf_b64_ready = true;
}
static inline uint32_t lf_quad(const unsigned char* s) {
    return lf_b64[0][s[0]] | lf_b64[1][s[1]] | lf_b64[2][s[2]] | lf_b64[3][s[3]];
}
// The decoded length of `n` characters of strict base64 (padding required, '=' only at
// the end), or -1 when they are not that.
static inline int64_t lf_b64_len(const unsigned char* s, size_t n) {
    if (n % 4) return -1;
    if (n == 0) return 0;
    size_t pad = (s[n - 1] == '=') + (s[n - 1] == '=' && s[n - 2] == '=');
    return (int64_t)(n / 4 * 3 - pad);
}
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define LF_B64_AVX2 1
// 32 characters to 24 bytes at a time with AVX2 (W. Mula and D. Lemire, "Faster Base64 Encoding
// and Decoding Using AVX2 Instructions", 2018): the nibble tables refuse every character
// outside the alphabet ('=' included) as the scalar tables do, so both refuse the same input.
// It decodes quads [0, q) of `s` for the largest q (a multiple of 8) that leaves 8 bytes of
// `room` after the last one written (each block stores 32 bytes, 24 kept); returns q, and sets
// `*bad` when a character was refused, `*special` when a float32 it wrote (six per block, from
// `out` on) is not finite (all exponent bits set), so the rows need no second pass to know.
__attribute__((target("avx2"))) static size_t lf_b64_avx2(const unsigned char* s, size_t quads,
                                                         unsigned char* out, bool* bad,
                                                         bool* special) {
    const __m256i lut_lo = _mm256_setr_epi8(
        0x15, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x13, 0x1A, 0x1B, 0x1B, 0x1B, 0x1A,
        0x15, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x13, 0x1A, 0x1B, 0x1B, 0x1B, 0x1A);
    const __m256i lut_hi = _mm256_setr_epi8(
        0x10, 0x10, 0x01, 0x02, 0x04, 0x08, 0x04, 0x08, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10,
        0x10, 0x10, 0x01, 0x02, 0x04, 0x08, 0x04, 0x08, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10);
    const __m256i lut_roll = _mm256_setr_epi8(
        0, 16, 19, 4, -65, -65, -71, -71, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 16, 19, 4, -65, -65, -71, -71, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m256i nibble = _mm256_set1_epi8(0x0F), slash = _mm256_set1_epi8(0x2F);
    const __m256i pack = _mm256_setr_epi8(
        2, 1, 0, 6, 5, 4, 10, 9, 8, 14, 13, 12, -1, -1, -1, -1,
        2, 1, 0, 6, 5, 4, 10, 9, 8, 14, 13, 12, -1, -1, -1, -1);
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 4, 5, 6, -1, -1);
    const __m256i expo = _mm256_set1_epi32(0x7F800000), kept = _mm256_setr_epi32(
        -1, -1, -1, -1, -1, -1, 0, 0);
    __m256i refused = _mm256_setzero_si256(), nonfinite = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 11 <= quads; i += 8) {  // 8 quads in, 24 bytes kept, 32 stored: 8 spare after
        __m256i in = _mm256_loadu_si256((const __m256i*)(s + 4 * i));
        __m256i hi = _mm256_and_si256(_mm256_srli_epi32(in, 4), nibble);
        __m256i lo = _mm256_and_si256(in, nibble);
        refused = _mm256_or_si256(refused, _mm256_and_si256(
            _mm256_shuffle_epi8(lut_lo, lo), _mm256_shuffle_epi8(lut_hi, hi)));
        __m256i roll = _mm256_shuffle_epi8(
            lut_roll, _mm256_add_epi8(_mm256_cmpeq_epi8(in, slash), hi));
        __m256i six = _mm256_add_epi8(in, roll);
        __m256i pairs = _mm256_maddubs_epi16(six, _mm256_set1_epi32(0x01400140));
        __m256i words = _mm256_madd_epi16(pairs, _mm256_set1_epi32(0x00011000));
        __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(words, pack), lanes);
        _mm256_storeu_si256((__m256i*)(out + 3 * i), bytes);
        nonfinite = _mm256_or_si256(nonfinite, _mm256_cmpeq_epi32(
            _mm256_and_si256(bytes, expo), expo));
    }
    *bad = !_mm256_testz_si256(refused, refused);
    *special = !_mm256_testz_si256(nonfinite, kept);
    return i;
}
static int lf_has_avx2 = -1;
#endif

// Decode `n` characters (lf_b64_len said they are whole quads) into `out`; false on a
// character outside the alphabet or misplaced padding. `*finite`: how many bytes from `out` on
// hold float32s known to be finite (a multiple of 4; 0 unless the AVX2 kernel saw to it).
static bool lf_b64_decode(const unsigned char* s, size_t n, unsigned char* out, size_t* finite) {
    *finite = 0;
    if (n == 0) return true;
    size_t quads = n / 4 - 1;
    uint32_t bad = 0;
    size_t i = 0;
#ifdef LF_B64_AVX2
    if (lf_has_avx2 < 0) lf_has_avx2 = __builtin_cpu_supports("avx2") ? 1 : 0;
    if (lf_has_avx2) {
        bool refused = false, special = false;
        i = lf_b64_avx2(s, quads, out, &refused, &special);
        if (refused) return false;
        if (!special) *finite = 3 * i;  // i is a multiple of 8: 24 bytes, 6 floats a block
    }
#endif
    // Every quad but the last: four bytes stored, three kept (the next store overwrites
    // the fourth); the last is done apart so nothing is written past the output.
    for (; i + 4 <= quads; i += 4) {
        uint32_t a = lf_quad(s + 4 * i), b = lf_quad(s + 4 * i + 4);
        uint32_t c = lf_quad(s + 4 * i + 8), d = lf_quad(s + 4 * i + 12);
        bad |= a | b | c | d;
        std::memcpy(out + 3 * i, &a, 4);
        std::memcpy(out + 3 * i + 3, &b, 4);
        std::memcpy(out + 3 * i + 6, &c, 4);
        std::memcpy(out + 3 * i + 9, &d, 4);
    }
    for (; i < quads; i++) {
        uint32_t a = lf_quad(s + 4 * i);
        bad |= a;
        std::memcpy(out + 3 * i, &a, 4);
    }
    if (bad & 0xFF000000u) return false;
    const unsigned char* q = s + 4 * quads;
    unsigned char* o = out + 3 * quads;
    uint32_t x;
    if (q[3] != '=') {
        x = lf_quad(q);
        if (x & 0xFF000000u) return false;
        o[0] = x & 0xFF; o[1] = (x >> 8) & 0xFF; o[2] = (x >> 16) & 0xFF;
    } else if (q[2] != '=') {
        x = lf_b64[0][q[0]] | lf_b64[1][q[1]] | lf_b64[2][q[2]];
        if (x & 0xFF000000u) return false;
        o[0] = x & 0xFF; o[1] = (x >> 8) & 0xFF;
    } else {
        x = lf_b64[0][q[0]] | lf_b64[1][q[1]];
        if (x & 0xFF000000u) return false;
        o[0] = x & 0xFF;
    }
    return true;
}

// The first value of `v[0..n)` that is not finite (all exponent bits set), or -1.
static inline int64_t lf_first_not_finite(const float* v, size_t n) {
    uint32_t any = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t b; std::memcpy(&b, v + i, 4);
        any |= (uint32_t)((b & 0x7F800000u) == 0x7F800000u);
    }
    if (!any) return -1;
    for (size_t i = 0; i < n; i++) {
        uint32_t b; std::memcpy(&b, v + i, 4);
        if ((b & 0x7F800000u) == 0x7F800000u) return (int64_t)i;
    }
    return -1;
}

static inline void lf_to_native(float* v, size_t n) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    for (size_t i = 0; i < n; i++) {
        uint32_t b; std::memcpy(&b, v + i, 4); b = __builtin_bswap32(b); std::memcpy(v + i, &b, 4);
    }
#else
    (void)v; (void)n;
#endif
}

struct lf_vecs {
    float* rows = nullptr;      // n * dim values, once the first vector fixed dim
    size_t n = 0, dim = 0;
    int64_t prompt_tokens = -1;
    bool has_model = false;
    std::string model;
    std::vector<float> scratch; // a list of numbers read before dim is known
    std::vector<unsigned char> seen;
    std::vector<int64_t> order;
    char* body = nullptr;       // the answer, padded for simdjson
    lf_skel skel;               // the answer's skeleton (the fast path)
    size_t body_cap = 0;
    // the fault: its code and numbers
    int64_t item = 0, got = 0, want = 0;
};

// One simdjson DOM parser for the process (a parse runs with the GIL held), kept while its
// capacity is at most LF_RETAIN. The DOM front-end is the one simdjson dispatches at run time
// to the CPU's SIMD kernels (On-Demand would run the portable fallback in a build without
// -march); its tape then holds each number already parsed, and walking it costs little.
static dom::parser* lf_shared_parser = nullptr;

static dom::parser* lf_new_parser(size_t max_depth) {
    dom::parser* p = new (std::nothrow) dom::parser();
    if (p && p->allocate(4096, max_depth) != SUCCESS) { delete p; p = nullptr; }
    return p;
}

static lf_vecs* lf_vecs_new(size_t n) {
    if (!lf_b64_ready) lf_b64_init();
    lf_vecs* v = new (std::nothrow) lf_vecs();
    if (v) v->n = n;
    return v;
}
static void lf_rows_free(float* rows, size_t size);
static void lf_vecs_free(lf_vecs* v) {
    if (!v) return;
    if (v->rows) lf_rows_free(v->rows, v->n * v->dim * sizeof(float) + 1);
    std::free(v->body);
    lf_skel_trim(&v->skel, 0);
    delete v;
}
// Room for an answer of `len` bytes plus simdjson's padding; nullptr when out of memory.
static char* lf_body(lf_vecs* v, size_t len) {
    size_t need = len + SIMDJSON_PADDING;
    if (need > v->body_cap) {
        std::free(v->body);
        v->body = (char*)std::malloc(need);
        v->body_cap = v->body ? need : 0;
    }
    if (v->body) std::memset(v->body + len, 0, SIMDJSON_PADDING);
    return v->body;
}
static float* lf_rows(lf_vecs* v) { return v->rows; }
static size_t lf_dim(lf_vecs* v) { return v->dim; }

// The rows of results let go of, kept for the next calls (docs/client.md, rule WHOLE-BODY): at
// most LF_SPARES of them, each at most LF_RETAIN bytes, LF_SPARE_BYTES in all. A call's fresh
// rows would be new pages each time (the allocator hands a block of a few MB back to the system
// once several are free), so calls of 200 texts would pay a page fault per 4 KiB that calls of
// 1,000 do not. A kept block serves a call that asks at most its size and at least half of it.
// Only with the GIL held (a Vectors' add, a _Rows' end).
enum { LF_SPARES = 8 };
static const size_t LF_SPARE_BYTES = (size_t)16 << 20;
static float* lf_spare_rows[LF_SPARES];
static size_t lf_spare_size[LF_SPARES];
static size_t lf_spare_total = 0;

static float* lf_rows_new(size_t size) {
    int best = -1;
    for (int i = 0; i < LF_SPARES; i++) {
        size_t have = lf_spare_size[i];
        if (lf_spare_rows[i] && have >= size && have / 2 <= size
            && (best < 0 || have < lf_spare_size[best]))
            best = i;
    }
    if (best < 0) return (float*)std::malloc(size);
    float* r = lf_spare_rows[best];
    lf_spare_total -= lf_spare_size[best];
    lf_spare_rows[best] = nullptr;
    lf_spare_size[best] = 0;
    return r;
}
// The rows of `size` bytes (as asked of lf_rows_new) let go of: kept, or freed.
static void lf_rows_free(float* rows, size_t size) {
    if (!rows) return;
    if (size <= LF_RETAIN && lf_spare_total + size <= LF_SPARE_BYTES) {
        for (int i = 0; i < LF_SPARES; i++) {
            if (!lf_spare_rows[i]) {
                lf_spare_rows[i] = rows;
                lf_spare_size[i] = size;
                lf_spare_total += size;
                return;
            }
        }
    }
    std::free(rows);
}

// Fix the dimension at `dim` (the first vector's length): the whole call's buffer, of
// n * dim * 4 bytes, which must not pass PTRDIFF_MAX (Py_ssize_t's, what one buffer holds):
// LF_TOO_BIG (v->got says dim) past it, checked before the product is made.
static int lf_fix_dim(lf_vecs* v, size_t dim) {
    if (v->n == 0 || dim > ((size_t)PTRDIFF_MAX / sizeof(float)) / v->n) {
        v->got = (int64_t)dim;
        return LF_TOO_BIG;
    }
    v->rows = lf_rows_new(v->n * dim * sizeof(float) + 1);
    if (!v->rows) return LF_NO_MEMORY;
    v->dim = dim;
    return 0;
}

// A base64 vector into row `row`: 0 or a fault code, in binascii's order (not base64,
// then the length).
static int lf_b64_vector(lf_vecs* v, const unsigned char* s, size_t n, size_t row, int* oom) {
    int64_t bytes = lf_b64_len(s, n);
    if (bytes < 0) return LF_BASE64;
    size_t got = (size_t)bytes / 4;
    if (bytes % 4 || (v->rows && got != v->dim)) {
        std::vector<unsigned char> tmp((size_t)bytes + 4);
        size_t finite;
        if (!lf_b64_decode(s, n, tmp.data(), &finite)) return LF_BASE64;
        if (bytes % 4) { v->got = bytes; return LF_PARTIAL; }
        if (got == 0) return LF_EMPTY;
        v->got = (int64_t)got; v->want = (int64_t)v->dim; return LF_LENGTH;
    }
    if (got == 0) return LF_EMPTY;
    if (!v->rows && (*oom = lf_fix_dim(v, got))) return -1;
    float* out = v->rows + row * v->dim;
    size_t finite;
    if (!lf_b64_decode(s, n, (unsigned char*)out, &finite)) return LF_BASE64;
    int64_t at = lf_first_not_finite(out + finite / 4, got - finite / 4);
    if (at >= 0) { v->got = (int64_t)(finite / 4) + at; return LF_NOT_FINITE; }
    lf_to_native(out, got);
    return 0;
}

// A list of numbers into row `row`: 0 or a fault code. The tape holds each number parsed
// (a double, or an integer converted here); each goes straight into the row as float32.
static int lf_json_vector(lf_vecs* v, dom::array arr, size_t row, int* oom) {
    size_t k = arr.size();
    if (k == 0xFFFFFF) {  // the tape's count saturates: count them
        k = 0;
        for (dom::element x : arr) { (void)x; k++; }
    }
    if (k == 0) return LF_EMPTY;
    if (!v->rows && (*oom = lf_fix_dim(v, k))) return -1;
    float* out = v->rows + row * v->dim;
    size_t i = 0;
    for (dom::element x : arr) {
        double d;
        if (x.get_double().get(d)) { v->got = (int64_t)i; return LF_NOT_NUMBER; }
        if (i < v->dim) out[i] = (float)d;
        i++;
    }
    if (k != v->dim) { v->got = (int64_t)k; v->want = (int64_t)v->dim; return LF_LENGTH; }
    int64_t at = lf_first_not_finite(out, k);
    if (at >= 0) { v->got = at; return LF_NOT_FINITE; }
    return 0;
}

// One item (its last `embedding` and `index`, as json keeps the last of a repeated key):
// the vector's fault first, then the index's, as the pure twin checks them.
static int lf_item(lf_vecs* v, dom::object obj, size_t first, size_t pos, size_t count,
                   int* oom) {
    dom::element vec, idx;
    bool has_vec = false, has_idx = false;
    for (dom::key_value_pair kv : obj) {
        if (kv.key == "embedding") { vec = kv.value; has_vec = true; }
        else if (kv.key == "index") { idx = kv.value; has_idx = true; }
    }
    size_t row = first + pos;
    v->item = (int64_t)row;
    v->got = v->want = 0;
    int e = LF_NO_EMBEDDING;
    if (has_vec) {
        dom::element_type t = vec.type();
        if (t == dom::element_type::STRING) {
            std::string_view sv;
            if (vec.get_string().get(sv)) return LF_NOT_JSON;
            // a placeholder stands for its span, where the answer lies
            const lf_span* sp = lf_skel_span(&v->skel, sv);
            const char* s = sp ? v->skel.body + sp->at : sv.data();
            e = lf_b64_vector(v, (const unsigned char*)s, sp ? sp->len : sv.size(), row, oom);
        } else if (t == dom::element_type::ARRAY) {
            dom::array arr;
            if (vec.get_array().get(arr)) return LF_NOT_JSON;
            e = lf_json_vector(v, arr, row, oom);
        }
    }
    if (e) return e;
    int64_t index = -1;
    if (has_idx) {
        dom::element_type t = idx.type();
        if (t == dom::element_type::INT64) { int64_t i; if (!idx.get_int64().get(i)) index = i; }
        else if (t == dom::element_type::UINT64) index = -1;  // beyond any count
    }
    if (index < 0 || (size_t)index >= count) { v->got = 0; v->want = (int64_t)count; return LF_BAD_INDEX; }
    if (v->seen[(size_t)index]) { v->got = index; v->want = (int64_t)count; return LF_REPEATED; }
    v->seen[(size_t)index] = 1;
    v->order.push_back(index);
    return 0;
}

// Read the answer (parsed by `parser`) for texts first..first+count-1: 0, a fault code
// (v->item, got, want say more), or one of LF_NO_MEMORY, LF_TOO_BIG, LF_TOO_DEEP.
static int lf_vecs_read(lf_vecs* v, dom::parser* parser, const char* body, size_t len,
                        size_t first, size_t count) {
    int oom = 0;
    dom::element doc;
    error_code err = parser->parse(body, len, false).get(doc);
    if (err == MEMALLOC) return LF_NO_MEMORY;
    if (err == DEPTH_ERROR) return LF_TOO_DEEP;
    if (err) return LF_NOT_JSON;
    dom::object top;
    if (doc.get_object().get(top)) return LF_NOT_LIST;
    // json keeps the last of a repeated key: so do these.
    dom::element data_el, model_el, usage_el;
    bool has_data = false, has_model = false, has_usage = false;
    for (dom::key_value_pair kv : top) {
        if (kv.key == "data") { data_el = kv.value; has_data = true; }
        else if (kv.key == "model") { model_el = kv.value; has_model = true; }
        else if (kv.key == "usage") { usage_el = kv.value; has_usage = true; }
    }
    dom::array data;
    if (!has_data || data_el.get_array().get(data)) return LF_NOT_LIST;
    for (dom::element item : data)
        if (!item.is_object()) return LF_NOT_LIST;
    v->seen.assign(count, 0);
    v->order.clear();
    size_t pos = 0;
    for (dom::element item : data) {
        if (pos >= count) { v->item = (int64_t)(first + pos); v->want = (int64_t)count; return LF_EXTRA; }
        dom::object obj;
        if (item.get_object().get(obj)) return LF_NOT_LIST;
        int e = lf_item(v, obj, first, pos, count, &oom);
        if (oom) return oom;
        if (e) return e;
        pos++;
    }
    if (v->skel.body && v->skel.used != v->skel.spans.size()) return LF_RETRY;
    if (pos < count) {
        size_t missing = 0;
        while (missing < count && v->seen[missing]) missing++;
        v->item = (int64_t)(first + missing); v->want = (int64_t)count;
        return LF_MISSING;
    }
    // Rows that came out of index order go to their index.
    bool sorted = true;
    for (size_t i = 0; i < v->order.size(); i++)
        if (v->order[i] != (int64_t)i) { sorted = false; break; }
    if (!sorted) {
        size_t dim = v->dim;
        std::vector<float> block(v->rows + first * dim, v->rows + (first + count) * dim);
        for (size_t i = 0; i < count; i++)
            std::memcpy(v->rows + (first + (size_t)v->order[i]) * dim,
                        block.data() + i * dim, dim * sizeof(float));
    }
    std::string_view model;
    if (has_model && !v->has_model && !model_el.get_string().get(model)) {
        v->model.assign(model.data(), model.size());
        v->has_model = true;
    }
    if (has_usage) {
        dom::object u;
        if (!usage_el.get_object().get(u)) {
            dom::element tok;
            bool has_tok = false;
            for (dom::key_value_pair kv : u)
                if (kv.key == "prompt_tokens") { tok = kv.value; has_tok = true; }
            // a count is 0 to 2**63 - 1 (an UINT64 is past it); the total stops at that
            int64_t i;
            if (has_tok && tok.type() == dom::element_type::INT64 && !tok.get_int64().get(i) && i >= 0) {
                int64_t total = v->prompt_tokens < 0 ? 0 : v->prompt_tokens;
                v->prompt_tokens = i > INT64_MAX - total ? INT64_MAX : total + i;
            }
        }
    }
    return 0;
}

// Read the answer through its skeleton (_vectors_skeleton.hpp): 0 as lf_vecs_read says, or
// LF_RETRY with no rows it fixed (the full read fixes its own), for the full read. A fault's
// numbers need no undoing: the full read sets those of every fault that shows them.
static int lf_vecs_fast(lf_vecs* v, dom::parser* parser, const char* body, size_t len,
                        size_t first, size_t count) {
    lf_skel* k = &v->skel;
    if (!lf_skel_scan(k, body, len) || !lf_skel_build(k, body, len)) return LF_RETRY;
    bool had_rows = v->rows != nullptr;
    k->body = body;
    k->used = 0;
    int code;
    try {
        code = lf_vecs_read(v, parser, k->buf, k->len, first, count);
    } catch (...) {  // std::bad_alloc: the full read meets it again, or not
        code = LF_RETRY;
    }
    k->body = nullptr;
    if (code == 0) return 0;
    if (!had_rows && v->rows) {
        lf_rows_free(v->rows, v->n * v->dim * sizeof(float) + 1);
        v->rows = nullptr;
        v->dim = 0;
    }
    return LF_RETRY;
}

// Read the answer at `body` (`len` bytes, SIMDJSON_PADDING readable bytes after them: v->body,
// or the buffer the answer was received into), as lf_vecs_read says. The parser is the shared one,
// allocated for `max_depth` (a parser for depth N refuses N levels that are not empty, so the
// pyx judges what it refuses for depth: see _vectors_c.pyx), or, when `fresh`, a parser of its
// own for `max_depth`, freed after. The shared one is freed too once its capacity passes
// LF_RETAIN. A C++ allocation that fails is LF_NO_MEMORY, never an exception.
static int lf_vecs_add(lf_vecs* v, const char* body, size_t len, size_t first, size_t count,
                       size_t max_depth, bool fresh) {
    static const char bom[] = "\xef\xbb\xbf";
    if (len >= 3 && std::memcmp(body, bom, 3) == 0) return LF_NOT_JSON;  // RFC 8259, 8.1
    dom::parser* parser = fresh ? lf_new_parser(max_depth) : lf_shared_parser;
    if (!parser) parser = lf_shared_parser = lf_new_parser(max_depth);
    if (!parser) return LF_NO_MEMORY;
    int code;
    try {
        code = fresh ? LF_RETRY : lf_vecs_fast(v, parser, body, len, first, count);
        if (code) code = lf_vecs_read(v, parser, body, len, first, count);
    } catch (...) {  // std::bad_alloc from a vector or string
        code = LF_NO_MEMORY;
    }
    if (fresh || parser->capacity() > LF_RETAIN) {
        if (!fresh) lf_shared_parser = nullptr;
        delete parser;
    }
    return code;
}

// After an answer: its copy and its skeleton go when large (the pyx has made its error message).
static void lf_body_trim(lf_vecs* v) {
    if (v->body_cap > LF_RETAIN) {
        std::free(v->body);
        v->body = nullptr;
        v->body_cap = 0;
    }
    lf_skel_trim(&v->skel, LF_RETAIN);
}
static int lf_vecs_has_model(lf_vecs* v) { return v->has_model; }
static const char* lf_vecs_model(lf_vecs* v, size_t* n) { *n = v->model.size(); return v->model.data(); }
static int64_t lf_vecs_tokens(lf_vecs* v) { return v->prompt_tokens; }
static int64_t lf_vecs_item(lf_vecs* v) { return v->item; }
static int64_t lf_vecs_got(lf_vecs* v) { return v->got; }
static int64_t lf_vecs_want(lf_vecs* v) { return v->want; }
// Hand the rows over (the caller frees them with free()).
static float* lf_vecs_take(lf_vecs* v) { float* r = v->rows; v->rows = nullptr; return r; }

#endif  // LLAMAFAST_VECTORS_PARSE_HPP
