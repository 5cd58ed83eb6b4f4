/*
 * fuzz_s3xml.c — fuzz target: the XML an S3 server sends back
 * (src/io/remote/s3_xml.c).  Every input is parsed as a ListObjectsV2 page under
 * two prefixes, as an error document and as a multipart upload's
 * InitiateMultipartUploadResult; every name handed out must be
 * non-empty, free of '/' and NUL, and a truncated page must carry a
 * token.  The input also goes through the key encoder, whose output must
 * decode back to the input exactly.
 */
#include "io/remote.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int check_entry(void *user, const char *name, int is_dir, uint64_t sz)
{
    size_t n = strlen(name);
    if (n == 0 || strchr(name, '/'))
        __builtin_trap();
    (*(unsigned *)user)++;
    return *(unsigned *)user > 5000; /* stop early sometimes */
}

static int unhex(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const prefixes[] = {"", "p/"};
    for (int k = 0; k < 2; k++) {
        chute_error err;
        ch_s3_page page;
        unsigned n = 0;
        int rc = ch_s3_parse_list((const char *)data, size, prefixes[k], check_entry, &n, &page,
                                  "fuzz", &err);
        if (rc == CHUTE_OK && page.truncated && !page.stopped && !page.next_token[0])
            __builtin_trap();
        if (rc != CHUTE_OK && rc != CHUTE_EFORMAT && rc != CHUTE_ENOMEM)
            __builtin_trap();
    }
    char code[64];
    ch_s3_error_code((const char *)data, size, code, sizeof code);
    for (const char *c = code; *c; c++)
        if (*c <= ' ' || *c >= 0x7f)
            __builtin_trap();
    char upid[128];
    if (ch_s3_upload_id((const char *)data, size, upid, sizeof upid) == 0) {
        if (!upid[0])
            __builtin_trap();
        for (const char *c = upid; *c; c++)
            if (*c <= ' ' || *c >= 0x7f)
                __builtin_trap();
    }
    char src[256], enc[256 * 3 + 1], dec[256];
    size_t m = size < sizeof src - 1 ? size : sizeof src - 1;
    memcpy(src, data, m);
    src[m] = '\0';
    size_t el = ch_s3_encode(src, size & 1, enc, sizeof enc);
    if (el == (size_t)-1)
        __builtin_trap(); /* 3 bytes per byte always fit */
    size_t d = 0;
    for (size_t i = 0; i < el; i++) {
        if (enc[i] == '%') {
            int a = unhex(enc[i + 1]), b = unhex(enc[i + 2]);
            if (a < 0 || b < 0)
                __builtin_trap();
            dec[d++] = (char)(a * 16 + b);
            i += 2;
        } else {
            dec[d++] = enc[i];
        }
    }
    if (d != strlen(src) || memcmp(dec, src, d))
        __builtin_trap();
    return 0;
}
