// The embeddings answer's fast path (_vectors_parse.hpp includes this file): the answer's
// skeleton, a copy without the long base64 vectors, for simdjson's DOM parser, so the megabytes
// of base64 are never copied into its string buffer but decoded where they were received.
//
// The rule (docs/client.md, rule EMBEDDINGS): the fast path reads an answer only when it can
// vouch that the full parse would read it alike; anything else (it says LF_RETRY) is read again
// in full, so every fault is the full parse's. A string value of a key written `"embedding"`
// (no escape), of at least LF_ELIDE_MIN characters and with no backslash, is cut out (a span)
// and replaced by a placeholder, `\u0000` and the span's number: no other string of a skeleton
// holds NUL (a raw control character is not JSON, and an answer with a `\u0000` escape gets no
// skeleton), so a string starting with NUL is a placeholder. Such a string is then JSON exactly
// when its characters are base64's, which its decoder checks (it refuses `"`, `\` and every
// character outside the alphabet); the skeleton, parsed, is then the answer's own structure.
// The answer is vouched for when the skeleton parses, every item reads, and every span was
// decoded once as an item's vector (a span left over, e.g. in a member nobody reads, or a
// repeated `embedding` key, was never checked: LF_RETRY).
#ifndef LLAMAFAST_VECTORS_SKELETON_HPP
#define LLAMAFAST_VECTORS_SKELETON_HPP

#include "simdjson.h"
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

// Spans shorter than this stay in the skeleton: no placeholder (`\u0000` and at most 20 digits)
// is longer than the span it replaces, so a skeleton is never longer than its answer.
static const size_t LF_ELIDE_MIN = 32;

struct lf_span {
    size_t at, len;  // the string's characters, body[at, at + len)
};

struct lf_skel {
    const char* body = nullptr;  // the answer being read through its skeleton, or nullptr
    std::vector<lf_span> spans;
    size_t used = 0;
    char* buf = nullptr;  // the skeleton, padded for simdjson
    size_t cap = 0, len = 0;
};

enum { LF_STR_END, LF_STR_ESCAPED, LF_STR_REFUSED };

// The closing quote of the string whose characters start at `s` (before `end`), in `*q`:
// LF_STR_END, LF_STR_ESCAPED when it holds an escape, LF_STR_REFUSED when it has no end or
// holds `\u0000`. Each byte is searched once, however many escapes.
static int lf_string_end(const char* s, const char* end, const char** q) {
    const char* quote = nullptr;
    int kind = LF_STR_END;
    for (;;) {
        if (!quote || quote < s) {
            quote = s < end ? (const char*)std::memchr(s, '"', (size_t)(end - s)) : nullptr;
            if (!quote) return LF_STR_REFUSED;
        }
        const char* b = (const char*)std::memchr(s, '\\', (size_t)(quote - s));
        if (!b) { *q = quote; return kind; }
        kind = LF_STR_ESCAPED;
        if (end - b >= 6 && std::memcmp(b + 1, "u0000", 5) == 0) return LF_STR_REFUSED;
        s = b + 2;  // the escaped character (a quote too) is skipped
    }
}

// Whether `[a, b)` is JSON white space around one ':' (a key's end to its value's start).
static bool lf_colon_between(const char* a, const char* b) {
    int colons = 0;
    for (; a < b; a++) {
        char c = *a;
        if (c == ':') colons++;
        else if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return false;
    }
    return colons == 1;
}

// Find the spans of `body` (see the rule above); false when it gets no skeleton. A span's end
// is found by searching (the first), or probed where the previous one's length puts it: a
// quote there, unchecked in between, which the decoder checks.
static bool lf_skel_scan(lf_skel* k, const char* body, size_t len) {
    k->spans.clear();
    const char *p = body, *end = body + len, *after_key = nullptr;
    size_t probe = 0;
    bool key = false;  // the last string was `"embedding"`, ending at after_key
    for (;;) {
        const char* s = (const char*)std::memchr(p, '"', (size_t)(end - p));
        if (!s) break;
        s++;
        bool value = key && lf_colon_between(after_key, s - 1);
        if (value && probe && probe < (size_t)(end - s) && s[probe] == '"') {
            k->spans.push_back({(size_t)(s - body), probe});
            key = false;
            p = s + probe + 1;
            continue;
        }
        const char* q;
        int kind = lf_string_end(s, end, &q);
        if (kind == LF_STR_REFUSED) return false;
        size_t n = (size_t)(q - s);
        if (value && kind == LF_STR_END && n >= LF_ELIDE_MIN) {
            k->spans.push_back({(size_t)(s - body), n});
            probe = n;
        }
        key = !value && kind == LF_STR_END && n == 9 && std::memcmp(s, "embedding", 9) == 0;
        after_key = q + 1;
        p = q + 1;
    }
    return !k->spans.empty();
}

// Write the skeleton of `body` (its spans found) into k->buf, padded; false when out of memory.
static bool lf_skel_build(lf_skel* k, const char* body, size_t len) {
    size_t need = len + simdjson::SIMDJSON_PADDING;
    if (need > k->cap) {
        std::free(k->buf);
        k->buf = (char*)std::malloc(need);
        k->cap = k->buf ? need : 0;
        if (!k->buf) return false;
    }
    char* o = k->buf;
    size_t from = 0;
    for (size_t i = 0; i < k->spans.size(); i++) {
        const lf_span& sp = k->spans[i];
        std::memcpy(o, body + from, sp.at - from);
        o += sp.at - from;
        std::memcpy(o, "\\u0000", 6);
        o += 6;
        char digits[24];
        int d = 0;
        size_t x = i;
        do { digits[d++] = (char)('0' + x % 10); x /= 10; } while (x);
        while (d) *o++ = digits[--d];
        from = sp.at + sp.len;
    }
    std::memcpy(o, body + from, len - from);
    o += len - from;
    k->len = (size_t)(o - k->buf);
    std::memset(o, 0, simdjson::SIMDJSON_PADDING);
    return true;
}

// The span a string of the skeleton stands for, or nullptr when it is no placeholder (not
// reading through a skeleton, or no NUL first). Each placeholder is in the skeleton once, and
// each item's vector is read once, so k->used counts the spans decoded.
static const lf_span* lf_skel_span(lf_skel* k, std::string_view sv) {
    if (!k->body || sv.empty() || sv[0] != '\0') return nullptr;
    size_t i = 0;
    for (size_t j = 1; j < sv.size(); j++) i = i * 10 + (size_t)(sv[j] - '0');
    if (i >= k->spans.size()) return nullptr;  // never: the placeholder is then read, refused
    k->used++;
    return &k->spans[i];
}

// The skeleton's memory let go of: after an answer whose skeleton or spans passed `retain`
// bytes (LF_RETAIN; what stays allocated is bounded, docs/client.md, rule EMBEDDINGS), or always.
static void lf_skel_trim(lf_skel* k, size_t retain) {
    if (k->cap > retain) {
        std::free(k->buf);
        k->buf = nullptr;
        k->cap = 0;
    }
    if (k->spans.capacity() * sizeof(lf_span) > retain) std::vector<lf_span>().swap(k->spans);
}

#endif  // LLAMAFAST_VECTORS_SKELETON_HPP
