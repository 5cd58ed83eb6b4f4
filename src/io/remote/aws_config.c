/*
 * aws_config.c — what a remote request needs to know before it is made:
 * the settings (AWS_REGION, AWS_ENDPOINT_URL[_S3], credentials from the
 * environment or the shared credentials file and AWS_PROFILE, listed in
 * docs/REMOTE.md, and our CHUTE_REMOTE_* limits, the rows of
 * src/common/remote_options.def listed in docs/OPTIONS.md) and how an
 * s3:// or http(s):// path becomes the URL curl signs and fetches.
 *
 * Why a file of its own: this is the part that reads the user's
 * environment and secrets, and it has no curl in it.  Settings are read
 * when an object is opened, never cached process-wide; a secret lives in
 * an rconf until ch_rconf_wipe, and every buffer that held one is wiped
 * (ch_rwipe) rather than merely freed.  Keys are percent-encoded byte by
 * byte (ch_s3_encode in s3_xml.c) so the URL is exactly the canonical
 * one SigV4 signs.
 */
#define _GNU_SOURCE
#include "http.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

void ch_rwipe(void *p, size_t n)
{
    volatile unsigned char *v = p;
    while (n--)
        *v++ = 0;
}

void ch_rtrim(char *s)
{
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
        s[--n] = '\0';
    size_t k = 0;
    while (s[k] == ' ' || s[k] == '\t')
        k++;
    memmove(s, s + k, n - k + 1);
}

/* The shared credentials file (INI): [profile] then key = value lines. */
static int creds_from_file(rconf *c, chute_error *err)
{
    const char *file = getenv("AWS_SHARED_CREDENTIALS_FILE");
    char path[1024];
    if (!file || !*file) {
        const char *home = getenv("HOME");
        if (!home)
            return CHUTE_OK;
        snprintf(path, sizeof path, "%s/.aws/credentials", home);
        file = path;
    }
    const char *profile = getenv("AWS_PROFILE");
    int named = profile && *profile;
    if (!named)
        profile = "default";
    FILE *f = fopen(file, "re");
    if (!f) {
        if (named)
            return ch_err(err, CHUTE_EINVAL,
                          "AWS_PROFILE=%s is set but the credentials file %s cannot be read",
                          profile, file);
        return CHUTE_OK; /* no file: anonymous */
    }
    char line[4096], tok[4096] = "";
    int in = 0, found = 0;
    while (fgets(line, sizeof line, f)) {
        ch_rtrim(line);
        if (line[0] == '#' || line[0] == ';' || !line[0])
            continue;
        if (line[0] == '[') {
            char *close = strchr(line, ']');
            if (close)
                *close = '\0';
            char *name = line + 1;
            ch_rtrim(name);
            in = !strcmp(name, profile);
            found |= in;
            continue;
        }
        char *eq = strchr(line, '=');
        if (!in || !eq)
            continue;
        *eq = '\0';
        char *k = line, *v = eq + 1;
        ch_rtrim(k);
        ch_rtrim(v);
        if (!strcasecmp(k, "aws_access_key_id"))
            snprintf(c->user, sizeof c->user, "%s", v);
        else if (!strcasecmp(k, "aws_secret_access_key"))
            snprintf(c->secret, sizeof c->secret, "%s", v);
        else if (!strcasecmp(k, "aws_session_token"))
            snprintf(tok, sizeof tok, "%s", v);
    }
    fclose(f);
    ch_rwipe(line, sizeof line);
    if (named && !found)
        return ch_err(err, CHUTE_EINVAL, "AWS_PROFILE=%s: no such profile in %s", profile, file);
    if (found && (!c->user[0] || !c->secret[0])) {
        ch_rwipe(c->secret, sizeof c->secret);
        ch_rwipe(tok, sizeof tok);
        return ch_err(err, CHUTE_EINVAL,
                      "%s: profile [%s] lacks aws_access_key_id or aws_secret_access_key", file,
                      profile);
    }
    int rc = CHUTE_OK;
    if (strlen(tok) + 32 >= sizeof c->token_hdr)
        rc = ch_err(err, CHUTE_EINVAL, "%s: profile [%s]: aws_session_token is too long", file,
                    profile);
    else if (tok[0])
        snprintf(c->token_hdr, sizeof c->token_hdr, "x-amz-security-token: %.4000s", tok);
    ch_rwipe(tok, sizeof tok);
    return rc;
}

int ch_rconf_load(rconf *c, int s3, chute_error *err)
{
    memset(c, 0, sizeof *c);
    c->s3 = s3;
    /* CHUTE_REMOTE_*: the rows of src/common/remote_options.def */
    c->retries = (unsigned)ch_remote_opt_value(CH_RENV_RETRIES);
    c->retry_total_ns = ch_remote_opt_value(CH_RENV_RETRY_TOTAL_MS) * 1000000ull;
    c->backoff_ns = ch_remote_opt_value(CH_RENV_BACKOFF_MS) * 1000000ull;
    c->backoff_cap_ns = ch_remote_opt_value(CH_RENV_BACKOFF_CAP_MS) * 1000000ull;
    c->connect_ms = (long)ch_remote_opt_value(CH_RENV_CONNECT_TIMEOUT_MS);
    c->stall_s = (long)ch_remote_opt_value(CH_RENV_STALL_S);
    c->recv_buf = (long)ch_remote_opt_value(CH_RENV_RECV_BUFFER_KB) * 1024; /* ch_http_easy_new */
    int carc = ch_tls_ca_resolve(&c->ca, err);
    if (carc != CHUTE_OK)
        return carc;
    if (!s3)
        return CHUTE_OK;
    const char *r = getenv("AWS_REGION");
    if (!r || !*r)
        r = getenv("AWS_DEFAULT_REGION");
    if (!r || !*r)
        r = "us-east-1";
    for (const char *q = r; *q; q++)
        if (!((*q >= 'a' && *q <= 'z') || (*q >= '0' && *q <= '9') || *q == '-'))
            return ch_err(err, CHUTE_EINVAL, "AWS_REGION \"%s\" is not a region name", r);
    snprintf(c->region, sizeof c->region, "%s", r);
    const char *ep = getenv("AWS_ENDPOINT_URL_S3");
    if (!ep || !*ep)
        ep = getenv("AWS_ENDPOINT_URL");
    if (ep && *ep) {
        if (strncmp(ep, "http://", 7) && strncmp(ep, "https://", 8))
            return ch_err(err, CHUTE_EINVAL, "S3 endpoint \"%s\" is not an http(s):// URL", ep);
        if (strlen(ep) >= sizeof c->endpoint)
            return ch_err(err, CHUTE_EINVAL, "S3 endpoint URL is too long");
        snprintf(c->endpoint, sizeof c->endpoint, "%s", ep);
        size_t n = strlen(c->endpoint);
        while (n && c->endpoint[n - 1] == '/')
            c->endpoint[--n] = '\0';
    }
    const char *ak = getenv("AWS_ACCESS_KEY_ID"), *sk = getenv("AWS_SECRET_ACCESS_KEY");
    if (ak && *ak && sk && *sk) {
        if (strlen(ak) >= sizeof c->user || strlen(sk) >= sizeof c->secret)
            return ch_err(err, CHUTE_EINVAL, "AWS credentials in the environment are too long");
        snprintf(c->user, sizeof c->user, "%s", ak);
        snprintf(c->secret, sizeof c->secret, "%s", sk);
        const char *tok = getenv("AWS_SESSION_TOKEN");
        if (tok && *tok) {
            if (strlen(tok) + 32 >= sizeof c->token_hdr)
                return ch_err(err, CHUTE_EINVAL, "AWS_SESSION_TOKEN is too long");
            snprintf(c->token_hdr, sizeof c->token_hdr, "x-amz-security-token: %s", tok);
        }
    } else {
        int rc = creds_from_file(c, err);
        if (rc != CHUTE_OK)
            return rc;
    }
    if (c->user[0])
        snprintf(c->sigv4, sizeof c->sigv4, "aws:amz:%s:s3", c->region);
    return CHUTE_OK;
}

void ch_rconf_wipe(rconf *c) { ch_rwipe(c, sizeof *c); }

/* ---- names ------------------------------------------------------------------- */

/* "s3://bucket/key" -> bucket and key (key may be ""). */
int ch_s3_split(const char *path, char *bucket, size_t bcap, const char **key,
                    chute_error *err)
{
    const char *b = path + 5, *slash = strchr(b, '/');
    size_t bl = slash ? (size_t)(slash - b) : strlen(b);
    if (bl < 3 || bl > 63 || bl >= bcap)
        return ch_err(err, CHUTE_EINVAL, "%s: a bucket name has 3 to 63 characters", path);
    for (size_t i = 0; i < bl; i++)
        if (!((b[i] >= 'a' && b[i] <= 'z') || (b[i] >= '0' && b[i] <= '9') || b[i] == '-' ||
              b[i] == '.'))
            return ch_err(err, CHUTE_EINVAL,
                          "%s: a bucket name has only lower-case letters, digits, '-' and '.'",
                          path);
    memcpy(bucket, b, bl);
    bucket[bl] = '\0';
    *key = slash ? slash + 1 : "";
    return CHUTE_OK;
}

/* The URL of bucket (+ encoded key, + query) for this configuration. */
int ch_s3_url(const rconf *c, const char *path, const char *bucket, const char *key,
                  const char *query, char *url, size_t cap, chute_error *err)
{
    char ek[URL_MAX];
    if (ch_s3_encode(key, 1, ek, sizeof ek) == (size_t)-1)
        return ch_err(err, CHUTE_EINVAL, "%s: the key is too long", path);
    int n;
    if (c->endpoint[0])
        n = snprintf(url, cap, "%s/%s%s%s%s", c->endpoint, bucket, key[0] || !query ? "/" : "", ek,
                     query ? query : "");
    else
        n = snprintf(url, cap, "https://%s.s3.%s.amazonaws.com/%s%s", bucket, c->region, ek,
                     query ? query : "");
    if (n < 0 || (size_t)n >= cap)
        return ch_err(err, CHUTE_EINVAL, "%s: the URL is too long", path);
    return CHUTE_OK;
}

/* An http(s) URL as given, with the bytes a URL cannot hold (space,
 * controls, non-ASCII, quotes and brackets) percent-encoded. */
int ch_http_url(const char *path, char *url, size_t cap, chute_error *err)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t k = 0;
    for (const unsigned char *s = (const unsigned char *)path; *s; s++) {
        int esc = *s <= 0x20 || *s >= 0x7f || strchr("\"<>\\^`{|}", *s);
        if (k + 4 >= cap)
            return ch_err(err, CHUTE_EINVAL, "%s: the URL is too long", path);
        if (esc) {
            url[k++] = '%';
            url[k++] = hex[*s >> 4];
            url[k++] = hex[*s & 15];
        } else {
            url[k++] = (char)*s;
        }
    }
    url[k] = '\0';
    return CHUTE_OK;
}

/* The URL of an object path under configuration c (s3:// or http(s)://). */
int ch_remote_object_url(const rconf *c, const char *path, char *url, size_t cap, chute_error *err)
{
    if (!c->s3)
        return ch_http_url(path, url, cap, err);
    char bucket[64];
    const char *key;
    int rc = ch_s3_split(path, bucket, sizeof bucket, &key, err);
    if (rc == CHUTE_OK && !key[0])
        rc = ch_err(err, CHUTE_EINVAL, "%s: names a bucket, not an object", path);
    if (rc == CHUTE_OK)
        rc = ch_s3_url(c, path, bucket, key, NULL, url, cap, err);
    return rc;
}