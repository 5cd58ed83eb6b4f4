/*
 * tls_ca.c — which certificate authorities an https:// or TLS S3 request
 * trusts.
 *
 * Why this exists: libcurl trusts the CA file and directory compiled into
 * it.  Debian's libcurl points at /etc/ssl/certs/ca-certificates.crt, and
 * the manylinux wheel carries a libcurl built the same way, so on RHEL,
 * Fedora, openSUSE or Alpine (other paths) every https request failed,
 * and a MinIO/Ceph endpoint signed by an in-house CA could not be trusted
 * at all: chute ignored every variable the field uses to say "trust this".
 * Now the choice follows the AWS tools first, then curl and OpenSSL:
 *
 *   1. AWS_CA_BUNDLE            (what the AWS CLI and boto3 honour)
 *   2. CURL_CA_BUNDLE           (what the curl command honours)
 *   3. SSL_CERT_FILE and/or SSL_CERT_DIR (OpenSSL's own variables)
 *   4. the first of the usual system bundles that exists here, plus
 *      /etc/ssl/certs as a directory when it exists.
 *
 * The first that is set (non-empty) wins alone: a bundle named by the
 * user is the whole trust, as with the AWS CLI, so a test CA cannot be
 * shadowed by a system one nor the other way round.  A variable naming a
 * file or directory that cannot be read is the user's mistake and an
 * error that names the variable and the path, never a later, generic TLS
 * failure.  Resolved when a remote object is opened (with the rest of the
 * remote settings), never per request and never cached process-wide.
 */
#define _GNU_SOURCE
#include "../remote.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Distributions' bundle files, most common first (Debian/Ubuntu, RHEL/
 * Fedora old and new layout, openSUSE, Alpine/BSD).  */
static const char *const sys_files[] = {
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
};
static const char *const sys_dir = "/etc/ssl/certs";

static int is_readable(const char *p, int want_dir)
{
    struct stat st;
    if (stat(p, &st) != 0)
        return 0;
    if (want_dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
        errno = want_dir ? ENOTDIR : EISDIR;
        return 0;
    }
    return access(p, want_dir ? (R_OK | X_OK) : R_OK) == 0;
}

/* The variable's value into out, checked; 0 when unset or empty. */
static int take(const char *var, int want_dir, char *out, size_t cap, int *rc, chute_error *err)
{
    const char *v = getenv(var);
    if (!v || !*v)
        return 0;
    if (strlen(v) >= cap) {
        *rc = ch_err(err, CHUTE_EINVAL, "%s: the path is too long (%zu bytes)", var, strlen(v));
        return 1;
    }
    if (!is_readable(v, want_dir)) {
        *rc = ch_err(err, CHUTE_EINVAL, "%s=%s: cannot read this CA %s: %s", var, v,
                     want_dir ? "directory" : "bundle file", strerror(errno));
        return 1;
    }
    snprintf(out, cap, "%s", v);
    return 1;
}

int ch_tls_ca_resolve(ch_tls_ca *ca, chute_error *err)
{
    memset(ca, 0, sizeof *ca);
    int rc = CHUTE_OK;
    if (take("AWS_CA_BUNDLE", 0, ca->file, sizeof ca->file, &rc, err)) {
        ca->from = "AWS_CA_BUNDLE";
        return rc;
    }
    if (take("CURL_CA_BUNDLE", 0, ca->file, sizeof ca->file, &rc, err)) {
        ca->from = "CURL_CA_BUNDLE";
        return rc;
    }
    int f = take("SSL_CERT_FILE", 0, ca->file, sizeof ca->file, &rc, err);
    if (rc != CHUTE_OK)
        return rc;
    int d = take("SSL_CERT_DIR", 1, ca->dir, sizeof ca->dir, &rc, err);
    if (rc != CHUTE_OK)
        return rc;
    if (f || d) {
        ca->from = f && d ? "SSL_CERT_FILE and SSL_CERT_DIR" : f ? "SSL_CERT_FILE" : "SSL_CERT_DIR";
        return CHUTE_OK;
    }
    for (size_t i = 0; i < sizeof sys_files / sizeof *sys_files; i++)
        if (is_readable(sys_files[i], 0)) {
            snprintf(ca->file, sizeof ca->file, "%s", sys_files[i]);
            break;
        }
    if (is_readable(sys_dir, 1))
        snprintf(ca->dir, sizeof ca->dir, "%s", sys_dir);
    ca->from = ca->file[0] || ca->dir[0] ? "the system's CA locations" : "libcurl's built-in CA path";
    return CHUTE_OK;
}

int ch_tls_ca_fail(const ch_tls_ca *ca, int bad_bundle, const char *path, const char *what,
                   const char *why, chute_error *err)
{
    char where[2100] = "";
    if (ca->file[0] || ca->dir[0])
        snprintf(where, sizeof where, " (%s%s%s)", ca->file, ca->file[0] && ca->dir[0] ? ", " : "",
                 ca->dir);
    if (bad_bundle && !ca->file[0] && !ca->dir[0])
        return ch_err(err, CHUTE_EIO,
                      "%s: %s: no CA bundle in the system's usual locations, and libcurl's "
                      "built-in one cannot be loaded (%s): set AWS_CA_BUNDLE (or CURL_CA_BUNDLE, "
                      "SSL_CERT_FILE, SSL_CERT_DIR) to a PEM file of the CAs to trust",
                      path, what, why);
    if (bad_bundle)
        return ch_err(err, CHUTE_EIO,
                      "%s: %s: the CAs from %s%s cannot be loaded (%s): a bundle must hold PEM "
                      "certificates",
                      path, what, ca->from, where, why);
    return ch_err(err, CHUTE_EIO,
                  "%s: %s: the server's TLS certificate is not trusted (%s); CAs trusted from "
                  "%s%s: set AWS_CA_BUNDLE (or CURL_CA_BUNDLE, SSL_CERT_FILE, SSL_CERT_DIR) to "
                  "the CA that signed it",
                  path, what, why, ca->from, where);
}
