/*
 * s3_xml.c — the XML that S3 sends back, read minimally but strictly.
 *
 * S3 answers a listing (ListObjectsV2) and every error in small XML
 * documents.  We need a handful of leaf elements out of them, so this is
 * not a general XML parser: it walks elements, skips the prolog,
 * comments and attributes, decodes the five predefined entities and
 * numeric character references, and refuses everything else (mismatched
 * or unterminated tags, mixed content, nesting deeper than the documents
 * have, an unknown entity).  A listing we cannot read exactly is an
 * error, never a shorter listing: a key silently dropped here would be a
 * sample silently missing from every epoch.
 *
 * Text is decoded into one append-only buffer the size of the input, so
 * a leaf's text stays valid until the parse ends and no allocation
 * happens per element.
 */
#include "../remote.h"

#include <stdio.h>
#include <string.h>

#define XML_MAX_DEPTH 8

typedef struct xml_elem {
    const char *name;
    size_t nlen;
    size_t text;   /* offset of its text in the decode buffer */
    int children;  /* has child elements */
} xml_elem;

/* Called at each end tag with the stack (stack[0] is the root) and the
 * element's decoded, NUL-terminated text ("" for an element with
 * children).  Nonzero stops the walk with that status. */
typedef int (*xml_end_fn)(void *user, const xml_elem *stack, int depth, const char *text,
                          size_t tlen);

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }
static int is_name(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.' || c == ':';
}

static size_t put_utf8(char *o, uint32_t cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Decode the entity at p[0] == '&' (end e); appends to o, returns the
 * bytes consumed, 0 when it is not one we accept. */
static size_t entity(const char *p, const char *e, char *o, size_t *olen)
{
    static const struct { const char *s; char c; } named[] = {
        {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
    for (size_t i = 0; i < 5; i++) {
        size_t l = strlen(named[i].s);
        if ((size_t)(e - p) >= l && !memcmp(p, named[i].s, l)) {
            o[(*olen)++] = named[i].c;
            return l;
        }
    }
    if (e - p < 4 || p[1] != '#')
        return 0;
    const char *q = p + 2;
    int hex = *q == 'x';
    q += hex;
    uint32_t cp = 0;
    int digits = 0;
    for (; q < e && *q != ';'; q++, digits++) {
        int d = (*q >= '0' && *q <= '9')                ? *q - '0'
                : hex && (*q | 32) >= 'a' && (*q | 32) <= 'f' ? (*q | 32) - 'a' + 10
                                                          : -1;
        if (d < 0 || digits >= 8)
            return 0;
        cp = cp * (hex ? 16u : 10u) + (uint32_t)d;
    }
    /* No NUL, no surrogates, nothing above U+10FFFF.  The UTF-8 of a
     * reference is never longer than the reference itself ("&#1;" is 4
     * bytes for 1), so the buffer bound holds. */
    if (q >= e || !digits || cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    *olen += put_utf8(o + *olen, cp);
    return (size_t)(q + 1 - p);
}

static int bad(chute_error *err, const char *what, const char *doc, const char *p,
               const char *why)
{
    return ch_err(err, CHUTE_EFORMAT, "%s: malformed XML from the server at byte %zu: %s", what,
                  (size_t)(p - doc), why);
}

static int xml_walk(const char *doc, size_t n, char *out, xml_end_fn fn, void *user,
                    const char *what, chute_error *err)
{
    const char *p = doc, *e = doc + n;
    xml_elem st[XML_MAX_DEPTH];
    int depth = 0, seen_root = 0;
    size_t olen = 0;
    size_t text_start = 0; /* start of the text being collected for st[depth-1] */
    while (p < e) {
        if (*p != '<') {
            if (depth == 0) {
                if (!is_space(*p))
                    return bad(err, what, doc, p, "text outside the root element");
                p++;
                continue;
            }
            if (*p == '&') {
                size_t used = entity(p, e, out, &olen);
                if (!used)
                    return bad(err, what, doc, p, "unknown or malformed entity");
                p += used;
            } else {
                if (*p == '\0')
                    return bad(err, what, doc, p, "NUL byte");
                out[olen++] = *p++;
            }
            continue;
        }
        if (e - p >= 4 && !memcmp(p, "<!--", 4)) {
            const char *c = p + 4;
            while (c + 3 <= e && memcmp(c, "-->", 3))
                c++;
            if (c + 3 > e)
                return bad(err, what, doc, p, "unterminated comment");
            p = c + 3;
            continue;
        }
        if (e - p >= 2 && p[1] == '?') {
            if (depth || seen_root)
                return bad(err, what, doc, p, "processing instruction inside the document");
            const char *c = p + 2;
            while (c + 2 <= e && memcmp(c, "?>", 2))
                c++;
            if (c + 2 > e)
                return bad(err, what, doc, p, "unterminated <?...?>");
            p = c + 2;
            continue;
        }
        if (e - p >= 2 && p[1] == '!')
            return bad(err, what, doc, p, "DOCTYPE/CDATA not accepted");
        int closing = e - p >= 2 && p[1] == '/';
        const char *name = p + 1 + closing, *q = name;
        while (q < e && is_name(*q))
            q++;
        size_t nlen = (size_t)(q - name);
        if (!nlen)
            return bad(err, what, doc, p, "tag without a name");
        if (closing) {
            while (q < e && is_space(*q))
                q++;
            if (q >= e || *q != '>')
                return bad(err, what, doc, p, "unterminated end tag");
            if (!depth || st[depth - 1].nlen != nlen || memcmp(st[depth - 1].name, name, nlen))
                return bad(err, what, doc, p, "end tag does not match the open element");
            xml_elem *top = &st[depth - 1];
            const char *text = "";
            size_t tlen = 0;
            if (top->children) {
                for (size_t i = text_start; i < olen; i++)
                    if (!is_space(out[i]))
                        return bad(err, what, doc, p, "text mixed with elements");
            } else {
                text = out + top->text;
                tlen = olen - top->text;
            }
            out[olen++] = '\0';
            int rc = fn(user, st, depth, text, tlen);
            if (rc)
                return rc;
            depth--;
            text_start = olen;
            p = q + 1;
            continue;
        }
        /* start tag: attributes are skipped, but must be name="value" */
        for (;;) {
            while (q < e && is_space(*q))
                q++;
            if (q >= e)
                return bad(err, what, doc, p, "unterminated start tag");
            if (*q == '>' || (*q == '/' && q + 1 < e && q[1] == '>'))
                break;
            const char *a = q;
            while (q < e && is_name(*q))
                q++;
            if (q == a || q + 1 >= e || *q != '=' || (q[1] != '"' && q[1] != '\''))
                return bad(err, what, doc, p, "malformed attribute");
            char quote = q[1];
            q += 2;
            while (q < e && *q != quote && *q != '<')
                q++;
            if (q >= e || *q != quote)
                return bad(err, what, doc, p, "unterminated attribute value");
            q++;
        }
        int empty = *q == '/';
        if (depth == 0 && seen_root)
            return bad(err, what, doc, p, "a second root element");
        if (depth) {
            xml_elem *parent = &st[depth - 1];
            for (size_t i = text_start; i < olen; i++)
                if (!is_space(out[i]))
                    return bad(err, what, doc, p, "text mixed with elements");
            parent->children = 1;
        }
        if (depth == XML_MAX_DEPTH)
            return bad(err, what, doc, p, "elements nested too deeply");
        olen = text_start; /* drop whitespace between elements */
        st[depth] = (xml_elem){.name = name, .nlen = nlen, .text = olen, .children = 0};
        depth++;
        seen_root = 1;
        p = q + 1 + empty;
        if (empty) {
            out[olen++] = '\0';
            int rc = fn(user, st, depth, out + olen - 1, 0);
            if (rc)
                return rc;
            depth--;
        }
        text_start = olen;
    }
    if (depth)
        return bad(err, what, doc, p, "document ends inside an element");
    if (!seen_root)
        return bad(err, what, doc, p, "no root element");
    return CHUTE_OK;
}

static int name_is(const xml_elem *x, const char *s)
{
    return x->nlen == strlen(s) && !memcmp(x->name, s, x->nlen);
}

typedef struct list_ctx {
    const char *prefix;
    size_t plen;
    ch_s3_entry_fn fn;
    void *user;
    ch_s3_page *page;
    const char *what;
    chute_error *err;
    const char *key;     /* current <Contents> */
    int has_size, has_trunc;
    uint64_t size;
    const char *cprefix; /* current <CommonPrefixes> */
} list_ctx;

static int list_emit(list_ctx *c, const char *full, int is_dir, uint64_t size)
{
    size_t l = strlen(full);
    if (l < c->plen || memcmp(full, c->prefix, c->plen))
        return ch_err(c->err, CHUTE_EFORMAT,
                      "%s: the server listed \"%s\", which is outside the prefix \"%s\"", c->what,
                      full, c->prefix);
    const char *name = full + c->plen;
    size_t nl = l - c->plen;
    if (is_dir) {
        if (nl < 2 || name[nl - 1] != '/')
            return ch_err(c->err, CHUTE_EFORMAT, "%s: the server listed a common prefix \"%s\" "
                          "that does not end in one more '/'", c->what, full);
        nl--;
    } else if (nl == 0) {
        return 0; /* the "folder" object itself */
    }
    if (memchr(name, '/', nl))
        return ch_err(c->err, CHUTE_EFORMAT, "%s: the server listed \"%s\", more than one level "
                      "below \"%s\" (was the delimiter ignored?)", c->what, full, c->prefix);
    char tmp[1024];
    if (nl >= sizeof tmp)
        return ch_err(c->err, CHUTE_EFORMAT, "%s: a listed name is longer than %zu bytes", c->what,
                      sizeof tmp - 1);
    memcpy(tmp, name, nl);
    tmp[nl] = '\0';
    if (c->fn(c->user, tmp, is_dir, size)) {
        c->page->stopped = 1;
        return 1; /* not an error: the walk stops, list_parse sees `stopped` */
    }
    return 0;
}

static int list_end(void *user, const xml_elem *st, int depth, const char *text, size_t tlen)
{
    list_ctx *c = user;
    if (!name_is(&st[0], "ListBucketResult"))
        return ch_err(c->err, CHUTE_EFORMAT, "%s: the server's answer is not a ListBucketResult",
                      c->what);
    if (memchr(text, '\0', tlen))
        return ch_err(c->err, CHUTE_EFORMAT, "%s: a NUL character in the listing", c->what);
    if (depth == 3 && name_is(&st[1], "Contents")) {
        if (name_is(&st[2], "Key")) {
            if (c->key)
                return ch_err(c->err, CHUTE_EFORMAT, "%s: an object listed with two keys", c->what);
            c->key = text;
        } else if (name_is(&st[2], "Size")) {
            uint64_t v = 0;
            if (!tlen || c->has_size)
                return ch_err(c->err, CHUTE_EFORMAT, "%s: a missing or repeated <Size>", c->what);
            for (size_t i = 0; i < tlen; i++) {
                if (text[i] < '0' || text[i] > '9' || v > (UINT64_MAX - 9) / 10)
                    return ch_err(c->err, CHUTE_EFORMAT, "%s: <Size>%s</Size> is not a size",
                                  c->what, text);
                v = v * 10 + (uint64_t)(text[i] - '0');
            }
            c->size = v;
            c->has_size = 1;
        }
    } else if (depth == 3 && name_is(&st[1], "CommonPrefixes") && name_is(&st[2], "Prefix")) {
        if (c->cprefix)
            return ch_err(c->err, CHUTE_EFORMAT, "%s: a common prefix listed twice", c->what);
        c->cprefix = text;
    } else if (depth == 2 && name_is(&st[1], "Contents")) {
        if (!c->key || !c->has_size)
            return ch_err(c->err, CHUTE_EFORMAT, "%s: an object listed without %s", c->what,
                          c->key ? "<Size>" : "<Key>");
        int rc = list_emit(c, c->key, 0, c->size);
        c->key = NULL;
        c->has_size = 0;
        return rc;
    } else if (depth == 2 && name_is(&st[1], "CommonPrefixes")) {
        if (!c->cprefix)
            return ch_err(c->err, CHUTE_EFORMAT, "%s: a common prefix without <Prefix>", c->what);
        int rc = list_emit(c, c->cprefix, 1, 0);
        c->cprefix = NULL;
        return rc;
    } else if (depth == 2 && name_is(&st[1], "IsTruncated")) {
        if (c->has_trunc || (strcmp(text, "true") && strcmp(text, "false")))
            return ch_err(c->err, CHUTE_EFORMAT, "%s: <IsTruncated> is not true or false", c->what);
        c->has_trunc = 1;
        c->page->truncated = !strcmp(text, "true");
    } else if (depth == 2 && name_is(&st[1], "NextContinuationToken")) {
        if (tlen >= sizeof c->page->next_token)
            return ch_err(c->err, CHUTE_EFORMAT, "%s: a continuation token of %zu bytes", c->what,
                          tlen);
        memcpy(c->page->next_token, text, tlen + 1);
    }
    return 0;
}

int ch_s3_parse_list(const char *doc, size_t n, const char *prefix, ch_s3_entry_fn fn, void *user,
                     ch_s3_page *out, const char *what, chute_error *err)
{
    memset(out, 0, sizeof *out);
    /* Decoded text is never longer than its source, plus one NUL per end
     * tag (each at least 4 bytes of source): n + 1 bounds it. */
    char *buf = malloc(n + 1);
    if (!buf)
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory for a listing of %zu bytes", what, n);
    list_ctx c = {.prefix = prefix, .plen = strlen(prefix), .fn = fn, .user = user, .page = out,
                  .what = what, .err = err};
    int rc = xml_walk(doc, n, buf, list_end, &c, what, err);
    free(buf);
    if (rc == 1 && out->stopped)
        return CHUTE_OK;
    if (rc != CHUTE_OK)
        return rc;
    if (!c.has_trunc)
        return ch_err(err, CHUTE_EFORMAT, "%s: the listing has no <IsTruncated>", what);
    if (out->truncated && !out->next_token[0])
        return ch_err(err, CHUTE_EFORMAT,
                      "%s: the listing is truncated but has no <NextContinuationToken>", what);
    return CHUTE_OK;
}

typedef struct code_ctx {
    char *code;
    size_t cap;
} code_ctx;

static int code_end(void *user, const xml_elem *st, int depth, const char *text, size_t tlen)
{
    code_ctx *c = user;
    if (depth == 2 && name_is(&st[0], "Error") && name_is(&st[1], "Code")) {
        size_t k = 0;
        for (size_t i = 0; i < tlen && k + 1 < c->cap; i++)
            if (text[i] > ' ' && text[i] < 0x7f)
                c->code[k++] = text[i];
        c->code[k] = '\0';
        return 2; /* found: stop */
    }
    return 0;
}

void ch_s3_error_code(const char *doc, size_t n, char *code, size_t cap)
{
    if (!cap)
        return;
    code[0] = '\0';
    char *buf = malloc(n + 1);
    if (!buf)
        return;
    code_ctx c = {code, cap};
    chute_error e;
    xml_walk(doc, n, buf, code_end, &c, "error", &e);
    free(buf);
}

size_t ch_s3_encode(const char *src, int keep_slash, char *dst, size_t cap)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t k = 0;
    for (const unsigned char *s = (const unsigned char *)src; *s; s++) {
        unsigned char c = *s;
        int plain = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/');
        if (k + (plain ? 1 : 3) >= cap)
            return (size_t)-1;
        if (plain) {
            dst[k++] = (char)c;
        } else {
            dst[k++] = '%';
            dst[k++] = hex[c >> 4];
            dst[k++] = hex[c & 15];
        }
    }
    if (k >= cap)
        return (size_t)-1;
    dst[k] = '\0';
    return k;
}

/* ---- InitiateMultipartUploadResult (pack/convert to s3://) ---- */

typedef struct upid_ctx {
    char *out;
    size_t cap;
    int found;
} upid_ctx;

static int upid_end(void *user, const xml_elem *st, int depth, const char *text, size_t tlen)
{
    upid_ctx *c = user;
    if (depth == 2 && name_is(&st[0], "InitiateMultipartUploadResult") &&
        name_is(&st[1], "UploadId")) {
        if (tlen == 0 || tlen >= c->cap)
            return 2; /* empty or too long: not found */
        for (size_t i = 0; i < tlen; i++)
            if (text[i] <= ' ' || text[i] >= 0x7f)
                return 2;
        memcpy(c->out, text, tlen);
        c->out[tlen] = '\0';
        c->found = 1;
        return 2;
    }
    return 0;
}

int ch_s3_upload_id(const char *doc, size_t n, char *out, size_t cap)
{
    if (!cap)
        return -1;
    out[0] = '\0';
    char *buf = malloc(n + 1);
    if (!buf)
        return -1;
    upid_ctx c = {out, cap, 0};
    chute_error e;
    xml_walk(doc, n, buf, upid_end, &c, "upload", &e);
    free(buf);
    if (!c.found)
        out[0] = '\0';
    return c.found ? 0 : -1;
}
