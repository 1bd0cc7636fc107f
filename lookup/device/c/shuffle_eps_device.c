/*
 * shuffle_eps_device.c - the C99 reader of shuffle-eps device files (formats 2 and 3).
 * Interface and memory rules: shuffle_eps_device.h.  Format: docs/device-format.md.
 *
 * Sections: SHA-256 (FIPS 180-4), UTF-8 validation, a strict JSON validator and readers for the
 * validated text, opening (header, checksum, axes, shape, payload, stored values), the query.
 */
#include "shuffle_eps_device.h"

#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef SHUFFLE_EPS_SODIUM
#include <sodium.h>
#endif

/* ------------------------------------------------------------------ SHA-256 (FIPS 180-4) */

/* first 32 bits of the fractional parts of the cube roots of the first 64 primes (4.2.2) */
static const uint32_t SHA_K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

/* first 32 bits of the fractional parts of the square roots of the first 8 primes (5.3.3) */
static const uint32_t SHA_H0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

typedef struct {
    uint32_t h[8];
    unsigned char block[64];
    size_t used;     /* bytes in block */
    uint64_t total;  /* bytes hashed */
} sha256_state;

static uint32_t rotr(uint32_t x, unsigned n) { return (uint32_t)((x >> n) | (x << (32u - n))); }

static void sha256_block(sha256_state *st, const unsigned char *m) {
    uint32_t w[64], a, b, c, d, e, f, g, h, t1, t2;
    unsigned t;
    for (t = 0; t < 16; t++) {
        w[t] = ((uint32_t)m[4 * t] << 24) | ((uint32_t)m[4 * t + 1] << 16) | ((uint32_t)m[4 * t + 2] << 8) |
               (uint32_t)m[4 * t + 3];
    }
    for (t = 16; t < 64; t++) {
        uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
        uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
        w[t] = (uint32_t)(s1 + w[t - 7] + s0 + w[t - 16]);
    }
    a = st->h[0], b = st->h[1], c = st->h[2], d = st->h[3];
    e = st->h[4], f = st->h[5], g = st->h[6], h = st->h[7];
    for (t = 0; t < 64; t++) {
        uint32_t big1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
        uint32_t ch = (e & f) ^ ((uint32_t)~e & g);
        uint32_t big0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
        uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
        t1 = (uint32_t)(h + big1 + ch + SHA_K[t] + w[t]);
        t2 = (uint32_t)(big0 + maj);
        h = g, g = f, f = e, e = (uint32_t)(d + t1), d = c, c = b, b = a, a = (uint32_t)(t1 + t2);
    }
    st->h[0] += a, st->h[1] += b, st->h[2] += c, st->h[3] += d;
    st->h[4] += e, st->h[5] += f, st->h[6] += g, st->h[7] += h;
}

static void sha256_init(sha256_state *st) {
    memcpy(st->h, SHA_H0, sizeof st->h);
    st->used = 0;
    st->total = 0;
}

static void sha256_update(sha256_state *st, const unsigned char *data, size_t len) {
    st->total += len;
    while (len > 0) {
        size_t take = 64 - st->used;
        if (take > len) take = len;
        memcpy(st->block + st->used, data, take);
        st->used += take, data += take, len -= take;
        if (st->used == 64) {
            sha256_block(st, st->block);
            st->used = 0;
        }
    }
}

static void sha256_final(sha256_state *st, unsigned char digest[32]) {
    uint64_t bits = st->total * 8u;
    unsigned char pad[72];
    size_t padlen = (st->used < 56 ? 56 : 120) - st->used, i;
    memset(pad, 0, sizeof pad);
    pad[0] = 0x80;
    for (i = 0; i < 8; i++) pad[padlen + i] = (unsigned char)(bits >> (56 - 8 * i));
    sha256_update(st, pad, padlen + 8);
    for (i = 0; i < 32; i++) digest[i] = (unsigned char)(st->h[i / 4] >> (24 - 8 * (i % 4)));
}

void shuffle_eps_sha256(const unsigned char *data, size_t len, unsigned char digest[32]) {
    sha256_state st;
    sha256_init(&st);
    if (data != NULL) sha256_update(&st, data, len);
    sha256_final(&st, digest);
}

/* ------------------------------------------------------------------ UTF-8 (as Python's strict decoder) */

static int utf8_valid(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        size_t more, k;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF) more = 1;
        else if (c >= 0xE0 && c <= 0xEF) more = 2;
        else if (c >= 0xF0 && c <= 0xF4) more = 3;
        else return 0;
        if (c == 0xE0) lo = 0xA0;       /* no overlong forms */
        else if (c == 0xED) hi = 0x9F;  /* no surrogates */
        else if (c == 0xF0) lo = 0x90;
        else if (c == 0xF4) hi = 0x8F;  /* nothing above U+10FFFF */
        if (n - i <= more) return 0;
        if (s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (k = 2; k <= more; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF) return 0;
        i += more + 1;
    }
    return 1;
}

/* ------------------------------------------------------------------ strict JSON (RFC 8259) */
/* The validator (j_check_*) reads s[0..n) and refuses anything that is not JSON, control
 * characters in strings, number literals longer than SHUFFLE_EPS_JSON_NUMBER_MAX, nesting deeper
 * than SHUFFLE_EPS_JSON_MAX_DEPTH, objects of more than SHUFFLE_EPS_JSON_MAX_MEMBERS members and
 * duplicate keys in an object (compared as decoded strings).
 * The readers after it (j_skip, j_next, j_member, j_char, j_number, ...) assume validated text. */

static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

static int hex_value(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static size_t j_ws(const unsigned char *s, size_t n, size_t i) {
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
    return i;
}

static int j_check_string(const unsigned char *s, size_t n, size_t i, size_t *end) {
    for (i++; i < n;) {
        unsigned char c = s[i];
        if (c == '"') {
            *end = i + 1;
            return 1;
        }
        if (c < 0x20) return 0;
        if (c != '\\') {
            i++;
            continue;
        }
        if (i + 1 >= n) return 0;
        c = s[i + 1];
        if (c == 'u') {
            size_t k;
            if (n - i < 6) return 0;
            for (k = 2; k < 6; k++)
                if (hex_value(s[i + k]) < 0) return 0;
            i += 6;
        } else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
            i += 2;
        } else {
            return 0;
        }
    }
    return 0;
}

static int j_check_number(const unsigned char *s, size_t n, size_t i, size_t *end) {
    size_t j = i;
    if (j < n && s[j] == '-') j++;
    if (j < n && s[j] == '0') {
        j++;
    } else if (j < n && s[j] >= '1' && s[j] <= '9') {
        while (j < n && is_digit(s[j])) j++;
    } else {
        return 0;
    }
    if (j < n && s[j] == '.') {
        j++;
        if (!(j < n && is_digit(s[j]))) return 0;
        while (j < n && is_digit(s[j])) j++;
    }
    if (j < n && (s[j] == 'e' || s[j] == 'E')) {
        j++;
        if (j < n && (s[j] == '+' || s[j] == '-')) j++;
        if (!(j < n && is_digit(s[j]))) return 0;
        while (j < n && is_digit(s[j])) j++;
    }
    if (j - i > SHUFFLE_EPS_JSON_NUMBER_MAX) return 0;
    *end = j;
    return 1;
}

/* the end of the (validated) value at s[i] */
static size_t j_skip(const unsigned char *s, size_t n, size_t i) {
    if (i >= n) return n;
    if (s[i] == '"') {
        for (i++; i < n && s[i] != '"'; i++)
            if (s[i] == '\\') i++;
        return i + 1;
    }
    if (s[i] == '{' || s[i] == '[') {
        size_t depth = 0;
        while (i < n) {
            unsigned char c = s[i];
            if (c == '"') {
                i = j_skip(s, n, i);
                continue;
            }
            if (c == '{' || c == '[') depth++;
            if (c == '}' || c == ']') depth--;
            i++;
            if (depth == 0) break;
        }
        return i;
    }
    while (i < n && s[i] != '\0' && (is_digit(s[i]) || strchr("+-.eEtrufalsn", s[i]) != NULL)) i++;
    return i;
}

/* next code point of a validated string whose contents continue at s[*i]; 0 at its closing quote */
static int j_char(const unsigned char *s, size_t *i, unsigned long *cp) {
    unsigned char c = s[*i];
    if (c == '"') {
        (*i)++;
        return 0;
    }
    if (c == '\\') {
        unsigned char e = s[*i + 1];
        unsigned long u;
        *i += 2;
        switch (e) {
            case 'b': *cp = 0x08; return 1;
            case 'f': *cp = 0x0C; return 1;
            case 'n': *cp = 0x0A; return 1;
            case 'r': *cp = 0x0D; return 1;
            case 't': *cp = 0x09; return 1;
            case 'u': break;
            default: *cp = e; return 1; /* " \ / */
        }
        u = (unsigned long)(hex_value(s[*i]) << 12 | hex_value(s[*i + 1]) << 8 | hex_value(s[*i + 2]) << 4 |
                            hex_value(s[*i + 3]));
        *i += 4;
        if (u >= 0xD800 && u <= 0xDBFF && s[*i] == '\\' && s[*i + 1] == 'u') { /* a surrogate pair */
            unsigned long v = (unsigned long)(hex_value(s[*i + 2]) << 12 | hex_value(s[*i + 3]) << 8 |
                                              hex_value(s[*i + 4]) << 4 | hex_value(s[*i + 5]));
            if (v >= 0xDC00 && v <= 0xDFFF) {
                *i += 6;
                u = 0x10000 + ((u - 0xD800) << 10) + (v - 0xDC00);
            }
        }
        *cp = u;
        return 1;
    }
    if (c < 0x80) {
        *cp = c;
        *i += 1;
    } else if (c < 0xE0) {
        *cp = ((unsigned long)(c & 0x1F) << 6) | (s[*i + 1] & 0x3Fu);
        *i += 2;
    } else if (c < 0xF0) {
        *cp = ((unsigned long)(c & 0x0F) << 12) | ((unsigned long)(s[*i + 1] & 0x3F) << 6) | (s[*i + 2] & 0x3Fu);
        *i += 3;
    } else {
        *cp = ((unsigned long)(c & 0x07) << 18) | ((unsigned long)(s[*i + 1] & 0x3F) << 12) |
              ((unsigned long)(s[*i + 2] & 0x3F) << 6) | (s[*i + 3] & 0x3Fu);
        *i += 4;
    }
    return 1;
}

/* the validated strings at a[ia] and b[ib] (opening quotes) hold the same characters */
static int j_string_equal(const unsigned char *a, size_t ia, const unsigned char *b, size_t ib) {
    unsigned long ca = 0, cb = 0;
    ia++, ib++;
    for (;;) {
        int more_a = j_char(a, &ia, &ca), more_b = j_char(b, &ib, &cb);
        if (!more_a || !more_b) return more_a == more_b;
        if (ca != cb) return 0;
    }
}

/* the validated string at s[i] is the ASCII text lit */
static int j_string_is(const unsigned char *s, size_t i, const char *lit) {
    unsigned long c = 0;
    for (i++;; lit++) {
        if (!j_char(s, &i, &c)) return *lit == '\0';
        if (*lit == '\0' || c != (unsigned char)*lit) return 0;
    }
}

/* object members of validated text: *i at '{' (first call) or after the previous value; 0 at the end */
static int j_member(const unsigned char *s, size_t n, size_t *i, size_t *key, size_t *value) {
    size_t p = *i;
    if (p >= n || s[p] == '}') return 0;
    p = j_ws(s, n, p + 1); /* past '{' or ',' */
    if (p >= n || s[p] == '}') {
        *i = p;
        return 0;
    }
    *key = p;
    p = j_ws(s, n, j_skip(s, n, p)); /* at ':' */
    *value = j_ws(s, n, p + 1);
    *i = j_ws(s, n, j_skip(s, n, *value)); /* at ',' or '}' */
    return 1;
}

/* array elements of validated text: *i at '[' (first call) or after the previous element */
static int j_next(const unsigned char *s, size_t n, size_t *i, size_t *element) {
    size_t p = *i;
    if (p >= n || s[p] == ']') return 0;
    p = j_ws(s, n, p + 1);
    if (p >= n || s[p] == ']') {
        *i = p;
        return 0;
    }
    *element = p;
    *i = j_ws(s, n, j_skip(s, n, p));
    return 1;
}

static size_t j_count(const unsigned char *s, size_t n, size_t i) {
    size_t count = 0, e;
    while (j_next(s, n, &i, &e)) count++;
    return count;
}

static int j_check_value(const unsigned char *s, size_t n, size_t i, int depth, size_t *end);

static int j_check_object(const unsigned char *s, size_t n, size_t i, int depth, size_t *end) {
    size_t open = i, members;
    if (depth >= SHUFFLE_EPS_JSON_MAX_DEPTH) return 0;
    i = j_ws(s, n, i + 1);
    if (i < n && s[i] == '}') {
        *end = i + 1;
        return 1;
    }
    for (members = 1;; members++) {
        size_t key = i, q = j_ws(s, n, open + 1);
        if (members > SHUFFLE_EPS_JSON_MAX_MEMBERS) return 0;
        if (i >= n || s[i] != '"' || !j_check_string(s, n, i, &i)) return 0;
        while (q < key) { /* the keys before this one (validated): none may be the same */
            if (j_string_equal(s, q, s, key)) return 0;
            q = j_ws(s, n, j_skip(s, n, q));                   /* at ':' */
            q = j_ws(s, n, j_skip(s, n, j_ws(s, n, q + 1)));   /* at ',' */
            q = j_ws(s, n, q + 1);
        }
        i = j_ws(s, n, i);
        if (i >= n || s[i] != ':') return 0;
        if (!j_check_value(s, n, j_ws(s, n, i + 1), depth + 1, &i)) return 0;
        i = j_ws(s, n, i);
        if (i < n && s[i] == '}') {
            *end = i + 1;
            return 1;
        }
        if (i >= n || s[i] != ',') return 0;
        i = j_ws(s, n, i + 1);
    }
}

static int j_check_array(const unsigned char *s, size_t n, size_t i, int depth, size_t *end) {
    if (depth >= SHUFFLE_EPS_JSON_MAX_DEPTH) return 0;
    i = j_ws(s, n, i + 1);
    if (i < n && s[i] == ']') {
        *end = i + 1;
        return 1;
    }
    for (;;) {
        if (!j_check_value(s, n, i, depth + 1, &i)) return 0;
        i = j_ws(s, n, i);
        if (i < n && s[i] == ']') {
            *end = i + 1;
            return 1;
        }
        if (i >= n || s[i] != ',') return 0;
        i = j_ws(s, n, i + 1);
    }
}

static int j_check_literal(const unsigned char *s, size_t n, size_t i, const char *lit, size_t *end) {
    size_t len = strlen(lit);
    if (n - i < len || memcmp(s + i, lit, len) != 0) return 0;
    *end = i + len;
    return 1;
}

static int j_check_value(const unsigned char *s, size_t n, size_t i, int depth, size_t *end) {
    if (i >= n) return 0;
    switch (s[i]) {
        case '{': return j_check_object(s, n, i, depth, end);
        case '[': return j_check_array(s, n, i, depth, end);
        case '"': return j_check_string(s, n, i, end);
        case 't': return j_check_literal(s, n, i, "true", end);
        case 'f': return j_check_literal(s, n, i, "false", end);
        case 'n': return j_check_literal(s, n, i, "null", end);
        default: return j_check_number(s, n, i, end);
    }
}

/* s[0..n) is exactly one JSON object (whitespace around it allowed) */
static int j_check_document(const unsigned char *s, size_t n) {
    size_t i = j_ws(s, n, 0), end;
    if (i >= n || s[i] != '{' || !j_check_value(s, n, i, 0, &end)) return 0;
    return j_ws(s, n, end) == n;
}

static int j_is_number(const unsigned char *s, size_t i) { return s[i] == '-' || is_digit(s[i]); }

static int j_is_integer_literal(const unsigned char *s, size_t n, size_t i) {
    size_t end = j_skip(s, n, i);
    for (; i < end; i++)
        if (s[i] == '.' || s[i] == 'e' || s[i] == 'E') return 0;
    return 1;
}

/* the validated number at s[i], converted by strtod in the current locale's decimal point */
static double j_number(const unsigned char *s, size_t n, size_t i) {
    char text[SHUFFLE_EPS_JSON_NUMBER_MAX + 16];
    const char *point = localeconv()->decimal_point;
    size_t end = j_skip(s, n, i), len = 0, plen = (point != NULL && point[0] != '\0') ? strlen(point) : 0;
    if (plen == 0 || plen > 8) point = ".", plen = 1;
    for (; i < end; i++) {
        if (s[i] == '.') {
            memcpy(text + len, point, plen);
            len += plen;
        } else {
            text[len++] = (char)s[i];
        }
    }
    text[len] = '\0';
    return strtod(text, NULL);
}

/* the validated values at a[ia] and b[ib] are equal (numbers as doubles, strings as characters,
 * objects whatever their member order; at the top level, null members are left out) */
static int j_equal(const unsigned char *a, size_t na, size_t ia, const unsigned char *b, size_t nb, size_t ib,
                   int top) {
    unsigned char ta = a[ia], tb = b[ib];
    if (j_is_number(a, ia) || j_is_number(b, ib))
        return j_is_number(a, ia) && j_is_number(b, ib) && j_number(a, na, ia) == j_number(b, nb, ib);
    if (ta != tb) return 0;
    if (ta == '"') return j_string_equal(a, ia, b, ib);
    if (ta == '[') {
        size_t ea = 0, eb = 0;
        for (;;) {
            int more_a = j_next(a, na, &ia, &ea), more_b = j_next(b, nb, &ib, &eb);
            if (!more_a || !more_b) return more_a == more_b;
            if (!j_equal(a, na, ea, b, nb, eb, 0)) return 0;
        }
    }
    if (ta == '{') {
        size_t count_a = 0, count_b = 0, at = ib, ka = 0, va = 0, kb = 0, vb = 0;
        while (j_member(b, nb, &at, &kb, &vb)) count_b += !(top && b[vb] == 'n');
        at = ia;
        while (j_member(a, na, &at, &ka, &va)) {
            size_t bt = ib;
            int found = 0;
            if (top && a[va] == 'n') continue;
            count_a++;
            while (!found && j_member(b, nb, &bt, &kb, &vb)) found = j_string_equal(a, ka, b, kb);
            if (!found || (top && b[vb] == 'n') || !j_equal(a, na, va, b, nb, vb, 0)) return 0;
        }
        return count_a == count_b;
    }
    return 1; /* the same literal: true, false or null */
}

/* ------------------------------------------------------------------ opening */

static const unsigned char MAGIC[8] = {'S', 'H', 'E', 'P', 'S', 'D', 'V', '1'};
static const char HEX[] = "0123456789abcdef"; /* lowercase hex digits, as digests are written */
static const char DIGEST_KEY[] = ",\"sha256\":\""; /* the header ends with DIGEST_KEY, 64 hex digits, "} */
#define DIGEST_KEY_LEN 11u
#define DIGEST_SUFFIX_LEN (DIGEST_KEY_LEN + 64u + 2u)

static const double MONOTONE_RTOL = 0.03;      /* lookup/store/checks.py */
static const double MONOTONE_ATOL = 1e-7;
static const double CAP_FACTOR = 1.0 + 0x1p-11; /* 1 + CAP_RTOL */
static const double FLOAT_SLACK_FACTOR = 1.0 + 1e-12;
static const double SIGMA_MIN = 0.2, SIGMA_MAX = 50.0; /* lookup/format.py: the Gaussian's sigma answered */

enum { K_FORMAT, K_FAMILY, K_ROWS, K_MONOTONE, K_EPS0, K_N, K_DELTA, K_SHAPE, K_DTYPE, K_SHA256, K_AXIS, K_SIGMA,
       K_COUNT };
static const char *const KEY_NAMES[K_COUNT] = {"format", "family", "rows", "eps0_monotone", "eps0",
                                               "n", "delta", "shape", "dtype", "sha256", "axis", "sigma"};

/* an IEEE 754 binary32 from 4 little-endian bytes, decoded arithmetically (exact) */
static double f32le(const unsigned char *p) {
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    int exponent = (int)((u >> 23) & 0xFF);
    double mantissa = (double)(u & 0x7FFFFF), v;
    if (exponent == 0xFF) v = (u & 0x7FFFFF) ? NAN : INFINITY;
    else if (exponent == 0) v = ldexp(mantissa, -149);
    else v = ldexp(mantissa + 8388608.0, exponent - 150);
    return (u >> 31) ? -v : v;
}

static uint32_t u32le(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* an axis (array at s[i]): finite numbers, strictly increasing, first >= lowest (> 0 unless
 * zero_ok), last < 1 if below_one, last <= highest; stored into out when out is not NULL */
static int check_axis(const unsigned char *s, size_t n, size_t i, double lowest, int zero_ok, int below_one,
                      double highest, double *out) {
    size_t e = 0, count = 0;
    double previous = 0;
    while (j_next(s, n, &i, &e)) {
        double v;
        if (!j_is_number(s, e)) return 0;
        v = j_number(s, n, e);
        if (!isfinite(v)) return 0;
        if (count == 0 ? (v < lowest || (!zero_ok && !(v > 0))) : !(previous < v)) return 0;
        if (out != NULL) out[count] = v;
        previous = v, count++;
    }
    return count > 0 && (!below_one || previous < 1) && previous <= highest;
}

static int fail_at(shuffle_eps_table *t, int status, size_t r, size_t e, size_t j, size_t d) {
    t->where[0] = r, t->where[1] = e, t->where[2] = j, t->where[3] = d;
    return status;
}

/* the invariants of lookup/store/checks.py check_row on row r, in the same order and float64 operations */
/* every row's parameters named once: a row given twice was answered from its first copy here and
 * from its last by lookup.open_table (issue 55); refused, as lookup/device/files.py refuses it */
static int distinct_rows(const unsigned char *h, size_t hn, size_t rows) {
    size_t a = rows, ea, b, eb;
    while (j_next(h, hn, &a, &ea)) {
        b = a;
        while (j_next(h, hn, &b, &eb))
            if (j_equal(h, hn, ea, h, hn, eb, 1)) return SHUFFLE_EPS_E_DUPLICATE_ROW;
    }
    return SHUFFLE_EPS_OK;
}

static int check_row(shuffle_eps_table *t, size_t r) {
    const size_t E = t->n_eps0, N = t->n_n, D = t->n_delta, cells = E * N * D, base = r * cells;
    const size_t strides[3] = {N * D, D, 1}, sizes[3] = {E, N, D};
    const int sigma = t->axis == SHUFFLE_EPS_AXIS_SIGMA; /* no eps0 cap; eps non-increasing in sigma */
    const double signs[3] = {sigma ? -1.0 : +1.0, -1.0, -1.0};
    size_t c, axis;
    for (c = 0; c < cells; c++) {
        double u = f32le(t->upper + 4 * (base + c)), cap = sigma ? INFINITY : t->eps0[c / (N * D)] * CAP_FACTOR;
        if (!(isfinite(u) && u >= 0 && u <= cap))
            return fail_at(t, SHUFFLE_EPS_E_VALUE, r, c / (N * D), c / D % N, c % D);
    }
    for (c = 0; c < cells; c++) {
        double u = f32le(t->upper + 4 * (base + c)), lo = f32le(t->lower + 4 * (base + c));
        if (!(isnan(lo) || (lo >= 0 && lo <= u)))
            return fail_at(t, SHUFFLE_EPS_E_LOWER, r, c / (N * D), c / D % N, c % D);
    }
    for (axis = 0; axis < 3; axis++) {
        if (axis == 0 && t->eps0_monotone[r] == 0.0) continue;
        for (c = 0; c < cells; c++) {
            double u, next, step;
            if (c / strides[axis] % sizes[axis] == sizes[axis] - 1) continue;
            u = f32le(t->upper + 4 * (base + c));
            next = f32le(t->upper + 4 * (base + c + strides[axis]));
            step = signs[axis] * (next - u);
            if (step < -(MONOTONE_RTOL * u + MONOTONE_ATOL))
                return fail_at(t, SHUFFLE_EPS_E_MONOTONE, r, c / (N * D), c / D % N, c % D);
        }
    }
    return SHUFFLE_EPS_OK;
}

/* a * b into *out unless it overflows a size_t */
static int mul_size(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > (size_t)-1 / a) return 0;
    *out = a * b;
    return 1;
}

/* the preamble of bytes[0..size): the magic and *hn, the header's length (at most SHUFFLE_EPS_MAX_HEADER) */
static int check_preamble(const unsigned char *bytes, size_t size, size_t *hn) {
    if (size < 12) return SHUFFLE_EPS_E_TRUNCATED;
    if (memcmp(bytes, MAGIC, 8) != 0) return SHUFFLE_EPS_E_MAGIC;
    *hn = u32le(bytes + 8);
    if (*hn > SHUFFLE_EPS_MAX_HEADER) return SHUFFLE_EPS_E_TOO_LARGE;
    return *hn > size - 12 ? SHUFFLE_EPS_E_TRUNCATED : SHUFFLE_EPS_OK;
}

/* the first axis of a header whose format is checked: format 3 names it ("eps0" or "sigma"), format 2 has
 * eps0; -1 where a format-3 "axis" is missing or another */
static int header_axis(const unsigned char *h, size_t hn, const size_t where[K_COUNT]) {
    if (j_number(h, hn, where[K_FORMAT]) != (double)SHUFFLE_EPS_DEVICE_FORMAT_AXIS) return SHUFFLE_EPS_AXIS_EPS0;
    if (where[K_AXIS] && j_string_is(h, where[K_AXIS], "eps0")) return SHUFFLE_EPS_AXIS_EPS0;
    if (where[K_AXIS] && j_string_is(h, where[K_AXIS], "sigma")) return SHUFFLE_EPS_AXIS_SIGMA;
    return -1;
}

/* the header h[0..hn): UTF-8, strict JSON, format, the digest field, every key with its type, the
 * axes and the shape; where[k] the value of key k (where[K_EPS0]: the first axis's, sigma's in a sigma
 * file), shape[] = [R, E, N, D], *axis the first axis (SHUFFLE_EPS_AXIS_EPS0 or _SIGMA) */
static int check_header(const unsigned char *h, size_t hn, size_t where[K_COUNT], size_t shape[4], int *axis) {
    size_t at, key, value, k, i, e, counts[4];
    double format;
    if (!utf8_valid(h, hn)) return SHUFFLE_EPS_E_ENCODING;
    if (!j_check_document(h, hn)) return SHUFFLE_EPS_E_JSON;
    for (k = 0; k < K_COUNT; k++) where[k] = 0;
    at = j_ws(h, hn, 0);
    while (j_member(h, hn, &at, &key, &value))
        for (k = 0; k < K_COUNT; k++)
            if (j_string_is(h, key, KEY_NAMES[k])) where[k] = value;

    if (!where[K_FORMAT] || !j_is_number(h, where[K_FORMAT])) return SHUFFLE_EPS_E_FORMAT;
    format = j_number(h, hn, where[K_FORMAT]);
    if (format != (double)SHUFFLE_EPS_DEVICE_FORMAT && format != (double)SHUFFLE_EPS_DEVICE_FORMAT_AXIS)
        return SHUFFLE_EPS_E_FORMAT;
    if (hn < DIGEST_SUFFIX_LEN || memcmp(h + hn - DIGEST_SUFFIX_LEN, DIGEST_KEY, DIGEST_KEY_LEN) != 0 ||
        h[hn - 2] != '"' || h[hn - 1] != '}' || where[K_SHA256] != hn - 66 - 1)
        return SHUFFLE_EPS_E_DIGEST_FIELD;
    for (i = hn - 66; i < hn - 2; i++)
        if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f'))) return SHUFFLE_EPS_E_DIGEST_FIELD;

    /* every key present with its type (lookup/device/files.py required_keys): a sigma file holds "sigma"
     * in place of "eps0" and "eps0_monotone" */
    if ((*axis = header_axis(h, hn, where)) < 0) return SHUFFLE_EPS_E_KEY;
    if (*axis == SHUFFLE_EPS_AXIS_SIGMA) where[K_EPS0] = where[K_SIGMA], where[K_MONOTONE] = 0;
    for (k = K_FAMILY; k <= K_SHA256; k++) {
        int string = k == K_FAMILY || k == K_DTYPE || k == K_SHA256;
        if (k == K_MONOTONE && *axis == SHUFFLE_EPS_AXIS_SIGMA) continue;
        if (!where[k] || h[where[k]] != (string ? '"' : '[')) return SHUFFLE_EPS_E_KEY;
    }
    at = where[K_ROWS];
    while (j_next(h, hn, &at, &e))
        if (h[e] != '{') return SHUFFLE_EPS_E_KEY;
    at = where[K_MONOTONE];
    while (at && j_next(h, hn, &at, &e))
        if (h[e] != 't' && h[e] != 'f') return SHUFFLE_EPS_E_KEY;
    if (!(*axis == SHUFFLE_EPS_AXIS_SIGMA ? check_axis(h, hn, where[K_EPS0], SIGMA_MIN, 0, 0, SIGMA_MAX, NULL)
                                          : check_axis(h, hn, where[K_EPS0], 0.0, 0, 0, INFINITY, NULL)) ||
        !check_axis(h, hn, where[K_N], 1.0, 1, 0, INFINITY, NULL) ||
        !check_axis(h, hn, where[K_DELTA], 0.0, 0, 1, INFINITY, NULL))
        return SHUFFLE_EPS_E_AXIS;

    /* shape [R, E, N, D] of integers equal to the rows and axes, dtype "<f4", one flag per row */
    counts[0] = j_count(h, hn, where[K_ROWS]), counts[1] = j_count(h, hn, where[K_EPS0]);
    counts[2] = j_count(h, hn, where[K_N]), counts[3] = j_count(h, hn, where[K_DELTA]);
    if (j_count(h, hn, where[K_SHAPE]) != 4 || !j_string_is(h, where[K_DTYPE], "<f4") ||
        (where[K_MONOTONE] && j_count(h, hn, where[K_MONOTONE]) != counts[0]))
        return SHUFFLE_EPS_E_SHAPE;
    at = where[K_SHAPE], i = 0;
    while (j_next(h, hn, &at, &e)) {
        if (!j_is_number(h, e) || !j_is_integer_literal(h, hn, e) || j_number(h, hn, e) != (double)counts[i])
            return SHUFFLE_EPS_E_SHAPE;
        shape[i] = counts[i];
        i++;
    }
    return SHUFFLE_EPS_OK;
}

/* 12 + hn + 8 R E N D, the size of the file (at most SHUFFLE_EPS_MAX_FILE) */
static int file_size(size_t hn, const size_t shape[4], size_t *size) {
    size_t count = 8, i;
    for (i = 0; i < 4; i++)
        if (!mul_size(count, shape[i], &count)) return SHUFFLE_EPS_E_TOO_LARGE;
    if (count > SHUFFLE_EPS_MAX_FILE - 12 - hn) return SHUFFLE_EPS_E_TOO_LARGE;
    *size = 12 + hn + count;
    return SHUFFLE_EPS_OK;
}

int shuffle_eps_file_size(const unsigned char *head, size_t len, size_t *size) {
    size_t hn = 0, where[K_COUNT], shape[4] = {0, 0, 0, 0};
    int status, axis;
    if ((head == NULL && len > 0) || size == NULL) return SHUFFLE_EPS_E_ARGUMENT;
    if (len < 12) {
        *size = 12;
        return SHUFFLE_EPS_E_MORE;
    }
    status = check_preamble(head, len, &hn);
    if (status == SHUFFLE_EPS_E_TRUNCATED) {
        *size = 12 + hn;
        return SHUFFLE_EPS_E_MORE;
    }
    if (status == SHUFFLE_EPS_OK) status = check_header(head + 12, hn, where, shape, &axis);
    return status == SHUFFLE_EPS_OK ? file_size(hn, shape, size) : status;
}

int shuffle_eps_open(shuffle_eps_table *t, const unsigned char *bytes, size_t size, double *work, size_t work_len) {
    const unsigned char *h;
    size_t hn = 0, at, where[K_COUNT], i, e, expected, payload_len, shape[4] = {0, 0, 0, 0};
    unsigned char digest[32];
    sha256_state st;
    static const char zeros[65] = "0000000000000000000000000000000000000000000000000000000000000000";
    double *out;
    int status, axis = SHUFFLE_EPS_AXIS_EPS0;

    if (t == NULL) return SHUFFLE_EPS_E_ARGUMENT;
    memset(t, 0, sizeof *t);
    if (bytes == NULL) return SHUFFLE_EPS_E_ARGUMENT;
    if ((status = check_preamble(bytes, size, &hn)) != SHUFFLE_EPS_OK) return status;
    h = bytes + 12;
    if ((status = check_header(h, hn, where, shape, &axis)) != SHUFFLE_EPS_OK) return status;
    if ((status = file_size(hn, shape, &expected)) != SHUFFLE_EPS_OK) return status;
    if (size != expected) return SHUFFLE_EPS_E_PAYLOAD;
    payload_len = size - 12 - hn;

    /* the SHA-256 of the header bytes with the 64 digest digits as '0', then the payload */
    sha256_init(&st);
    sha256_update(&st, h, hn - 66);
    sha256_update(&st, (const unsigned char *)zeros, 64);
    sha256_update(&st, h + hn - 2, 2);
    sha256_update(&st, h + hn, payload_len);
    sha256_final(&st, digest);
    for (i = 0; i < 32; i++)
        if (h[hn - 66 + 2 * i] != HEX[digest[i] >> 4] || h[hn - 66 + 2 * i + 1] != HEX[digest[i] & 15])
            return SHUFFLE_EPS_E_CHECKSUM;

    t->header = h, t->header_len = hn;
    t->upper = h + hn, t->lower = h + hn + payload_len / 2;
    t->rows = shape[0], t->n_eps0 = shape[1], t->n_n = shape[2], t->n_delta = shape[3];
    t->axis = axis;
    t->work_needed = shape[1] + shape[2] + shape[3] + shape[0];
    if (work == NULL || work_len < t->work_needed) return SHUFFLE_EPS_E_WORKSPACE;

    out = work;
    check_axis(h, hn, where[K_EPS0], 0.0, 0, 0, INFINITY, out); /* checked in its domain by check_header */
    t->eps0 = out, out += t->n_eps0;
    check_axis(h, hn, where[K_N], 1.0, 1, 0, INFINITY, out);
    t->n = out, out += t->n_n;
    check_axis(h, hn, where[K_DELTA], 0.0, 0, 1, INFINITY, out);
    t->delta = out, out += t->n_delta;
    for (i = 0; i < t->rows; i++) out[i] = 1.0; /* a sigma file: monotone in sigma, every row */
    at = where[K_MONOTONE], i = 0;
    while (at && j_next(h, hn, &at, &e)) out[i++] = h[e] == 't' ? 1.0 : 0.0;
    t->eps0_monotone = out;

    if ((status = distinct_rows(h, hn, where[K_ROWS])) != SHUFFLE_EPS_OK) return status;
    for (i = 0; i < t->rows; i++)
        if ((status = check_row(t, i)) != SHUFFLE_EPS_OK) return status;
    t->ready = 1;
    return SHUFFLE_EPS_OK;
}

/* ------------------------------------------------------------------ the query */

/* the first index with axis[i] >= x (bisect_left) */
static size_t first_at_least(const double *axis, size_t len, double x) {
    size_t lo = 0, hi = len;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (axis[mid] < x) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* the first index with axis[i] > x (bisect_right) */
static size_t first_above(const double *axis, size_t len, double x) {
    size_t lo = 0, hi = len;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (x < axis[mid]) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

/* where the value of the header's member name starts (an opened table has every required key) */
static size_t member_value(const shuffle_eps_table *t, const char *name) {
    size_t at = j_ws(t->header, t->header_len, 0), key, value;
    while (j_member(t->header, t->header_len, &at, &key, &value))
        if (j_string_is(t->header, key, name)) return value;
    return 0; /* not reached */
}

static int find_row(const shuffle_eps_table *t, const char *params, size_t *row) {
    const unsigned char *p = (const unsigned char *)params;
    size_t pn, at, e, r = 0, start;
    if (params == NULL) {
        *row = 0;
        return t->rows == 1 ? SHUFFLE_EPS_OK : SHUFFLE_EPS_E_ROW;
    }
    pn = strlen(params);
    start = j_ws(p, pn, 0);
    if (!utf8_valid(p, pn) || !j_check_document(p, pn)) return SHUFFLE_EPS_E_PARAMS;
    at = member_value(t, "rows");
    while (j_next(t->header, t->header_len, &at, &e)) {
        if (j_equal(p, pn, start, t->header, t->header_len, e, 1)) {
            *row = r;
            return SHUFFLE_EPS_OK;
        }
        r++;
    }
    return SHUFFLE_EPS_E_ROW;
}

static double stored(const shuffle_eps_table *t, size_t r, size_t e, size_t j, size_t d) {
    return f32le(t->upper + 4 * (((r * t->n_eps0 + e) * t->n_n + j) * t->n_delta + d));
}

/* the query's checks before its first axis is located, as DeviceTable._checked_row: the table ready and
 * vouched for, a query on the file's first axis (axis) with x > 0, 1 <= n < inf, 0 < delta < 1, its row *r */
static int query_row(const shuffle_eps_table *t, const char *params_json, int axis, double x, double n,
                     double delta, const double *eps_out, size_t *r) {
    int status;
    if (t == NULL || !t->ready || eps_out == NULL) return SHUFFLE_EPS_E_ARGUMENT;
    if (!t->vouched) return SHUFFLE_EPS_E_UNTRUSTED;
    if (t->axis != axis) return SHUFFLE_EPS_E_AXIS_KIND;
    if (!(x > 0 && x < INFINITY && n >= 1 && n < INFINITY && delta > 0 && delta < 1)) return SHUFFLE_EPS_E_QUERY;
    if (params_json == NULL && t->expected_row != SHUFFLE_EPS_ANY_ROW) {
        *r = t->expected_row;
    } else if ((status = find_row(t, params_json, r)) != SHUFFLE_EPS_OK) {
        return status;
    } else if (t->expected_row != SHUFFLE_EPS_ANY_ROW && *r != t->expected_row) {
        return SHUFFLE_EPS_E_MECHANISM;
    }
    return SHUFFLE_EPS_OK;
}

/* the stored eps of row r at first-axis index e and n index j, on the chord in (e^eps, delta) between the
 * stored deltas around delta (delta >= the smallest stored; above the largest, the largest's) */
static double on_chord(const shuffle_eps_table *t, size_t r, size_t e, size_t j, double delta) {
    size_t hi, lo;
    double eps, weight = 0.0;
    hi = first_at_least(t->delta, t->n_delta, delta);
    if (hi > t->n_delta - 1) hi = t->n_delta - 1;
    lo = hi;
    if (delta < t->delta[hi]) {
        lo = hi - 1;
        weight = (t->delta[hi] - delta) / (t->delta[hi] - t->delta[lo]);
    }
    if (weight == 0.0) {
        eps = stored(t, r, e, j, hi);
    } else { /* the chord in (e^eps, delta), as lookup/device/files.py chord: one operation per statement */
        double below = expm1(stored(t, r, e, j, lo)), above = expm1(stored(t, r, e, j, hi));
        double part_below = weight * below;
        double part_above = (1 - weight) * above;
        double x = part_below + part_above;
        eps = log1p(x) * FLOAT_SLACK_FACTOR;
    }
    return eps;
}

int shuffle_eps_eps(const shuffle_eps_table *t, const char *params_json, double eps0, double n, double delta,
                    double *eps_out) {
    size_t r, e, j;
    double eps;
    int status = query_row(t, params_json, SHUFFLE_EPS_AXIS_EPS0, eps0, n, delta, eps_out, &r);
    if (status != SHUFFLE_EPS_OK) return status;
    e = first_at_least(t->eps0, t->n_eps0, eps0); /* eps0 rounded up */
    if (e == t->n_eps0) return SHUFFLE_EPS_E_EPS0_ABOVE;
    j = first_above(t->n, t->n_n, n); /* n rounded down: the index before */
    if (j == 0) return SHUFFLE_EPS_E_N_BELOW;
    j--;
    if (delta < t->delta[0]) return SHUFFLE_EPS_E_DELTA_BELOW;
    if (t->eps0_monotone[r] == 0.0 && t->eps0[e] != eps0) return SHUFFLE_EPS_E_EPS0_OFF_GRID;
    eps = on_chord(t, r, e, j, delta);
    *eps_out = eps <= eps0 ? eps : eps0;
    return SHUFFLE_EPS_OK;
}

int shuffle_eps_sigma(const shuffle_eps_table *t, const char *params_json, double sigma, double n, double delta,
                      double *eps_out) {
    size_t r, k, j;
    int status = query_row(t, params_json, SHUFFLE_EPS_AXIS_SIGMA, sigma, n, delta, eps_out, &r);
    if (status != SHUFFLE_EPS_OK) return status;
    k = first_above(t->eps0, t->n_eps0, sigma); /* sigma rounded DOWN: the exact eps is non-increasing in it */
    if (k == 0) return SHUFFLE_EPS_E_SIGMA_BELOW;
    j = first_above(t->n, t->n_n, n); /* n rounded down */
    if (j == 0) return SHUFFLE_EPS_E_N_BELOW;
    if (delta < t->delta[0]) return SHUFFLE_EPS_E_DELTA_BELOW;
    *eps_out = on_chord(t, r, k - 1, j - 1, delta); /* no cap: the Gaussian has no eps0 */
    return SHUFFLE_EPS_OK;
}

/* ------------------------------------------------------------------ trust */

/* what a signature signs (lookup/device/files.py signed_message): this, the family, "\nrows ", the SHA-256 of the
 * header's rows as written (hex), "\nsha256 ", the file's digest */
static const char SIGNED[] = "shuffle-eps device file 2\nfamily ";

/* the file is for the mechanism expected: its family, and a row of the parameters params_json (NULL: any row);
 * that row (or SHUFFLE_EPS_ANY_ROW) kept as the only one answered */
static int expect(shuffle_eps_table *t, const char *family, const char *params_json) {
    size_t row = SHUFFLE_EPS_ANY_ROW;
    int status;
    if (t == NULL || !t->ready || family == NULL || strlen(family) > SHUFFLE_EPS_FAMILY_MAX)
        return SHUFFLE_EPS_E_ARGUMENT;
    t->vouched = 0;
    if (!j_string_is(t->header, member_value(t, "family"), family)) return SHUFFLE_EPS_E_MECHANISM;
    if (params_json != NULL && (status = find_row(t, params_json, &row)) != SHUFFLE_EPS_OK)
        return status == SHUFFLE_EPS_E_ROW ? SHUFFLE_EPS_E_MECHANISM : status;
    t->expected_row = row;
    return SHUFFLE_EPS_OK;
}

int shuffle_eps_trust_bundled(shuffle_eps_table *t, const char *family, const char *params_json) {
    int status = expect(t, family, params_json);
    if (status == SHUFFLE_EPS_OK) t->vouched = 1;
    return status;
}

/* the 2 * out_len hex digits after "key": "  in sig[0..n), into out; 0 if absent or malformed */
static int sig_hex(const unsigned char *sig, size_t n, const char *key, unsigned char *out, size_t out_len) {
    size_t k = strlen(key), i, at;
    for (at = 0; at + k + 2 <= n; at++) {
        if (sig[at] != '"' || memcmp(sig + at + 1, key, k) != 0 || sig[at + 1 + k] != '"') continue;
        at += k + 2;
        while (at < n && (sig[at] == ' ' || sig[at] == ':')) at++;
        if (at + 2 * out_len + 1 > n || sig[at] != '"' || sig[at + 1 + 2 * out_len] != '"') return 0;
        for (i = 0; i < 2 * out_len; i++) {
            unsigned char c = sig[at + 1 + i];
            int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
            if (v < 0) return 0;
            if (i % 2 == 0) out[i / 2] = (unsigned char)(v << 4);
            else out[i / 2] |= (unsigned char)v;
        }
        return 1;
    }
    return 0;
}

/* the message a signature of the opened file signs for family (as expect checked it); its length */
static size_t signed_message(const shuffle_eps_table *t, const char *family, unsigned char *message) {
    size_t rows = member_value(t, "rows"), len = sizeof SIGNED - 1, i;
    unsigned char digest[32];
    memcpy(message, SIGNED, len);
    memcpy(message + len, family, strlen(family));
    len += strlen(family);
    memcpy(message + len, "\nrows ", 6);
    len += 6;
    shuffle_eps_sha256(t->header + rows, j_skip(t->header, t->header_len, rows) - rows, digest);
    for (i = 0; i < 32; i++) {
        message[len++] = (unsigned char)HEX[digest[i] >> 4];
        message[len++] = (unsigned char)HEX[digest[i] & 15];
    }
    memcpy(message + len, "\nsha256 ", 8);
    len += 8;
    memcpy(message + len, t->header + t->header_len - 66, 64); /* the file's own, verified by shuffle_eps_open */
    return len + 64;
}

int shuffle_eps_verify_signature(shuffle_eps_table *t, const char *family, const char *params_json,
                                 const unsigned char *sig, size_t sig_len, const unsigned char public_key[32]) {
    unsigned char signature[64], signer[32], message[sizeof SIGNED + SHUFFLE_EPS_FAMILY_MAX + 6 + 64 + 8 + 64];
    size_t message_len;
    int status;
    if (sig == NULL || public_key == NULL) return SHUFFLE_EPS_E_ARGUMENT;
    if ((status = expect(t, family, params_json)) != SHUFFLE_EPS_OK) return status;
    if (!sig_hex(sig, sig_len, "signature", signature, 64) || !sig_hex(sig, sig_len, "public_key", signer, 32)
        || memcmp(signer, public_key, 32) != 0)
        return SHUFFLE_EPS_E_SIGNATURE;
    message_len = signed_message(t, family, message);
#ifdef SHUFFLE_EPS_SODIUM
    if (sodium_init() < 0) return SHUFFLE_EPS_E_NO_SODIUM;
    if (crypto_sign_verify_detached(signature, message, message_len, public_key) != 0)
        return SHUFFLE_EPS_E_SIGNATURE;
    t->vouched = 2;
    return SHUFFLE_EPS_OK;
#else
    (void)message_len;
    return SHUFFLE_EPS_E_NO_SODIUM;
#endif
}

int shuffle_eps_row_json(const shuffle_eps_table *t, size_t r, const char **text, size_t *len) {
    size_t at, e, i = 0;
    if (t == NULL || !t->ready || text == NULL || len == NULL || r >= t->rows) return SHUFFLE_EPS_E_ARGUMENT;
    at = member_value(t, "rows");
    while (j_next(t->header, t->header_len, &at, &e)) {
        if (i++ == r) {
            *text = (const char *)t->header + e;
            *len = j_skip(t->header, t->header_len, e) - e;
            return SHUFFLE_EPS_OK;
        }
    }
    return SHUFFLE_EPS_E_ARGUMENT;
}

const char *shuffle_eps_status_message(int status) {
    switch (status) {
        case SHUFFLE_EPS_OK: return "ok";
        case SHUFFLE_EPS_E_ARGUMENT: return "bad argument (a NULL pointer, an unopened table or a bad command line)";
        case SHUFFLE_EPS_E_IO: return "the file could not be read";
        case SHUFFLE_EPS_E_WORKSPACE: return "the work array is too short (see work_needed)";
        case SHUFFLE_EPS_E_MORE: return "more of the file is needed to tell its size (see shuffle_eps_file_size)";
        case SHUFFLE_EPS_E_TRUNCATED: return "refused: the file is truncated (shorter than its header says)";
        case SHUFFLE_EPS_E_MAGIC: return "not a shuffle-eps device file (bad magic)";
        case SHUFFLE_EPS_E_ENCODING: return "refused: the header is not valid UTF-8";
        case SHUFFLE_EPS_E_JSON: return "refused: the header is not one strict JSON object";
        case SHUFFLE_EPS_E_FORMAT:
            return "unsupported format (this reader reads formats 2 and 3; re-export older files with tablegen export --device)";
        case SHUFFLE_EPS_E_DIGEST_FIELD:
            return "refused: the header does not end with its SHA-256 (,\"sha256\":\"<64 lowercase hex digits>\"})";
        case SHUFFLE_EPS_E_CHECKSUM:
            return "refused: header and payload do not match their SHA-256 (corrupted or modified)";
        case SHUFFLE_EPS_E_KEY: return "refused: a required header key is missing or of the wrong type";
        case SHUFFLE_EPS_E_AXIS:
            return "refused: a header axis is not finite numbers strictly increasing in its domain";
        case SHUFFLE_EPS_E_SHAPE: return "refused: the header's shape or dtype does not match its axes and rows";
        case SHUFFLE_EPS_E_DUPLICATE_ROW: return "refused: the header names the same row's parameters twice";
        case SHUFFLE_EPS_E_PAYLOAD:
            return "refused: the file's size is not the one its header gives (12 + H + 8 R E N D bytes)";
        case SHUFFLE_EPS_E_TOO_LARGE:
            return "refused: the header or the file is larger than this reader reads (SHUFFLE_EPS_MAX_HEADER, _FILE)";
        case SHUFFLE_EPS_E_VALUE:
            return "refused: a stored eps is not finite or outside [0, eps0] (a sigma file: not finite or negative)";
        case SHUFFLE_EPS_E_LOWER: return "refused: a stored lower bound is outside [0, eps]";
        case SHUFFLE_EPS_E_MONOTONE:
            return "refused: the stored eps is not monotone as the exact eps is (more than 3% against it)";
        case SHUFFLE_EPS_E_QUERY: return "bad query: need eps0 (or sigma) > 0, 1 <= n < inf and 0 < delta < 1";
        case SHUFFLE_EPS_E_PARAMS: return "bad parameters: not a JSON object";
        case SHUFFLE_EPS_E_ROW: return "the device file has no row with these parameters";
        case SHUFFLE_EPS_E_EPS0_ABOVE: return "not covered: eps0 is above the largest eps0 of the device file";
        case SHUFFLE_EPS_E_N_BELOW: return "not covered: n is below the smallest n of the device file";
        case SHUFFLE_EPS_E_DELTA_BELOW: return "not covered: delta is below the smallest delta of the device file";
        case SHUFFLE_EPS_E_EPS0_OFF_GRID:
            return "not covered: this row answers only at the eps0 values stored in the device file";
        case SHUFFLE_EPS_E_SIGMA_BELOW: return "not covered: sigma is below the smallest sigma of the device file";
        case SHUFFLE_EPS_E_AXIS_KIND:
            return "refused: the device file's first axis is sigma and the query's eps0, or the reverse (a sigma is "
                   "not an eps0)";
        case SHUFFLE_EPS_E_UNTRUSTED:
            return "refused: nothing vouches for the file (ship it inside a signed bundle, or check its signature)";
        case SHUFFLE_EPS_E_SIGNATURE:
            return "refused: its signature is malformed, by another key, or does not verify (changed after signing, or "
                   "signed for its digest alone by an older tablegen sign: sign it again)";
        case SHUFFLE_EPS_E_NO_SODIUM:
            return "signatures cannot be checked: compile with -DSHUFFLE_EPS_SODIUM and link -lsodium";
        case SHUFFLE_EPS_E_MECHANISM:
            return "refused: the file is for another mechanism (its family, or its rows' parameters, are not the "
                   "ones expected)";
        default: return "unknown status";
    }
}
