/*
 * shuffle_eps_device.h - a C99 reader for shuffle-eps device files (formats 2 and 3).
 *
 * A device file holds certified shuffle-model privacy numbers eps(eps0, n, delta) for the rows of
 * one mechanism family, as written by `tablegen export --device`; a sigma file (format 3, "axis":
 * "sigma": the shuffled Gaussian) holds eps(sigma, n, delta) and answers shuffle_eps_sigma only.  This reader checks the whole
 * file when it is opened (magic, header length, UTF-8, strict JSON, format, SHA-256, every header
 * key and type, the axes, the shape, the payload's length, and every stored value against the
 * invariants of certified values) and answers queries by the conservative rules of the Python
 * reader `lookup.device.DeviceTable.eps`, with the same operations, so answers are the same
 * doubles.  The format byte by byte, the rules and why each is safe: docs/device-format.md.
 *
 * Portability: C99, libc and libm only (-lm).  No global state, no allocation: the caller owns all
 * memory.  The payload is decoded from its little-endian bytes explicitly (no casts), so the
 * reader works on any byte order.  Numbers in the header are parsed with strtod in the current C
 * locale's decimal point (the reader substitutes it for '.'), so any locale is fine; as for any
 * strtod caller, do not change the locale (setlocale) in another thread while opening or querying.
 *
 * Memory: the caller passes the file's bytes, which must stay alive and unchanged while the table
 * is used (the table points into them), and a work array of doubles for the decoded axes, of
 * length `work_needed` (eps0 + n + delta axis lengths + rows).  Learn it by a first call with no
 * work array:
 *
 *     shuffle_eps_table t;
 *     double *work = NULL;
 *     int status = shuffle_eps_open(&t, bytes, size, NULL, 0);
 *     if (status == SHUFFLE_EPS_E_WORKSPACE) {
 *         work = malloc(t.work_needed * sizeof *work);     (or a static buffer)
 *         status = work ? shuffle_eps_open(&t, bytes, size, work, t.work_needed) : SHUFFLE_EPS_E_ARGUMENT;
 *     }
 *     if (status == SHUFFLE_EPS_OK)        (it came inside our signed firmware: see Trust below)
 *         status = shuffle_eps_trust_bundled(&t, "krr", "{\"k\":10}");
 *     if (status != SHUFFLE_EPS_OK) { puts(shuffle_eps_status_message(status)); ... }
 *     double eps;
 *     status = shuffle_eps_eps(&t, NULL, 1.0, 250000, 1e-8, &eps);     (the row vouched for: k = 10)
 *     ...
 *     free(work);     (and the file bytes: the table itself holds nothing to release)
 *
 * Trust (docs/trust.md): a checksum proves a file intact, not who wrote it.  An opened table
 * answers only once it is vouched for, as the mechanism the caller answers (its family, and the
 * parameters of its row or NULL for any row of the family; a file of another mechanism is refused,
 * SHUFFLE_EPS_E_MECHANISM): shuffle_eps_trust_bundled (the caller declares the file came inside its
 * own signed firmware or bundle) or shuffle_eps_verify_signature (the Ed25519 signature `tablegen
 * sign` writes beside it, FILE.sig, of the file's family, rows and digest, checked against a public
 * key the device trusts; needs libsodium: compile with -DSHUFFLE_EPS_SODIUM and link -lsodium).
 * Until then shuffle_eps_eps returns SHUFFLE_EPS_E_UNTRUSTED.
 *
 * Size: a file is refused unless it has the size its header gives, 12 + H + 8 R E N D bytes, with
 * H <= SHUFFLE_EPS_MAX_HEADER and the whole <= SHUFFLE_EPS_MAX_FILE.  Reading a file, ask
 * shuffle_eps_file_size for its size from its first bytes before reading (or allocating) the rest.
 *
 * Every function returns a status (0: SHUFFLE_EPS_OK); a refusal never writes a result.
 * Compile the library with -std=c99 (GCC then contracts no floating-point operations, as the
 * Python reader does not); with clang or -std=gnu99 add -ffp-contract=off for answers identical
 * to the bit (otherwise within an ulp or so).
 */
#ifndef SHUFFLE_EPS_DEVICE_H
#define SHUFFLE_EPS_DEVICE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SHUFFLE_EPS_DEVICE_FORMAT 2      /* the header's "format" of an eps0 file */
#define SHUFFLE_EPS_DEVICE_FORMAT_AXIS 3 /* the header's "format" of a file naming its first axis ("axis") */
#define SHUFFLE_EPS_AXIS_EPS0 0          /* table->axis: the first axis is eps0 (answered by shuffle_eps_eps) */
#define SHUFFLE_EPS_AXIS_SIGMA 1         /* table->axis: the first axis is sigma (answered by shuffle_eps_sigma) */
#define SHUFFLE_EPS_JSON_MAX_DEPTH 64    /* deeper JSON nesting is refused */
#define SHUFFLE_EPS_JSON_NUMBER_MAX 400  /* longer JSON number literals are refused */
#define SHUFFLE_EPS_JSON_MAX_MEMBERS 1024 /* objects with more members are refused (duplicate keys are
                                             looked for without memory: quadratic in the members) */
#define SHUFFLE_EPS_MAX_HEADER (1u << 20)     /* header bytes (exported headers: 4.7-13 KB) */
#define SHUFFLE_EPS_MAX_FILE ((size_t)256 << 20) /* file bytes (the whole k-RR family of the default table: 82 MB) */
#define SHUFFLE_EPS_FAMILY_MAX 64            /* bytes of a family name given to the trust functions */
#define SHUFFLE_EPS_ANY_ROW ((size_t)-1)     /* table->expected_row: every row of the family is answered */

/* Status codes (also the exit codes of shuffle_eps_query).  Names and meanings are stable. */
enum shuffle_eps_status {
    SHUFFLE_EPS_OK = 0,
    /* the call */
    SHUFFLE_EPS_E_ARGUMENT = 1,       /* a NULL pointer, an unopened table, a bad command line */
    SHUFFLE_EPS_E_IO = 2,             /* the file could not be read (shuffle_eps_query only) */
    SHUFFLE_EPS_E_WORKSPACE = 3,      /* the work array is shorter than table->work_needed */
    SHUFFLE_EPS_E_MORE = 4,           /* shuffle_eps_file_size needs more of the file's first bytes */
    /* the file: refused when opened */
    SHUFFLE_EPS_E_TRUNCATED = 10,     /* shorter than 12 bytes, or than 12 + the header length */
    SHUFFLE_EPS_E_MAGIC = 11,         /* does not start with "SHEPSDV1": not a device file */
    SHUFFLE_EPS_E_ENCODING = 12,      /* the header is not valid UTF-8 */
    SHUFFLE_EPS_E_JSON = 13,          /* the header is not one strict JSON object (duplicate keys, NaN, ...
                                         or beyond the limits above, which exported files are far within) */
    SHUFFLE_EPS_E_FORMAT = 14,        /* "format" missing or not 2 or 3 (format 1 files: re-export them) */
    SHUFFLE_EPS_E_DIGEST_FIELD = 15,  /* the header does not end with ,"sha256":"<64 lowercase hex>"} */
    SHUFFLE_EPS_E_CHECKSUM = 16,      /* header and payload do not match their SHA-256 */
    SHUFFLE_EPS_E_KEY = 17,           /* a required header key missing or of the wrong type (format 3: "axis"
                                         not "eps0" or "sigma") */
    SHUFFLE_EPS_E_AXIS = 18,          /* an axis not finite numbers strictly increasing in its domain */
    SHUFFLE_EPS_E_SHAPE = 19,         /* shape, dtype or eps0_monotone disagree with the axes and rows */
    SHUFFLE_EPS_E_PAYLOAD = 20,       /* the file is not 12 + H + 8 * R * E * N * D bytes (its header's size) */
    SHUFFLE_EPS_E_TOO_LARGE = 21,     /* a header over SHUFFLE_EPS_MAX_HEADER or a file over SHUFFLE_EPS_MAX_FILE */
    SHUFFLE_EPS_E_DUPLICATE_ROW = 22, /* two rows with the same parameters (readers would disagree on which) */
    SHUFFLE_EPS_E_VALUE = 30,         /* a certified eps not finite or outside [0, eps0 (1 + 2^-11)] (sigma: < 0) */
    SHUFFLE_EPS_E_LOWER = 31,         /* a lower bound neither NaN nor in [0, eps] */
    SHUFFLE_EPS_E_MONOTONE = 32,      /* eps not monotone as the exact eps is, beyond 3% + 1e-7 */
    /* the query: refused, never extrapolated */
    SHUFFLE_EPS_E_QUERY = 40,         /* not eps0 (sigma) > 0, 1 <= n < inf and 0 < delta < 1 */
    SHUFFLE_EPS_E_PARAMS = 41,        /* the parameters are not a JSON object */
    SHUFFLE_EPS_E_ROW = 42,           /* no row with these parameters (or none given, several rows) */
    SHUFFLE_EPS_E_EPS0_ABOVE = 43,    /* eps0 above the largest stored eps0 */
    SHUFFLE_EPS_E_N_BELOW = 44,       /* n below the smallest stored n */
    SHUFFLE_EPS_E_DELTA_BELOW = 45,   /* delta below the smallest stored delta */
    SHUFFLE_EPS_E_EPS0_OFF_GRID = 46, /* the row answers at its stored eps0 only (eps0_monotone false) */
    SHUFFLE_EPS_E_SIGMA_BELOW = 47,   /* sigma below the smallest stored sigma */
    SHUFFLE_EPS_E_AXIS_KIND = 48,     /* an eps0 query of a sigma file (shuffle_eps_eps) or the reverse */
    /* trust: nothing vouches for the file yet */
    SHUFFLE_EPS_E_UNTRUSTED = 50,     /* neither shuffle_eps_trust_bundled nor a verified signature */
    SHUFFLE_EPS_E_SIGNATURE = 51,     /* the signature is malformed or does not verify with the trusted key */
    SHUFFLE_EPS_E_NO_SODIUM = 52,     /* compiled without -DSHUFFLE_EPS_SODIUM: signatures cannot be checked */
    SHUFFLE_EPS_E_MECHANISM = 53      /* the file is for another family, has no row of the parameters expected,
                                         or a query names another row than the one it was vouched for */
};

/* An opened device file.  Read the fields, never write them; valid while the file bytes and the
 * work array live. */
typedef struct shuffle_eps_table {
    const unsigned char *header;   /* the header's JSON text (header_len bytes, not NUL-terminated) */
    size_t header_len;
    const unsigned char *upper;    /* R*E*N*D little-endian float32 certified eps, C order */
    const unsigned char *lower;    /* R*E*N*D little-endian float32 lower bounds (NaN: none) */
    size_t rows, n_eps0, n_n, n_delta;
    const double *eps0, *n, *delta;  /* the ascending axes, in the work array (a sigma file: eps0, n_eps0
                                        hold its sigma axis) */
    const double *eps0_monotone;     /* per row, 1.0 or 0.0, in the work array (a sigma file: 1.0) */
    int axis;                        /* SHUFFLE_EPS_AXIS_EPS0 or SHUFFLE_EPS_AXIS_SIGMA */
    size_t work_needed;              /* doubles of work: n_eps0 + n_n + n_delta + rows */
    size_t where[4];                 /* after E_VALUE, E_LOWER, E_MONOTONE: row, eps0, n, delta index */
    int ready;                       /* nonzero once opened */
    int vouched;                     /* nonzero once trusted: 1 bundled, 2 signed by a trusted key */
    size_t expected_row;             /* once vouched: the only row answered, or SHUFFLE_EPS_ANY_ROW */
} shuffle_eps_table;

/* The size the device file starting with head[0..len) must have.  With fewer bytes than its preamble
 * (12) and header (12 + H) hold, SHUFFLE_EPS_E_MORE and *size the bytes to read first (call again
 * with them; head may be NULL when len is 0); then, its header checked as shuffle_eps_open checks it,
 * SHUFFLE_EPS_OK and *size = 12 + H + 8 R E N D: read that many bytes and no file of another size.
 * Refusals: E_MAGIC, E_TOO_LARGE, E_ENCODING .. E_SHAPE. */
int shuffle_eps_file_size(const unsigned char *head, size_t len, size_t *size);

/* Open and check the device file held in bytes[0..size).  On SHUFFLE_EPS_OK the table is ready;
 * on SHUFFLE_EPS_E_WORKSPACE (work_len < table->work_needed, e.g. 0) the whole file but the
 * stored values has been checked: call again with a work array of work_needed doubles.  Any other
 * status refuses the file (table->where names the cell for the value checks). */
int shuffle_eps_open(shuffle_eps_table *table, const unsigned char *bytes, size_t size, double *work,
                     size_t work_len);

/* The certified eps at (eps0, n, delta) for the row whose parameters equal params_json (a JSON
 * object, e.g. "{\"k\":10}" or "{}"; compared as values: key order, spacing and 10 vs 10.0 do not
 * matter, null members are ignored), or when params_json is NULL for the row the table was vouched
 * for (or the only row).  The rules,
 * as DeviceTable.eps: eps0 rounded up to a stored eps0, n down to a stored n, delta on the chord
 * in (e^eps, delta) between the two stored deltas around it (rounded up by 1 + 1e-12; a delta
 * above the largest takes the largest), the result capped at eps0.  Refusals: E_ARGUMENT,
 * E_AXIS_KIND (a sigma file), E_QUERY, E_PARAMS, E_ROW, E_MECHANISM (another row than the one vouched for),
 * E_EPS0_ABOVE, E_N_BELOW, E_DELTA_BELOW, E_EPS0_OFF_GRID. */
int shuffle_eps_eps(const shuffle_eps_table *table, const char *params_json, double eps0, double n, double delta,
                    double *eps_out);

/* The certified eps of a sigma file (the shuffled Gaussian, params_json e.g. "{\"inputs\":\"bits\"}") at
 * (sigma, n, delta), as DeviceTable.eps_sigma: sigma rounded DOWN to a stored sigma, n down, delta on the
 * chord as shuffle_eps_eps, no cap.  Safe because the exact eps is non-increasing in sigma (more noise is
 * post-processing), n and delta.  Refusals: E_ARGUMENT, E_AXIS_KIND (an eps0 file), E_QUERY, E_PARAMS,
 * E_ROW, E_MECHANISM, E_SIGMA_BELOW, E_N_BELOW, E_DELTA_BELOW. */
int shuffle_eps_sigma(const shuffle_eps_table *table, const char *params_json, double sigma, double n, double delta,
                      double *eps_out);

/* Declare the opened file trusted, as the mechanism family (e.g. "krr") with parameters params_json
 * (the row answered, e.g. "{\"k\":10}"; NULL: any row of the family), because it was shipped inside
 * the caller's own signed bundle (firmware image, package): the bundle's signature, checked by the
 * device's boot or update path, covers it.  Never call it for a file that arrived by itself.
 * E_MECHANISM: the file's family is another, or it has no row of these parameters. */
int shuffle_eps_trust_bundled(shuffle_eps_table *table, const char *family, const char *params_json);

/* Check the Ed25519 signature of the opened file as the mechanism family with parameters params_json
 * (as shuffle_eps_trust_bundled: E_MECHANISM first where the file is another's): sig[0..sig_len) is
 * the JSON `tablegen sign` writes (FILE.sig: {"public_key": hex, "signature": hex, "digest": hex});
 * the signed message is "shuffle-eps device file 2\nfamily " + family + "\nrows " + the SHA-256 (64
 * hex digits) of the header's "rows" value as written + "\nsha256 " + the file's own SHA-256 (as its
 * header holds it, checked by shuffle_eps_open), verified with public_key[0..32), the raw key the
 * device trusts (libsodium crypto_sign_verify_detached).  SHUFFLE_EPS_OK: the table is vouched for;
 * E_SIGNATURE: malformed, made by another key, for other content or another family, or of the digest
 * alone (an older `tablegen sign`: sign the file again); E_NO_SODIUM: compiled without
 * -DSHUFFLE_EPS_SODIUM. */
int shuffle_eps_verify_signature(shuffle_eps_table *table, const char *family, const char *params_json,
                                 const unsigned char *sig, size_t sig_len, const unsigned char public_key[32]);

/* Row r's parameters as the JSON text stored in the header (a pointer into it, *len bytes). */
int shuffle_eps_row_json(const shuffle_eps_table *table, size_t r, const char **text, size_t *len);

/* A static, human-readable sentence for a status code ("unknown status" for others). */
const char *shuffle_eps_status_message(int status);

/* SHA-256 (FIPS 180-4) of data[0..len) into digest[0..32). */
void shuffle_eps_sha256(const unsigned char *data, size_t len, unsigned char digest[32]);

#ifdef __cplusplus
}
#endif

#endif /* SHUFFLE_EPS_DEVICE_H */
