/*
 * test_sources.c — every format reads through the dataset's source.
 *
 * Why this test exists: a remote source (S3, HTTP) must serve every format
 * without touching one, so no format may stat, list, open or read a file
 * behind the source's back.  The proof here needs no syscall tracing: a
 * test-only source serves paths of the form "wrap://<local path>" by
 * stripping the prefix and forwarding to the local source, counting every
 * call.  A format that went to the file system directly would hand it
 * "wrap:///..." which names nothing there, and the open (or read) would
 * fail; a source operation given a path without the prefix is counted as
 * a bypass.  Each dataset opened through the wrapper must also read back
 * byte-identical samples, labels and skipped-entry reasons to the same
 * dataset opened locally.
 *
 * The wrapper is passed with ch_dataset_open_src (format.h): nothing is
 * registered globally.
 */
#include "unit.h"

#include "format/format.h"
#include "format/tfr_saved.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <stdatomic.h>

#define WRAP "wrap://"

static _Atomic unsigned long long n_stat, n_list, n_open, n_read_at, n_read_file, n_bad,
    bytes_read;

static const char *unwrap(const char *path)
{
    if (!path || strncmp(path, WRAP, strlen(WRAP)) != 0) {
        atomic_fetch_add(&n_bad, 1);
        fprintf(stderr, "source bypassed: a path without %s: '%s'\n", WRAP, path ? path : "");
        return NULL;
    }
    return path + strlen(WRAP);
}

static int w_open(const char *path, void **out, uint64_t *out_size, chute_error *err)
{
    atomic_fetch_add(&n_open, 1);
    const char *p = unwrap(path);
    if (!p)
        return ch_err(err, CHUTE_EIO, "%s: not a wrap:// path", path);
    return ch_source_local.open(p, out, out_size, err);
}

static int w_read_at(void *h, const char *path, uint64_t off, void *buf, size_t len,
                     chute_error *err)
{
    atomic_fetch_add(&n_read_at, 1);
    atomic_fetch_add(&bytes_read, len);
    if (!unwrap(path))
        return ch_err(err, CHUTE_EIO, "%s: not a wrap:// path", path);
    return ch_source_local.read_at(h, path, off, buf, len, err);
}

static void w_close(void *h) { ch_source_local.close(h); }

static int w_read_file(const char *path, void *buf, size_t cap, size_t *out_len,
                       chute_error *err)
{
    atomic_fetch_add(&n_read_file, 1);
    const char *p = unwrap(path);
    if (!p)
        return ch_err(err, CHUTE_EIO, "%s: not a wrap:// path", path);
    return ch_source_local.read_file(p, buf, cap, out_len, err); /* not in bytes_read */
}

static int w_stat(const char *path, ch_stat *out, chute_error *err)
{
    atomic_fetch_add(&n_stat, 1);
    const char *p = unwrap(path);
    if (!p)
        return ch_err(err, CHUTE_EIO, "%s: not a wrap:// path", path);
    return ch_source_local.stat(p, out, err);
}

static int w_list(const char *dir, ch_list_fn fn, void *user, chute_error *err)
{
    atomic_fetch_add(&n_list, 1);
    const char *p = unwrap(dir);
    if (!p)
        return ch_err(err, CHUTE_EIO, "%s: not a wrap:// path", dir);
    return ch_source_local.list(p, fn, user, err);
}

static const char *const k_wrap_schemes[] = {WRAP, NULL};
static const ch_source_ops k_wrap = {
    .version = CH_SOURCE_OPS_VERSION,
    .caps = CH_SOURCE_CAP_PREAD,
    .name = "wrap (test)",
    .open = w_open,
    .read_at = w_read_at,
    .close = w_close,
    .read_file = w_read_file,
    .schemes = k_wrap_schemes,
    .stat = w_stat,
    .list = w_list,
};

static void counters_reset(void)
{
    n_stat = n_list = n_open = n_read_at = n_read_file = n_bad = bytes_read = 0;
}

static int copy_file(const char *from, const char *to)
{
    size_t n = 0;
    uint8_t *b = unit_read_file(from, &n);
    if (!b)
        return -1;
    int rc = unit_write_file(to, b, n);
    free(b);
    return rc;
}

static char g_fixtures[4096];

static int fixtures_dir(void)
{
    /* tests/fixtures beside this file (CMake compiles it by absolute path). */
    snprintf(g_fixtures, sizeof g_fixtures, "%s", __FILE__);
    char *slash = strrchr(g_fixtures, '/');
    if (!slash)
        return -1;
    snprintf(slash, sizeof g_fixtures - (size_t)(slash - g_fixtures), "/fixtures");
    struct stat st;
    return stat(g_fixtures, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : -1;
}

/* Open `path` locally and as wrap://path with the same options; the two
 * must agree on format, size, labels, class names, skipped entries and
 * every sample's bytes (or failure status), and the wrapped one must have
 * used the source only. */
static int same_through_wrapper(const char *path, const chute_dataset_options *opt,
                                const char *want_format)
{
    chute_error err = {0};
    chute_dataset *a = NULL, *b = NULL;
    int rc = chute_dataset_open_ex(path, opt, &a, &err);
    CHECK(rc == CHUTE_OK, "local open %s: %s", path, err.message);
    char wpath[4200];
    snprintf(wpath, sizeof wpath, "%s%s", WRAP, path);
    counters_reset();
    rc = ch_dataset_open_src(&k_wrap, wpath, opt, &b, &err);
    CHECK(rc == CHUTE_OK, "open through the wrapper %s: %s", wpath, err.message);
    CHECK(n_bad == 0, "%llu source calls without the wrap:// prefix", n_bad);
    CHECK(n_stat > 0 && (n_list > 0 || n_open > 0), "source not used? stat %llu list %llu open %llu",
          n_stat, n_list, n_open);
    CHECK(strcmp(chute_dataset_format_name(b), want_format) == 0, "format %s, want %s",
          chute_dataset_format_name(b), want_format);
    CHECK(strcmp(chute_dataset_format_name(a), chute_dataset_format_name(b)) == 0, "formats differ");
    uint64_t n = chute_dataset_size(a);
    CHECK(n > 0 && n == chute_dataset_size(b), "sizes %llu vs %llu", (unsigned long long)n,
          (unsigned long long)chute_dataset_size(b));
    CHECK(chute_dataset_num_classes(a) == chute_dataset_num_classes(b), "class counts differ");
    for (uint32_t c = 0; c < chute_dataset_num_classes(a); c++)
        CHECK(strcmp(chute_dataset_class_name(a, c), chute_dataset_class_name(b, c)) == 0,
              "class %u differs", c);
    char sa[512], sb[512];
    uint64_t ka = chute_dataset_skipped(a, 0, sa, sizeof sa);
    uint64_t kb = chute_dataset_skipped(b, 0, sb, sizeof sb);
    CHECK(ka == kb, "skipped %llu vs %llu", (unsigned long long)ka, (unsigned long long)kb);
    for (uint64_t k = 0; k < ka && k < 16; k++) {
        chute_dataset_skipped(a, k, sa, sizeof sa);
        chute_dataset_skipped(b, k, sb, sizeof sb);
        /* the wrapped message names wrap://ROOT/...: compare past the root */
        CHECK(strlen(sb) == strlen(sa) + strlen(WRAP) && strcmp(sb + strlen(WRAP), sa) == 0,
              "skipped %llu: '%s' vs '%s'", (unsigned long long)k, sa, sb);
    }
    size_t cap = 64 << 20;
    uint8_t *ba = malloc(cap), *bb = malloc(cap);
    CHECK(ba && bb, "oom");
    uint64_t good = 0;
    for (uint64_t i = 0; i < n; i++) {
        CHECK(chute_dataset_label(a, i) == chute_dataset_label(b, i), "label %llu differs",
              (unsigned long long)i);
        CHECK(chute_dataset_sample_size(a, i) == chute_dataset_sample_size(b, i),
              "sample_size %llu differs", (unsigned long long)i);
        size_t la = 0, lb = 0;
        chute_error ea = {0}, eb = {0};
        int ra = chute_dataset_read(a, i, ba, cap, &la, &ea);
        int rb = chute_dataset_read(b, i, bb, cap, &lb, &eb);
        CHECK(ra == rb, "sample %llu: local %s (%s), wrapped %s (%s)", (unsigned long long)i,
              chute_status_name(ra), ea.message, chute_status_name(rb), eb.message);
        if (ra == CHUTE_OK) {
            CHECK(la == lb && memcmp(ba, bb, la) == 0, "sample %llu bytes differ",
                  (unsigned long long)i);
            good++;
        }
    }
    CHECK(good > 0, "no sample read");
    CHECK(n_bad == 0, "%llu source calls without the wrap:// prefix while reading", n_bad);
    free(ba);
    free(bb);
    chute_dataset_close(a);
    chute_dataset_close(b);
    return 0;
}

TEST(tree_through_source)
{
    if (!g_data)
        SKIP("no --data");
    char root[4096];
    snprintf(root, sizeof root, "%s/tree", g_data);
    struct stat st;
    if (stat(root, &st) != 0)
        SKIP("no %s (data_setup did not run)", root);
    /* Resolve to an absolute path: wrap:// takes one. */
    char abs[4096];
    CHECK(realpath(root, abs) != NULL, "realpath %s", root);
    return same_through_wrapper(abs, NULL, "tree");
}

/* A small tree with entries the listing leaves out (a FIFO and a dangling
 * link named like images): the reasons come from the source's list. */
TEST(tree_skipped_through_source)
{
    char dir[4096], p[4300];
    unit_scratch("skipped", dir, sizeof dir);
    if (fixtures_dir() != 0)
        SKIP("no fixtures");
    /* Any bytes do: this test reads files, it does not decode them. */
    snprintf(p, sizeof p, "%s/b", dir);
    unit_mkdirs(p);
    snprintf(p, sizeof p, "%s/a/sub", dir);
    unit_mkdirs(p);
    snprintf(p, sizeof p, "%s/a/x.jpg", dir);
    CHECK(unit_write_file(p, "jpeg?", 5) == 0, "write");
    snprintf(p, sizeof p, "%s/a/sub/y.png", dir);
    CHECK(unit_write_file(p, "png?", 4) == 0, "write");
    snprintf(p, sizeof p, "%s/b/z.JPG", dir);
    CHECK(unit_write_file(p, "jpg!", 4) == 0, "write");
    snprintf(p, sizeof p, "%s/a/fifo.jpg", dir);
    CHECK(mkfifo(p, 0644) == 0, "mkfifo");
    snprintf(p, sizeof p, "%s/b/dangling.jpg", dir);
    CHECK(symlink("nowhere.jpg", p) == 0, "symlink");
    CHECK_OK(same_through_wrapper(dir, NULL, "tree"));
    /* And the reasons are the local source's words. */
    chute_error err = {0};
    chute_dataset *ds = NULL;
    char w[4200], m[512];
    snprintf(w, sizeof w, "%s%s", WRAP, dir);
    CHECK(ch_dataset_open_src(&k_wrap, w, NULL, &ds, &err) == CHUTE_OK, "%s", err.message);
    CHECK(chute_dataset_size(ds) == 3, "size %llu", (unsigned long long)chute_dataset_size(ds));
    CHECK(chute_dataset_skipped(ds, 0, m, sizeof m) == 2, "skipped count");
    CHECK(strstr(m, "a/fifo.jpg: a FIFO, left out"), "first skipped: %s", m);
    chute_dataset_skipped(ds, 1, m, sizeof m);
    CHECK(strstr(m, "b/dangling.jpg: a dangling symbolic link, left out"), "second: %s", m);
    chute_dataset_close(ds);
    return 0;
}

TEST(shards_through_source)
{
    if (!g_data)
        SKIP("no --data");
    char root[4096], abs[4096];
    snprintf(root, sizeof root, "%s/shards", g_data);
    struct stat st;
    if (stat(root, &st) != 0)
        SKIP("no %s (data_setup did not run)", root);
    CHECK(realpath(root, abs) != NULL, "realpath %s", root);
    return same_through_wrapper(abs, NULL, "shards");
}

/* A shard listed by the manifest that is a symbolic link is refused
 * through the source too (the source's stat says is_link). */
TEST(shards_symlink_refused_through_source)
{
    if (!g_data)
        SKIP("no --data");
    char root[4096], abs[4096], dir[4096];
    snprintf(root, sizeof root, "%s/shards", g_data);
    struct stat st;
    if (stat(root, &st) != 0)
        SKIP("no %s (data_setup did not run)", root);
    CHECK(realpath(root, abs) != NULL, "realpath %s", root);
    unit_scratch("shardlink", dir, sizeof dir);
    char from[4300], to[4300], cmd[9000];
    snprintf(cmd, sizeof cmd, "cp '%s'/* '%s'/", abs, dir);
    CHECK(system(cmd) == 0, "copy shards");
    snprintf(from, sizeof from, "%s/shard-00000.chute", dir);
    snprintf(to, sizeof to, "%s/elsewhere.bin", dir);
    CHECK(rename(from, to) == 0, "rename");
    CHECK(symlink("elsewhere.bin", from) == 0, "symlink");
    chute_error err = {0};
    chute_dataset *ds = NULL;
    char w[4200];
    snprintf(w, sizeof w, "%s%s", WRAP, dir);
    int rc = ch_dataset_open_src(&k_wrap, w, NULL, &ds, &err);
    CHECK(rc == CHUTE_EFORMAT && strstr(err.message, "is a symbolic link"), "%s: %s",
          chute_status_name(rc), err.message);
    return 0;
}

TEST(tfrecord_through_source)
{
    if (fixtures_dir() != 0)
        SKIP("no fixtures");
    char dir[4096], from[4300], to[4300];
    unit_scratch("tfr", dir, sizeof dir);
    const char *names[] = {"plain.tfrecord", "plain.idx", "unpacked.tfrecord"};
    for (int k = 0; k < 3; k++) {
        snprintf(from, sizeof from, "%s/%s", g_fixtures, names[k]);
        snprintf(to, sizeof to, "%s/%s", dir, names[k]);
        CHECK(copy_file(from, to) == 0, "copy %s", from);
    }
    /* The fixtures' keys and labels (make_fixtures.py: -30..; offset 30). */
    chute_dataset_options o = {0};
    o.image_key = "image";
    o.label_key = "label";
    o.label_offset = 30;
    return same_through_wrapper(dir, &o, "tfrecord");
}

TEST(wds_through_source)
{
    if (fixtures_dir() != 0)
        SKIP("no fixtures");
    char dir[4096], from[4300], to[4300];
    unit_scratch("wds", dir, sizeof dir);
    const char *names[] = {"wds-000000.tar", "wds-000001.tar", "wds_pax.tar"};
    for (int k = 0; k < 3; k++) {
        snprintf(from, sizeof from, "%s/%s", g_fixtures, names[k]);
        snprintf(to, sizeof to, "%s/%s", dir, names[k]);
        CHECK(copy_file(from, to) == 0, "copy %s", from);
    }
    return same_through_wrapper(dir, NULL, "wds");
}

/* ---- the saved TFRecord index (src/format/tfr_saved.h) ---- */

typedef struct opened {
    uint64_t n;
    int32_t labels[256];
    unsigned long long read_at_bytes, read_files;
} opened;

/* Open dir (wrapped or local) with the fixtures' keys; labels and the
 * bytes the source read (wrapped only) into *o; every sample is read back
 * and must equal the one from `ref` (when given). */
static int open_tfr(const char *dir, int wrapped, const char *index_dir, opened *o,
                    const opened *ref)
{
    chute_dataset_options opt = {0};
    opt.image_key = "image";
    opt.label_key = "label";
    opt.label_offset = 30;
    opt.index_dir = index_dir;
    chute_error err = {0};
    chute_dataset *ds = NULL;
    char w[4200];
    snprintf(w, sizeof w, "%s%s", WRAP, dir);
    counters_reset();
    int rc = wrapped ? ch_dataset_open_src(&k_wrap, w, &opt, &ds, &err)
                     : chute_dataset_open_ex(dir, &opt, &ds, &err);
    CHECK(rc == CHUTE_OK, "open %s: %s", dir, err.message);
    o->read_at_bytes = bytes_read;
    o->read_files = n_read_file;
    o->n = chute_dataset_size(ds);
    CHECK(o->n > 0 && o->n <= 256, "n = %llu", (unsigned long long)o->n);
    for (uint64_t i = 0; i < o->n; i++)
        o->labels[i] = (int32_t)chute_dataset_label(ds, i);
    if (ref) {
        CHECK(ref->n == o->n, "%llu samples, want %llu", (unsigned long long)o->n,
              (unsigned long long)ref->n);
        CHECK(memcmp(ref->labels, o->labels, o->n * sizeof *o->labels) == 0, "labels differ");
    }
    static uint8_t buf[1 << 20];
    for (uint64_t i = 0; i < o->n; i++) {
        size_t len = 0;
        rc = chute_dataset_read(ds, i, buf, sizeof buf, &len, &err);
        CHECK(rc == CHUTE_OK, "read %llu: %s", (unsigned long long)i, err.message);
    }
    chute_dataset_close(ds);
    return 0;
}

static uint64_t file_size(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 ? (uint64_t)st.st_size : 0;
}

TEST(tfrecord_saved_index)
{
    if (fixtures_dir() != 0)
        SKIP("no fixtures");
    char dir[4096], p[4300], from[4300], idx[4300], cache[4300];
    unit_scratch("tfx", dir, sizeof dir);
    snprintf(cache, sizeof cache, "%s/../tfx_cache", dir);
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache);
    CHECK(system(cmd) == 0, "rm");
    /* plain.tfrecord without its DALI index: the first open scans. */
    snprintf(from, sizeof from, "%s/plain.tfrecord", g_fixtures);
    snprintf(p, sizeof p, "%s/plain.tfrecord", dir);
    CHECK(copy_file(from, p) == 0, "copy");
    uint64_t data = file_size(p);
    snprintf(idx, sizeof idx, "%s.chuteidx", p);

    /* The reference: the same file opened where nothing is saved (a
     * wrapped source with index_dir ""): every record read.  (Its labels
     * are the ones TensorFlow wrote: formats_fixtures_tfrecord checks.) */
    opened ref, o;
    CHECK_OK(open_tfr(p, 1, "", &ref, NULL));
    CHECK(access(idx, F_OK) != 0, "a wrapped (non-local) source must not save beside the data");
    CHECK(ref.read_at_bytes >= data, "first open read %llu of %llu bytes", ref.read_at_bytes,
          (unsigned long long)data);

    /* A local open saves F.chuteidx beside the data ... */
    CHECK_OK(open_tfr(dir, 0, "", &o, &ref));
    CHECK(access(idx, F_OK) == 0, "no %s after a local open", idx);
    /* ... and the next open reads the index only: the probe's 12-byte
     * header and nothing else of the data. */
    CHECK_OK(open_tfr(dir, 1, "", &o, &ref));
    CHECK(o.read_at_bytes <= 12 && o.read_files >= 1,
          "second open read %llu bytes of data (%llu files): the index was not used",
          o.read_at_bytes, o.read_files);

    /* A damaged index is rebuilt, never trusted: a flipped byte, a
     * truncation, an empty file. */
    size_t ilen = 0;
    uint8_t *good = unit_read_file(idx, &ilen);
    CHECK(good && ilen > 48, "index of %zu bytes", ilen);
    for (int how = 0; how < 4; how++) {
        uint8_t *bad = malloc(ilen);
        memcpy(bad, good, ilen);
        size_t blen = ilen;
        if (how == 0)
            bad[ilen / 2] ^= 0x10;              /* a record's field */
        else if (how == 1)
            blen = ilen - 9;                    /* truncated */
        else if (how == 2)
            blen = 0;                           /* empty */
        else
            bad[17] ^= 1;                       /* the recorded data size */
        CHECK(unit_write_file(idx, bad, blen) == 0, "write");
        free(bad);
        CHECK_OK(open_tfr(dir, 1, "", &o, &ref));
        CHECK(o.read_at_bytes >= data, "damage %d: only %llu bytes read: index trusted", how,
              o.read_at_bytes);
        CHECK_OK(open_tfr(dir, 0, "", &o, &ref)); /* rewrites it */
        CHECK(file_size(idx) == ilen, "damage %d: index not rewritten", how);
    }
    free(good);

    /* A data file touched since (same bytes, other mtime) is reindexed. */
    struct timespec ts[2] = {{1000000000, 5}, {1000000000, 5}};
    CHECK(utimensat(AT_FDCWD, p, ts, 0) == 0, "utimensat");
    CHECK_OK(open_tfr(dir, 1, "", &o, &ref));
    CHECK(o.read_at_bytes >= data, "stale mtime: only %llu bytes read", o.read_at_bytes);

    /* A data file replaced by other records (the file twice over: a
     * valid TFRecord file of twice the records): the stale index is
     * rebuilt and the labels are the new file's. */
    CHECK_OK(open_tfr(dir, 0, "", &o, &ref)); /* index now matches the touched file */
    {
        size_t plen = 0;
        uint8_t *one = unit_read_file(from, &plen), *two = malloc(2 * plen + 1);
        CHECK(one && two && plen == data, "read %s", from);
        memcpy(two, one, plen);
        memcpy(two + plen, one, plen);
        CHECK(unit_write_file(p, two, 2 * plen) == 0, "replace");
        free(one);
        free(two);
    }
    opened twice = ref;
    twice.n = 2 * ref.n;
    CHECK(twice.n <= 256, "fixture too large");
    memcpy(twice.labels + ref.n, ref.labels, ref.n * sizeof *ref.labels);
    CHECK_OK(open_tfr(dir, 0, "", &o, &twice));
    CHECK_OK(open_tfr(dir, 1, "", &o, &twice)); /* the rebuilt index is used */
    CHECK(o.read_at_bytes <= 12, "rebuilt index not used: %llu bytes read", o.read_at_bytes);
    opened fresh = twice;

    /* Not local, or not writable: the index directory holds it. */
    CHECK(unlink(idx) == 0, "unlink");
    CHECK_OK(open_tfr(dir, 1, cache, &o, &fresh));
    CHECK(access(idx, F_OK) != 0, "saved beside through a non-local source");
    char found[4400], wp[4400];
    snprintf(wp, sizeof wp, "%s%s", WRAP, p); /* the path as the dataset saw it */
    CHECK(ch_tfx_cache_path(wp, cache, found, sizeof found) && access(found, F_OK) == 0,
          "no index in %s", cache);
    CHECK_OK(open_tfr(dir, 1, cache, &o, &fresh));
    CHECK(o.read_at_bytes <= 12, "open with the cached index read %llu bytes", o.read_at_bytes);
    return 0;
}

/* ---- the bounded cache of open files (src/format/fcache.h) ---- */

static int count_open_fds(void)
{
    int n = 0;
    char p[64];
    for (int fd = 0; fd < 4096; fd++) {
        snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
        n += access(p, F_OK) == 0;
    }
    return n;
}

/* 150 copies of one file in a directory, read under `ulimit -n 64`
 * through the wrapping source: the dataset opens (it could not if every
 * file stayed open), every sample reads back as the copy's original, in
 * a scattered order, and the source saw files reopened (evictions). */
static int many_files(const char *fixture, const char *ext, const chute_dataset_options *opt,
                      const char *want_format)
{
    char dir[4096], from[4300], to[4300];
    snprintf(to, sizeof to, "many_%s", want_format);
    unit_scratch(to, dir, sizeof dir);
    snprintf(from, sizeof from, "%s/%s", g_fixtures, fixture);
    enum { COPIES = 150 };
    for (int k = 0; k < COPIES; k++) {
        snprintf(to, sizeof to, "%s/f-%04d%s", dir, k, ext);
        CHECK(copy_file(from, to) == 0, "copy");
    }
    /* The reference: the original alone, before the limit. */
    chute_error err = {0};
    chute_dataset *one = NULL, *ds = NULL;
    CHECK(chute_dataset_open_ex(from, opt, &one, &err) == CHUTE_OK, "%s", err.message);
    uint64_t per = chute_dataset_size(one);
    CHECK(per > 0, "empty fixture");
    struct rlimit old, low = {64, 64};
    CHECK(getrlimit(RLIMIT_NOFILE, &old) == 0, "getrlimit");
    if (old.rlim_max < 64)
        SKIP("hard RLIMIT_NOFILE below 64");
    low.rlim_max = old.rlim_max;
    CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0, "setrlimit");
    char w[4200];
    snprintf(w, sizeof w, "%s%s", WRAP, dir);
    counters_reset();
    int rc = ch_dataset_open_src(&k_wrap, w, opt, &ds, &err);
    int fds = count_open_fds();
    CHECK(rc == CHUTE_OK, "open of %d files under ulimit -n 64: %s", COPIES, err.message);
    CHECK(fds <= 64, "%d descriptors open", fds);
    CHECK(strcmp(chute_dataset_format_name(ds), want_format) == 0, "format %s",
          chute_dataset_format_name(ds));
    uint64_t n = chute_dataset_size(ds);
    CHECK(n == per * COPIES, "%llu samples, want %llu", (unsigned long long)n,
          (unsigned long long)(per * COPIES));
    unsigned long long opens_at_open = n_open;
    static uint8_t a[1 << 20], b[1 << 20];
    for (int pass = 0; pass < 2; pass++)
        for (uint64_t j = 0; j < n; j++) {
            uint64_t i = (j * 7919 + (uint64_t)pass * 31) % n; /* scattered over the files */
            size_t la = 0, lb = 0;
            chute_error ea = {0}, eb = {0};
            int ra = chute_dataset_read(one, i % per, a, sizeof a, &la, &ea);
            int rb = chute_dataset_read(ds, i, b, sizeof b, &lb, &eb);
            CHECK(ra == rb && (ra != CHUTE_OK || (la == lb && memcmp(a, b, la) == 0)),
                  "sample %llu: %s / %s (%s)", (unsigned long long)i, chute_status_name(ra),
                  chute_status_name(rb), eb.message);
            CHECK(chute_dataset_label(one, i % per) == chute_dataset_label(ds, i), "label %llu",
                  (unsigned long long)i);
        }
    fds = count_open_fds();
    CHECK(fds <= 64, "%d descriptors open after reading", fds);
    CHECK(n_open > opens_at_open, "no file was reopened: the cache did not evict");
    chute_dataset_close(ds);
    CHECK(setrlimit(RLIMIT_NOFILE, &old) == 0, "setrlimit back");
    chute_dataset_close(one);
    CHECK(n_bad == 0, "source bypassed");
    return 0;
}

TEST(tfrecord_many_files_under_low_fd_limit)
{
    if (fixtures_dir() != 0)
        SKIP("no fixtures");
    chute_dataset_options o = {0};
    o.image_key = "image";
    o.label_key = "label";
    o.label_offset = 30;
    o.index_dir = "";
    return many_files("plain.tfrecord", ".tfrecord", &o, "tfrecord");
}

TEST(wds_many_files_under_low_fd_limit)
{
    if (fixtures_dir() != 0)
        SKIP("no fixtures");
    return many_files("wds-000000.tar", ".tar", NULL, "wds");
}

/* ---- GZIP/ZLIB TFRecord files (inflated once into the index directory) ---- */

/* Open the compressed fixture through the wrapping source; compare every
 * sample with plain.tfrecord (TensorFlow wrote both from the same records,
 * tests/fixtures/expected.json: "records_as"). */
static int open_compressed(const char *path, const char *index_dir, chute_dataset *plain,
                           unsigned long long *bytes)
{
    chute_dataset_options opt = {0};
    opt.image_key = "image";
    opt.label_key = "label";
    opt.label_offset = 30;
    opt.index_dir = index_dir;
    char w[4200];
    snprintf(w, sizeof w, "%s%s", WRAP, path);
    chute_error err = {0};
    chute_dataset *ds = NULL;
    counters_reset();
    int rc = ch_dataset_open_src(&k_wrap, w, &opt, &ds, &err);
    CHECK(rc == CHUTE_OK, "open %s: %s", w, err.message);
    *bytes = bytes_read;
    uint64_t n = chute_dataset_size(plain);
    CHECK(chute_dataset_size(ds) == n, "%llu records, plain has %llu",
          (unsigned long long)chute_dataset_size(ds), (unsigned long long)n);
    static uint8_t a[1 << 20], b[1 << 20];
    for (uint64_t i = 0; i < n; i++) {
        size_t la = 0, lb = 0;
        CHECK(chute_dataset_label(plain, i) == chute_dataset_label(ds, i), "label %llu",
              (unsigned long long)i);
        CHECK(chute_dataset_read(plain, i, a, sizeof a, &la, &err) == CHUTE_OK, "%s", err.message);
        CHECK(chute_dataset_read(ds, i, b, sizeof b, &lb, &err) == CHUTE_OK, "%s", err.message);
        CHECK(la == lb && memcmp(a, b, la) == 0, "record %llu differs from plain.tfrecord's",
              (unsigned long long)i);
        char d[512];
        chute_dataset_describe(ds, i, d, sizeof d);
        CHECK(strstr(d, w) == d, "described as '%s', not by the compressed file", d);
    }
    CHECK(n_bad == 0, "source bypassed");
    chute_dataset_close(ds);
    return 0;
}

TEST(tfrecord_compressed_inflated_once)
{
    if (fixtures_dir() != 0)
        SKIP("no fixtures");
    char dir[4096], cache[4300], from[4300], p[4300];
    unit_scratch("tfz", dir, sizeof dir);
    snprintf(cache, sizeof cache, "%s/cache", dir);
    chute_dataset_options opt = {0};
    opt.image_key = "image";
    opt.label_key = "label";
    opt.label_offset = 30;
    opt.index_dir = "";
    chute_error err = {0};
    chute_dataset *plain = NULL;
    snprintf(from, sizeof from, "%s/plain.tfrecord", g_fixtures);
    snprintf(p, sizeof p, "%s/plain.tfrecord", dir);
    CHECK(copy_file(from, p) == 0, "copy");
    CHECK(chute_dataset_open_ex(p, &opt, &plain, &err) == CHUTE_OK, "%s", err.message);
    const char *names[] = {"gzip.tfrecord.gz", "zlib.tfrecord.zz"};
    for (int k = 0; k < 2; k++) {
        snprintf(from, sizeof from, "%s/%s", g_fixtures, names[k]);
        snprintf(p, sizeof p, "%s/%s", dir, names[k]);
        CHECK(copy_file(from, p) == 0, "copy");
        uint64_t fsize = file_size(p);
        unsigned long long first = 0, second = 0, again = 0;
        /* First open: probe + inflate (the compressed bytes read twice). */
        CHECK_OK(open_compressed(p, cache, plain, &first));
        CHECK(first >= 2 * fsize, "%s: first open read %llu bytes", names[k], first);
        /* Second: the copy and its index are used; only the probes read
         * (tfrecord's inflates the file's head: up to 64 KiB, here all of
         * it; wds reads one 512-byte block; the format its 12 bytes). */
        CHECK_OK(open_compressed(p, cache, plain, &second));
        CHECK(second <= fsize + 1024, "%s: second open read %llu bytes (inflated again?)",
              names[k], second);
        /* A damaged copy (garbage of the same size) is never served. */
        struct stat st;
        char copy[4600], wp[4400];
        snprintf(wp, sizeof wp, "%s%s", WRAP, p);
        CHECK(stat(p, &st) == 0, "stat");
        CHECK(ch_tfx_inflated_path(wp, cache, fsize,
                                   (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec,
                                   copy, sizeof copy),
              "copy path");
        uint64_t csize = file_size(copy);
        CHECK(csize > 0, "no inflated copy at %s", copy);
        uint8_t *junk = calloc(1, csize);
        CHECK(junk && unit_write_file(copy, junk, csize) == 0, "overwrite");
        free(junk);
        CHECK_OK(open_compressed(p, cache, plain, &again));
        CHECK(again >= 2 * fsize, "%s: damaged copy trusted (%llu bytes read)", names[k], again);
        /* The compressed file touched: inflated again. */
        struct timespec ts[2] = {{1000000000, 7}, {1000000000, 7}};
        CHECK(utimensat(AT_FDCWD, p, ts, 0) == 0, "utimensat");
        CHECK_OK(open_compressed(p, cache, plain, &again));
        CHECK(again >= 2 * fsize, "%s: stale copy used (%llu bytes read)", names[k], again);
        /* No index directory: a clear error, not a crash or a sequential read. */
        chute_dataset *ds = NULL;
        int rc = chute_dataset_open_ex(p, &opt, &ds, &err);
        CHECK(rc == CHUTE_EINVAL && strstr(err.message, "index directory") &&
                  strstr(err.message, names[k]),
              "%s with index_dir \"\": %s (%s)", names[k], chute_status_name(rc), err.message);
        CHECK(unlink(p) == 0, "unlink");
    }
    chute_dataset_close(plain);
    return 0;
}

/* WAV (issue #12): listing (flat and class directories), headers and the
 * window reads of the audio field all go through the source. */
static int wav_fields_same(const char *abs)
{
    char wpath[4200];
    snprintf(wpath, sizeof wpath, "%s%s", WRAP, abs);
    chute_error err = {0};
    chute_dataset *a = NULL, *b = NULL;
    chute_dataset_options o = {0};
    o.audio_samples = 64;
    CHECK(chute_dataset_open_ex(abs, &o, &a, &err) == CHUTE_OK, "%s", err.message);
    CHECK(ch_dataset_open_src(&k_wrap, wpath, &o, &b, &err) == CHUTE_OK, "%s", err.message);
    chute_loader_options lo = {0};
    lo.batch_size = 64;
    lo.workers = 2;
    lo.seed = 3;
    lo.fields = "audio,length";
    chute_loader *la = NULL, *lb = NULL;
    CHECK(chute_loader_create(a, &lo, &la, &err) == CHUTE_OK, "%s", err.message);
    CHECK(chute_loader_create(b, &lo, &lb, &err) == CHUTE_OK, "%s", err.message);
    counters_reset();
    chute_batch *ba = NULL, *bb = NULL;
    CHECK(chute_loader_next(la, &ba) == CHUTE_OK, "%s", chute_loader_errmsg(la));
    CHECK(chute_loader_next(lb, &bb) == CHUTE_OK, "%s", chute_loader_errmsg(lb));
    chute_field_view fa, fb;
    CHECK(chute_batch_field(ba, "audio", &fa) == CHUTE_OK &&
              chute_batch_field(bb, "audio", &fb) == CHUTE_OK,
          "audio");
    CHECK(fa.nbytes == fb.nbytes && memcmp(fa.data, fb.data, fa.nbytes) == 0,
          "train windows differ through the wrapper");
    CHECK(n_open > 0 && n_bad == 0, "opens %llu, unwrapped calls %llu", n_open, n_bad);
    chute_batch_release(ba);
    chute_batch_release(bb);
    chute_loader_destroy(la);
    chute_loader_destroy(lb);
    chute_dataset_close(a);
    chute_dataset_close(b);
    return 0;
}

TEST(wav_through_source)
{
    if (fixtures_dir() != 0)
        SKIP("no fixtures");
    static const char *const subs[] = {"wav/cls", "wav/mono"};
    for (int k = 0; k < 2; k++) {
        char p[4300], abs[4096];
        snprintf(p, sizeof p, "%s/%s", g_fixtures, subs[k]);
        CHECK(realpath(p, abs) != NULL, "realpath %s", p);
        CHECK_OK(same_through_wrapper(abs, NULL, "wav"));
        CHECK_OK(wav_fields_same(abs));
    }
    return 0;
}

/* ch_probe_first and ch_src_read_head (the probe helpers of npy, wav and
 * wds) go through the source too, and find what the probes relied on:
 * the first match directly in the directory, else in the smallest-named
 * subdirectory; dot-names never; a short file is EFORMAT naming it. */
static int ends_npy(const char *name)
{
    size_t n = strlen(name);
    return n > 4 && strcmp(name + n - 4, ".npy") == 0;
}

TEST(probe_first_and_read_head_through_source)
{
    char dir[4096], p[4300], w[4400], first[4096];
    unit_scratch("probe_first", dir, sizeof dir);
    static const char *const dirs[] = {"b_cls", "a_cls", "c_cls", ".a_hidden"};
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, dirs[i]);
        unit_mkdirs(p);
    }
    static const char *const files[] = {".top.npy", "notes.txt", "b_cls/x.npy",
                                        "a_cls/.y.npy", "a_cls/z.txt", "a_cls/y.npy",
                                        ".a_hidden/a.npy"};
    for (int i = 0; i < 7; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        CHECK(unit_write_file(p, "\x93NUMPY", 6) == 0, "write %s", p);
    }
    chute_error e = {0};
    counters_reset();
    snprintf(w, sizeof w, "%s%s", WRAP, dir);
    CHECK_OK(ch_probe_first(&k_wrap, w, ends_npy, first, sizeof first, &e));
    snprintf(p, sizeof p, "%s%s/a_cls/y.npy", WRAP, dir);
    CHECK(strcmp(first, p) == 0, "first: '%s', want '%s'", first, p);
    /* A match directly inside wins over every subdirectory. */
    snprintf(p, sizeof p, "%s/top.npy", dir);
    CHECK(unit_write_file(p, "\x93NUMPY", 5) == 0, "write %s", p);
    CHECK_OK(ch_probe_first(&k_wrap, w, ends_npy, first, sizeof first, &e));
    snprintf(p, sizeof p, "%s%s/top.npy", WRAP, dir);
    CHECK(strcmp(first, p) == 0, "first: '%s', want '%s'", first, p);
    /* Its head: 5 bytes read back; 6 asked is a short file, named. */
    uint8_t head[8] = {0};
    CHECK_OK(ch_src_read_head(&k_wrap, first, head, 5, &e));
    CHECK(memcmp(head, "\x93NUMP", 5) == 0, "head bytes");
    CHECK(ch_src_read_head(&k_wrap, first, head, 6, &e) == CHUTE_EFORMAT &&
              strstr(e.message, "top.npy"),
          "short head: %s", e.message);
    /* Nothing matching: OK and empty; no such directory: an error. */
    snprintf(p, sizeof p, "%s%s/c_cls", WRAP, dir);
    first[0] = 'x';
    CHECK_OK(ch_probe_first(&k_wrap, p, ends_npy, first, sizeof first, &e));
    CHECK(first[0] == 0, "nothing to find, got '%s'", first);
    snprintf(p, sizeof p, "%s%s/missing", WRAP, dir);
    CHECK(ch_probe_first(&k_wrap, p, ends_npy, first, sizeof first, &e) != CHUTE_OK &&
              first[0] == 0,
          "a missing directory must fail");
    CHECK(n_bad == 0, "the source was bypassed %llu times", (unsigned long long)n_bad);
    CHECK(n_list >= 3 && n_open == 2, "list %llu open %llu", (unsigned long long)n_list,
          (unsigned long long)n_open);
    return 0;
}

UNIT_MAIN
