/*
 * shuffle_eps_query - answer one query from a shuffle-eps device file (an example of
 * shuffle_eps_device.h; docs/device-format.md).
 *
 *     shuffle_eps_query TRUST FILE FAMILY PARAMS_JSON EPS0 N DELTA
 *     shuffle_eps_query TRUST FILE FAMILY EPS0 N DELTA    (a file with one row: its parameters may be left out)
 *     shuffle_eps_query --sigma TRUST FILE FAMILY [PARAMS_JSON] SIGMA N DELTA    (a sigma file: the Gaussian)
 *
 * TRUST says why the file is trusted (docs/trust.md): --bundled (it came inside this device's own
 * signed bundle) or --key HEX (the 64 hex digits of a trusted Ed25519 public key: FILE.sig, written
 * by `tablegen sign`, must verify with it; needs a build with -DSHUFFLE_EPS_SODIUM ... -lsodium).
 *
 * FAMILY and PARAMS_JSON are the mechanism this deployment answers: the family (e.g. krr) and the
 * row's parameters as a JSON object, e.g. '{"k":10}' for k-RR with k = 10 or '{}' for a family
 * without parameters.  A file for another mechanism is refused (53), however it is trusted.  Prints
 * the certified eps on stdout with %.17g (it reads back as the same double) and exits 0; otherwise
 * prints the reason on stderr and exits with the status code (shuffle_eps_device.h: 1 bad command
 * line, 2 unreadable file, 10-32 a refused file, 40-48 a query the file cannot answer, 50-52 a file
 * nothing vouches for, 53 a file for another mechanism; 48: a sigma file queried without --sigma, or an
 * eps0 file with it).  The file is read once its first bytes
 * give its size (shuffle_eps_file_size): a file of any other size is refused before the rest is read.
 *
 * Build:  cc -std=c99 -O2 -o shuffle_eps_query shuffle_eps_query.c shuffle_eps_device.c -lm
 *   with signatures:  cc -std=c99 -O2 -DSHUFFLE_EPS_SODIUM -o shuffle_eps_query shuffle_eps_query.c
 *                     shuffle_eps_device.c -lsodium -lm
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shuffle_eps_device.h"

static const char *USAGE =
    "usage: shuffle_eps_query [--sigma] (--bundled | --key HEX) FILE FAMILY [PARAMS_JSON] (EPS0 | SIGMA) N DELTA\n";

#define SIGNATURE_MAX (1 << 16) /* a FILE.sig is about 300 bytes: a larger one is not read */

static int number(const char *text, double *out) {
    char *end;
    if (text[0] == '\0') return 0;
    *out = strtod(text, &end);
    return *end == '\0';
}

/* *buf grown to need bytes and filled from f: OK, E_IO, or short_status where f ends first */
static int read_to(FILE *f, unsigned char **buf, size_t *have, size_t need, int short_status) {
    unsigned char *bigger = realloc(*buf, need > 0 ? need : 1);
    if (bigger == NULL) return SHUFFLE_EPS_E_IO;
    *buf = bigger;
    *have += fread(bigger + *have, 1, need - *have, f);
    if (*have == need) return SHUFFLE_EPS_OK;
    return ferror(f) ? SHUFFLE_EPS_E_IO : short_status;
}

/* the device file into a malloc'd buffer (the caller frees it), read only once its preamble and header
 * give its size (shuffle_eps_file_size) and refused if it has another: a status */
static int read_device_file(const char *path, unsigned char **bytes, size_t *size) {
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    size_t have = 0, need = 0;
    int status;
    if (f == NULL) return SHUFFLE_EPS_E_IO;
    status = shuffle_eps_file_size(NULL, 0, &need);
    while (status == SHUFFLE_EPS_E_MORE) {
        status = read_to(f, &buf, &have, need, SHUFFLE_EPS_E_TRUNCATED);
        if (status == SHUFFLE_EPS_OK) status = shuffle_eps_file_size(buf, have, &need);
    }
    if (status == SHUFFLE_EPS_OK) status = read_to(f, &buf, &have, need, SHUFFLE_EPS_E_PAYLOAD);
    if (status == SHUFFLE_EPS_OK && fgetc(f) != EOF) status = SHUFFLE_EPS_E_PAYLOAD; /* longer than it says */
    fclose(f);
    if (status != SHUFFLE_EPS_OK) {
        free(buf);
        return status;
    }
    *bytes = buf, *size = have;
    return SHUFFLE_EPS_OK;
}

/* a signature file of at most SIGNATURE_MAX bytes into a malloc'd buffer; 0 if unreadable or larger */
static int read_signature(const char *path, unsigned char **bytes, size_t *size) {
    FILE *f = fopen(path, "rb");
    unsigned char *buf = malloc(SIGNATURE_MAX + 1);
    size_t len = 0;
    int ok = f != NULL && buf != NULL;
    if (ok) {
        len = fread(buf, 1, SIGNATURE_MAX + 1, f);
        ok = !ferror(f) && len <= SIGNATURE_MAX;
    }
    if (f != NULL) fclose(f);
    if (!ok) {
        free(buf);
        return 0;
    }
    *bytes = buf, *size = len;
    return 1;
}

/* 64 hex digits into 32 bytes; 0 if malformed */
static int hex_key(const char *text, unsigned char key[32]) {
    int i;
    for (i = 0; i < 64; i++) {
        char c = text[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (v < 0) return 0;
        key[i / 2] = (unsigned char)(i % 2 ? key[i / 2] | v : v << 4);
    }
    return text[64] == '\0';
}

/* vouch for the opened table as the mechanism family/params, as the command line says: --bundled, or
 * FILE.sig checked with the key */
static int vouch(shuffle_eps_table *table, const char *path, const char *key_hex, const char *family,
                 const char *params) {
    unsigned char key[32], *sig = NULL;
    size_t sig_len = 0;
    char *sig_path;
    int status;
    if (key_hex == NULL) return shuffle_eps_trust_bundled(table, family, params);
    if (!hex_key(key_hex, key)) {
        fprintf(stderr, "shuffle_eps_query: --key needs 64 hex digits (a raw Ed25519 public key)\n");
        return SHUFFLE_EPS_E_ARGUMENT;
    }
    sig_path = malloc(strlen(path) + 5);
    if (sig_path == NULL) return SHUFFLE_EPS_E_IO;
    strcpy(sig_path, path);
    strcat(sig_path, ".sig");
    status = read_signature(sig_path, &sig, &sig_len)
                 ? shuffle_eps_verify_signature(table, family, params, sig, sig_len, key)
                 : SHUFFLE_EPS_E_SIGNATURE;
    free(sig_path);
    free(sig);
    return status;
}

/* the rows of the opened table on stderr, as PARAMS_JSON */
static void list_rows(const shuffle_eps_table *table) {
    size_t r;
    fputs("the file's rows (PARAMS_JSON):", stderr);
    for (r = 0; r < table->rows; r++) {
        const char *text;
        size_t len;
        if (shuffle_eps_row_json(table, r, &text, &len) == SHUFFLE_EPS_OK) fprintf(stderr, " %.*s", (int)len, text);
    }
    fputc('\n', stderr);
}

/* the table opened from the file's bytes, its work array malloc'd into *work: a status */
static int open_table(shuffle_eps_table *table, const unsigned char *bytes, size_t size, double **work) {
    int status = shuffle_eps_open(table, bytes, size, NULL, 0);
    if (status == SHUFFLE_EPS_E_WORKSPACE) {
        *work = malloc((table->work_needed ? table->work_needed : 1) * sizeof **work);
        status = *work == NULL ? SHUFFLE_EPS_E_IO : shuffle_eps_open(table, bytes, size, *work, table->work_needed);
    }
    return status;
}

int main(int argc, char **argv) {
    const char *path, *family, *params = NULL, *key_hex = NULL;
    unsigned char *bytes = NULL;
    size_t size = 0;
    double *work = NULL, eps0, n, delta, eps;
    shuffle_eps_table table;
    int status, first, trust, sigma;

    sigma = argc > 1 && strcmp(argv[1], "--sigma") == 0; /* the first number is a sigma (a sigma file) */
    argc -= sigma, argv += sigma;
    trust = argc > 1 && strcmp(argv[1], "--bundled") == 0 ? 1 : argc > 2 && strcmp(argv[1], "--key") == 0 ? 2 : 0;
    if (trust == 2) key_hex = argv[2];
    argc -= trust, argv += trust;
    if (!trust || (argc != 6 && argc != 7)) {
        fputs(USAGE, stderr);
        return SHUFFLE_EPS_E_ARGUMENT;
    }
    path = argv[1], family = argv[2];
    if (argc == 7) params = argv[3];
    first = argc == 7 ? 4 : 3;
    if (!number(argv[first], &eps0) || !number(argv[first + 1], &n) || !number(argv[first + 2], &delta)) {
        fprintf(stderr, "shuffle_eps_query: %s, N and DELTA must be numbers\n%s", sigma ? "SIGMA" : "EPS0", USAGE);
        return SHUFFLE_EPS_E_ARGUMENT;
    }
    status = read_device_file(path, &bytes, &size);
    if (status == SHUFFLE_EPS_OK) status = open_table(&table, bytes, size, &work);
    if (status != SHUFFLE_EPS_OK) {
        fprintf(stderr, "shuffle_eps_query: %s: %s", path, shuffle_eps_status_message(status));
        if (status == SHUFFLE_EPS_E_VALUE || status == SHUFFLE_EPS_E_LOWER || status == SHUFFLE_EPS_E_MONOTONE)
            fprintf(stderr, " (row %lu, %s %g, n %g, delta %g)", (unsigned long)table.where[0],
                    table.axis == SHUFFLE_EPS_AXIS_SIGMA ? "sigma" : "eps0",
                    table.eps0[table.where[1]], table.n[table.where[2]], table.delta[table.where[3]]);
        fputc('\n', stderr);
    } else if ((status = vouch(&table, path, key_hex, family, params)) != SHUFFLE_EPS_OK) {
        fprintf(stderr, "shuffle_eps_query: %s: %s (as %s%s%s)\n", path, shuffle_eps_status_message(status), family,
                params ? " " : "", params ? params : "");
        if (status == SHUFFLE_EPS_E_MECHANISM) list_rows(&table);
    } else if ((status = sigma ? shuffle_eps_sigma(&table, params, eps0, n, delta, &eps)
                               : shuffle_eps_eps(&table, params, eps0, n, delta, &eps)) == SHUFFLE_EPS_OK) {
        printf("%.17g\n", eps);
    } else {
        fprintf(stderr, "shuffle_eps_query: %s: %s (%s=%g n=%g delta=%g)\n", path, shuffle_eps_status_message(status),
                sigma ? "sigma" : "eps0", eps0, n, delta);
        if (status == SHUFFLE_EPS_E_ROW) list_rows(&table);
    }
    free(work);
    free(bytes);
    return status;
}
