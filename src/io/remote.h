/*
 * remote.h — the parts of the S3/HTTP sources that do not need libcurl:
 * the ListObjectsV2 / error-document parser and the key encoder.  They
 * live apart from src/io/remote/ so that the fuzz target and the unit tests build
 * even when libcurl is absent, and so that the one piece of remote input
 * we parse ourselves (XML written by a server we do not control) has one
 * small, strict entry point.
 */
#ifndef CHUTE_IO_REMOTE_H
#define CHUTE_IO_REMOTE_H

#include "io.h"

/* One entry of a ListObjectsV2 page, relative to the listed prefix:
 * `name` has no '/', is not empty; is_dir for a CommonPrefixes entry. */
typedef int (*ch_s3_entry_fn)(void *user, const char *name, int is_dir, uint64_t size);

typedef struct ch_s3_page {
    int truncated;          /* IsTruncated was "true" */
    char next_token[1024];  /* NextContinuationToken when truncated */
    int stopped;            /* the callback asked to stop */
} ch_s3_page;

/* Parse one ListBucketResult (ListObjectsV2 with delimiter "/") of n
 * bytes.  Every key must start with `prefix`; each entry is handed to fn
 * with the prefix (and a common prefix's trailing '/') taken off; a key
 * equal to the prefix (a "folder marker" object) is left out.  Strict: a
 * malformed document, an unknown entity, a Size that is not a decimal
 * number, a key outside the prefix or a truncated page without a token is
 * CHUTE_EFORMAT naming `what` and the reason. */
int ch_s3_parse_list(const char *doc, size_t n, const char *prefix, ch_s3_entry_fn fn, void *user,
                     ch_s3_page *out, const char *what, chute_error *err);

/* The <Code> of an S3 <Error> document, as printable ASCII of at most
 * cap-1 bytes; "" when the body is not such a document. */
void ch_s3_error_code(const char *doc, size_t n, char *code, size_t cap);

/* Percent-encode src into dst[cap] the way S3's SigV4 canonical form
 * wants it: unreserved bytes (A-Z a-z 0-9 - _ . ~) as they are, '/' as
 * it is when keep_slash, everything else %XX.  Returns the length, or
 * (size_t)-1 when it does not fit. */
size_t ch_s3_encode(const char *src, int keep_slash, char *dst, size_t cap);

/* The CA bundle file and/or directory https requests trust
 * (src/io/remote/tls_ca.c): AWS_CA_BUNDLE, else CURL_CA_BUNDLE, else
 * SSL_CERT_FILE/SSL_CERT_DIR, else the usual system locations found at
 * run time.  Empty strings: none found, libcurl's built-in default stays.
 * A variable naming an unreadable path is CHUTE_EINVAL naming both. */
typedef struct ch_tls_ca {
    char file[1024];
    char dir[1024];
    const char *from; /* static text: which rule chose them, for messages */
} ch_tls_ca;
int ch_tls_ca_resolve(ch_tls_ca *ca, chute_error *err);
/* The error for a request TLS refused (never retried): the server's
 * certificate is not signed by the CAs of ca, or (bad_bundle: curl's
 * CURLE_SSL_CACERT_BADFILE) those CAs could not be loaded.  Names the
 * rule and the paths, and what to set.  Returns CHUTE_EIO. */
int ch_tls_ca_fail(const ch_tls_ca *ca, int bad_bundle, const char *path, const char *what,
                   const char *why, chute_error *err);

#endif

/* ---- a session over many objects (src/io/remote/session.c; only with CHUTE_HAVE_CURL) ----
 * For tools (chute iobench) that read many objects whose sizes they know
 * from a listing: one connection pool for all of them, no HEAD per read.
 * `path` of the calls below is an s3:// path in the bucket of the path the
 * session was made for, or (for an http(s):// session) any URL.  The
 * session is thread-safe for get; put and delete take a handle of their
 * own.  Settings and credentials come from the environment as for the
 * sources (docs/REMOTE.md) and never appear in a message. */
typedef struct ch_remote ch_remote;
int ch_remote_new(const char *path, ch_remote **out, chute_error *err);
void ch_remote_free(ch_remote *s); /* NULL is fine */
/* Exactly len bytes at off (a ranged GET, retried like read_at). */
int ch_remote_get(ch_remote *s, const char *path, uint64_t off, void *buf, size_t len,
                  chute_error *err);
/* Create an S3 object; an existing key is refused (CHUTE_EINVAL), never
 * overwritten: HEAD must say 404, and the PUT carries If-None-Match: *. */
int ch_remote_put(ch_remote *s, const char *path, const void *buf, size_t len, chute_error *err);
/* Remove an S3 object (a missing one is not an error to S3). */
int ch_remote_delete(ch_remote *s, const char *path, chute_error *err);

#ifndef CHUTE_IO_REMOTE_AIO_H /* (this part after the guard above, like the session part) */
#define CHUTE_IO_REMOTE_AIO_H
/* ---- the read-ahead engine (aio_* of ch_source_s3 / ch_source_http) ----
 * Reads of one opened object submitted before the same reap whose byte
 * ranges touch or lie at most coalesce_gap_bytes apart are fetched by one
 * ranged GET of at most coalesce_max_bytes (see remote/http_multi.c).  The static
 * sources use the defaults; a copy of their table whose `self` points at
 * a ch_remote_aio_opts (which must outlive every engine opened through
 * it) uses those values instead: ch_remote_tuned() makes one. */
#define CH_REMOTE_COALESCE_GAP (64u << 10)
#define CH_REMOTE_COALESCE_MAX (8u << 20)
typedef struct ch_remote_aio_opts {
    uint64_t coalesce_gap_bytes;  /* as given (0: only touching ranges merge) */
    uint64_t coalesce_max_bytes;  /* as given (<= the largest read: no merging) */
} ch_remote_aio_opts;
/* What one engine did, from aio_open on. */
typedef struct ch_remote_aio_stats {
    uint64_t requests;    /* reads submitted */
    uint64_t gets;        /* HTTP GETs sent, retries included */
    uint64_t coalesced;   /* reads served by another read's GET */
    uint64_t gap_bytes;   /* bytes fetched between merged reads and dropped */
    uint64_t retries;     /* tries repeated after a transient failure */
    uint64_t failed;      /* reads that completed with an error */
} ch_remote_aio_stats;
/* engine: from aio_open of ch_source_s3/ch_source_http (or a tuned copy);
 * the engine's thread only. */
void ch_remote_aio_stats_get(void *engine, ch_remote_aio_stats *out);
/* *out = *base (ch_source_s3 or ch_source_http) with self = opts. */
void ch_remote_tuned(const ch_source_ops *base, const ch_remote_aio_opts *opts,
                     ch_source_ops *out);
#endif
/* The UploadId of an InitiateMultipartUploadResult document: printable
 * ASCII, no space, at most cap-1 bytes.  0 found, -1 not (malformed,
 * missing, empty or too long). */
int ch_s3_upload_id(const char *doc, size_t n, char *out, size_t cap);

/* ---- writing datasets (pack/convert to s3://; src/io/remote/s3_write.c) ----
 * Upload the local file `file` as the object `path` (s3:// in the
 * session's bucket), replacing an object of that name: one PUT when it
 * has at most part_bytes bytes, else a multipart upload (Create, parts of
 * part_bytes read into one buffer of that size, Complete; Abort on any
 * failure, so no parts are left billed).  Every request is retried like a
 * read (transient errors, capped backoff with jitter).  Not thread-safe
 * for one session (one upload at a time). */
int ch_remote_upload_file(ch_remote *s, const char *path, const char *file, uint64_t part_bytes,
                          chute_error *err);
/* Does the object exist (HEAD)?  *out 1/0; an error other than 404 fails. */
int ch_remote_exists(ch_remote *s, const char *path, int *out, chute_error *err);
/* Part size of multipart uploads: CHUTE_REMOTE_PART_MB, default 16, at
 * least 5 (S3's minimum for every part but the last), at most 5120. */
uint64_t ch_remote_part_bytes(void);
