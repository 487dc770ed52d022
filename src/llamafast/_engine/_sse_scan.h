/* The SSE reader's C helpers (Cython twin, _sse_c.pyx includes this file): the line-end
 * search and strict UTF-8 validation in one pass, and the str of a validated line.
 * Included after Python.h (Cython puts it first), whose Py_ssize_t and str API it uses.
 *
 * Strict UTF-8 as a DFA over byte classes (Unicode Table 3-7, "well-formed byte sequences"):
 * no overlongs (C0, C1, E0 80-9F, F0 80-8F), no surrogates (ED A0-BF), nothing past U+10FFFF
 * (F4 90-BF, F5-FF), no stray continuation bytes, no sequence cut short by the line end.
 * States: 0 accept (at a character boundary), 1 reject (sticky), 2 one continuation byte
 * needed, 3 two needed, 4 after E0, 5 after ED, 6 three needed, 7 after F0, 8 after F4.
 * Classes: 0 00-7F, 1 80-8F, 2 90-9F, 3 A0-BF, 4 C0-C1 F5-FF, 5 C2-DF, 6 E0, 7 E1-EC EE-EF,
 * 8 ED, 9 F0, 10 F1-F3, 11 F4.
 *
 * llf_scan: the line-end search and the DFA in one pass (see _sse_c.pyx's docstring).
 * llf_str: the str of a validated line from (bytes, length, continuation bytes, largest byte).
 * A valid line's largest byte is its widest lead byte: C2/C3 only -> every char <= U+00FF
 * (1-byte kind), up to EF -> <= U+FFFF (2-byte kind), F0-F4 -> a char > U+FFFF (4-byte kind);
 * and its length in chars is its length in bytes minus its continuation bytes. So the str gets
 * exactly the compact kind PyUnicode_DecodeUTF8 would give it (str equality and hashing
 * depend on that).
 */
#ifndef LLAMAFAST_SSE_SCAN_H
#define LLAMAFAST_SSE_SCAN_H

#include <stdint.h>
#include <string.h>
/* SSE2 is part of x86-64; elsewhere (or with -DLLF_NO_SIMD, to test it) plain 64-bit words */
#if !defined(LLF_NO_SIMD) && (defined(__SSE2__) || defined(_M_X64) \
                             || (defined(_M_IX86_FP) && _M_IX86_FP >= 2))
#include <emmintrin.h>
#define LLF_SSE2 1
#endif

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

#define LLF_HIGH 0x8080808080808080ULL
#define LLF_ONES 0x0101010101010101ULL
#if defined(_MSC_VER)
#include <intrin.h>
static inline unsigned int llf_ctz(unsigned int x) { unsigned long r; _BitScanForward(&r, x); return r; }
#else
#define llf_ctz(x) ((unsigned int)__builtin_ctz(x))
#endif

/* The offset of the first LF or CR in p[0:n), or n. The bytes before it go through the
   DFA (state *st), their continuation bytes are added to *ncont, and *umax becomes the
   largest byte seen. Only non-ASCII bytes, and bytes while a sequence is open, are walked
   one by one; an ASCII byte leaves the accept and reject states as they are, so runs of
   ASCII are skipped a block at a time, but only from one of those two states. */
static inline Py_ssize_t llf_scan(const unsigned char *p, Py_ssize_t n, unsigned int *st,
                                  Py_ssize_t *ncont, unsigned int *umax)
{
    Py_ssize_t i = 0, lim;
    unsigned int s = *st, mx = *umax, c;
    Py_ssize_t nc = *ncont;
#ifdef LLF_SSE2
    const __m128i nl = _mm_set1_epi8('\n'), cr = _mm_set1_epi8('\r');
    const __m128i c07 = _mm_set1_epi8(7), c0f = _mm_set1_epi8(15);
    unsigned int em, hm;
#endif
    for (;;) {
        /* one by one: inside a sequence (s > 1), or at a non-ASCII byte */
        while (i < n && (s > 1 || p[i] >= 0x80)) {
            c = p[i];
            if (s == 0 && c >= 0xC2 && c <= 0xF4 && n - i >= 4) {
                /* a lead byte with its whole sequence in reach: checked directly (what the
                   DFA accepts, with shorter dependency chains); else the DFA rejects it */
                unsigned int lo = 0x80, hi = 0xBF, c1 = p[i + 1];
                if (c == 0xE0)
                    lo = 0xA0;
                else if (c == 0xED)
                    hi = 0x9F;
                else if (c == 0xF0)
                    lo = 0x90;
                else if (c == 0xF4)
                    hi = 0x8F;
                if (c1 >= lo && c1 <= hi) {
                    if (c > mx)
                        mx = c;  /* a lead byte is larger than any continuation byte */
                    if (c < 0xE0) {
                        nc += 1;
                        i += 2;
                        continue;
                    }
                    if ((p[i + 2] & 0xC0) == 0x80) {
                        if (c < 0xF0) {
                            nc += 2;
                            i += 3;
                            continue;
                        }
                        if ((p[i + 3] & 0xC0) == 0x80) {
                            nc += 3;
                            i += 4;
                            continue;
                        }
                    }
                }
            }
            if (c == '\n' || c == '\r')
                goto done;
            s = llf_u8_next[s * 12 + llf_u8_class[c]];
            if (c >= 0x80) {
                nc += c < 0xC0;
                if (c > mx)
                    mx = c;
            }
            i++;
        }
        /* here s is accept or reject, and p[i] (if any) is ASCII */
#ifdef LLF_SSE2
        while (n - i >= 64) {
            /* coarse, 64 bytes a turn: (byte | 7) == 0x0F flags 08-0F (LF and CR among
               them), the sign bit flags non-ASCII; the exact test below sorts the rare
               control bytes out */
            __m128i v0 = _mm_loadu_si128((const __m128i *)(p + i));
            __m128i v1 = _mm_loadu_si128((const __m128i *)(p + i + 16));
            __m128i v2 = _mm_loadu_si128((const __m128i *)(p + i + 32));
            __m128i v3 = _mm_loadu_si128((const __m128i *)(p + i + 48));
            __m128i h0 = _mm_cmpeq_epi8(_mm_or_si128(v0, c07), c0f);
            __m128i h1 = _mm_cmpeq_epi8(_mm_or_si128(v1, c07), c0f);
            __m128i h2 = _mm_cmpeq_epi8(_mm_or_si128(v2, c07), c0f);
            __m128i h3 = _mm_cmpeq_epi8(_mm_or_si128(v3, c07), c0f);
            __m128i a = _mm_or_si128(_mm_or_si128(h0, v0), _mm_or_si128(h1, v1));
            __m128i b = _mm_or_si128(_mm_or_si128(h2, v2), _mm_or_si128(h3, v3));
            if (_mm_movemask_epi8(_mm_or_si128(a, b)))
                break;
            i += 64;
        }
        while (n - i >= 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)(p + i));
            em = (unsigned int)_mm_movemask_epi8(
                _mm_or_si128(_mm_cmpeq_epi8(v, nl), _mm_cmpeq_epi8(v, cr)));
            hm = (unsigned int)_mm_movemask_epi8(v);
            if ((em | hm) == 0) {
                i += 16;
                continue;
            }
            /* the first line end, unless a non-ASCII byte comes before it */
            if (em != 0 && (hm & ((em & (0u - em)) - 1u)) == 0) {
                i += llf_ctz(em);
                goto done;
            }
            i += llf_ctz(hm);
            break;
        }
        if (i < n && p[i] >= 0x80)
            continue;
        lim = n;  /* fewer than 16 bytes are left */
#else
        while (n - i >= 8) {
            uint64_t w, a, b;
            memcpy(&w, p + i, 8);
            a = w ^ (LLF_ONES * '\n');
            b = w ^ (LLF_ONES * '\r');
            /* a zero byte in a or b (exact as to whether there is one), or a high bit */
            if ((((a - LLF_ONES) & ~a) | ((b - LLF_ONES) & ~b) | w) & LLF_HIGH)
                break;
            i += 8;
        }
        lim = n - i >= 8 ? i + 8 : n;
#endif
        for (; i < lim; i++) {  /* ASCII bytes one by one, up to a non-ASCII one */
            c = p[i];
            if (c >= 0x80)
                break;
            if (c == '\n' || c == '\r')
                goto done;
        }
        if (i >= n)
            break;
    }
done:
    *st = s;
    *ncont = nc;
    *umax = mx;
    return i;
}

/* The offset of the first LF or CR in p[0:n), or n (no validation). */
static Py_ssize_t llf_find_eol(const char *p, Py_ssize_t n)
{
    const char *nl = (const char *)memchr(p, '\n', (size_t)n);
    Py_ssize_t lim = nl != NULL ? nl - p : n;
    const char *cr = (const char *)memchr(p, '\r', (size_t)lim);
    return cr != NULL ? cr - p : lim;
}

/* Copy the ASCII run at *pp (it ends at the first byte >= 0x80 or at e) to the str data
   `d` of kind `kind` from index i, widening each byte; return the index after it. With
   SSE2, 16 bytes a turn (the kind test is the same every turn: predicted); the rest, and
   everything elsewhere, byte by byte. */
static inline Py_ssize_t llf_ascii_run(const unsigned char **pp, const unsigned char *e,
                                       int kind, void *d, Py_ssize_t i)
{
    const unsigned char *p = *pp;
#ifdef LLF_SSE2
    const __m128i z = _mm_setzero_si128();
    while (e - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)p), lo, hi;
        if (_mm_movemask_epi8(v))
            break;
        if (kind == PyUnicode_1BYTE_KIND) {
            _mm_storeu_si128((__m128i *)((Py_UCS1 *)d + i), v);
        } else {
            lo = _mm_unpacklo_epi8(v, z);
            hi = _mm_unpackhi_epi8(v, z);
            if (kind == PyUnicode_2BYTE_KIND) {
                _mm_storeu_si128((__m128i *)((Py_UCS2 *)d + i), lo);
                _mm_storeu_si128((__m128i *)((Py_UCS2 *)d + i + 8), hi);
            } else {
                Py_UCS4 *o = (Py_UCS4 *)d + i;
                _mm_storeu_si128((__m128i *)o, _mm_unpacklo_epi16(lo, z));
                _mm_storeu_si128((__m128i *)(o + 4), _mm_unpackhi_epi16(lo, z));
                _mm_storeu_si128((__m128i *)(o + 8), _mm_unpacklo_epi16(hi, z));
                _mm_storeu_si128((__m128i *)(o + 12), _mm_unpackhi_epi16(hi, z));
            }
        }
        p += 16;
        i += 16;
    }
#endif
    while (p < e && *p < 0x80) {
        PyUnicode_WRITE(kind, d, i, *p);
        p++;
        i++;
    }
    *pp = p;
    return i;
}

/* The str of the valid UTF-8 s[0:n), which has `ncont` continuation bytes and `umax` as its
   largest byte: allocated once at its final length and kind, filled in one pass. */
static PyObject *llf_str(const char *s, Py_ssize_t n, Py_ssize_t ncont, unsigned int umax)
{
    const unsigned char *p = (const unsigned char *)s, *e = p + n;
    Py_ssize_t nchars = n - ncont, i = 0;
    PyObject *u;
    void *d;
    int kind;
    unsigned int c;
    Py_UCS4 ch;
    if (umax < 0x80) {
        u = PyUnicode_New(n, 127);
        if (u != NULL)
            memcpy(PyUnicode_1BYTE_DATA(u), s, (size_t)n);
        return u;
    }
    u = PyUnicode_New(nchars, umax < 0xC4 ? 0xFF : umax < 0xF0 ? 0xFFFF : 0x10FFFF);
    if (u == NULL)
        return NULL;
    kind = PyUnicode_KIND(u);
    d = PyUnicode_DATA(u);
    while (p < e) {
        c = *p;
        if (c < 0x80) {
            i = llf_ascii_run(&p, e, kind, d, i);
            continue;
        }
        if (c < 0xE0) {
            ch = ((c & 0x1F) << 6) | (p[1] & 0x3F);
            p += 2;
        } else if (c < 0xF0) {
            ch = ((c & 0x0F) << 12) | ((p[1] & 0x3F) << 6) | (p[2] & 0x3F);
            p += 3;
        } else {
            ch = ((c & 0x07) << 18) | ((p[1] & 0x3F) << 12) | ((p[2] & 0x3F) << 6)
                 | (p[3] & 0x3F);
            p += 4;
        }
        PyUnicode_WRITE(kind, d, i, ch);
        i++;
    }
    if (i != nchars || p != e) {  /* unreachable for validated input; never hand it out */
        Py_DECREF(u);
        PyErr_SetString(PyExc_SystemError, "llamafast: UTF-8 line counts out of step");
        return NULL;
    }
    return u;
}

#endif /* LLAMAFAST_SSE_SCAN_H */
