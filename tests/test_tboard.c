/*
 * test_tboard.c — the TensorBoard event-file writer (src/stats/tboard.c)
 * at the C level, for the sanitizer tiers: records framed as TFRecord
 * (the masked CRC32C computed here from its definition in TensorFlow's
 * record format, not with the library's helper), the version event first,
 * steps in order with the newest snapshot never dropped when the ring
 * overflows, a known value encoded as the float TensorBoard reads, and
 * errors naming the path.  TensorBoard's own reader checks the files in
 * tests/python/test_tensorboard.py.
 */
#include "unit.h"

#include "format/parse.h"
#include "stats/tboard.h"

#include <dirent.h>
#include <string.h>
#include <unistd.h>

static uint32_t masked(const uint8_t *p, size_t n)
{
    uint32_t c = ch_crc32c_sw(0, p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u; /* TFRecord's mask */
}

static uint64_t rd_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* The one event file in dir, read whole. */
static uint8_t *read_events(const char *dir, size_t *len)
{
    DIR *d = opendir(dir);
    if (!d)
        return NULL;
    struct dirent *e;
    char path[4096] = "";
    while ((e = readdir(d)))
        if (strncmp(e->d_name, "events.out.tfevents.", 20) == 0)
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    closedir(d);
    return path[0] ? unit_read_file(path, len) : NULL;
}

/* The step (field 2) of an Event, 0 when absent. */
static uint64_t event_step(const uint8_t *p, size_t n)
{
    if (n < 10 || p[0] != 0x09 || p[9] != 0x10)
        return 0;
    uint64_t v = 0;
    for (size_t i = 10, s = 0; i < n && s < 64; i++, s += 7) {
        v |= (uint64_t)(p[i] & 0x7f) << s;
        if (!(p[i] & 0x80))
            break;
    }
    return v;
}

TEST(records_framed_steps_in_order_newest_kept)
{
    char dir[4096], sub[4200];
    unit_scratch("tboard_frames", dir, sizeof dir);
    snprintf(sub, sizeof sub, "%s/runs/exp1", dir); /* parents are created */
    ch_tboard *tb = NULL;
    chute_error err = {0};
    CHECK_OK(ch_tboard_open(sub, &tb, &err));
    chute_stats st;
    memset(&st, 0, sizeof st);
    for (uint64_t step = 1; step <= 500; step++) { /* faster than any disk: some drop */
        st.batches = step;
        st.last_wait_ns = 2500000; /* 2.5 ms */
        ch_tboard_post(tb, step, &st);
    }
    ch_tboard_close(tb);
    size_t len = 0;
    uint8_t *f = read_events(sub, &len);
    CHECK(f != NULL, "no event file in %s", sub);
    size_t off = 0, nrec = 0;
    uint64_t last = 0;
    float want = 2.5f;
    uint8_t wait_val[5] = {0x15};
    memcpy(wait_val + 1, &want, 4);
    while (off < len) {
        CHECK(len - off >= 16, "truncated record at %zu", off);
        uint64_t n = rd_le(f + off, 8);
        CHECK(rd_le(f + off + 8, 4) == masked(f + off, 8), "length CRC at %zu", off);
        CHECK(n <= len - off - 16, "record length %llu at %zu", (unsigned long long)n, off);
        const uint8_t *ev = f + off + 12;
        CHECK(rd_le(ev + n, 4) == masked(ev, n), "data CRC at %zu", off);
        if (nrec == 0) {
            CHECK(n > 15 && memmem(ev, n, "\x1a\x0d" "brain.Event:2", 15) != NULL,
                  "first event is not file_version brain.Event:2");
        } else {
            uint64_t step = event_step(ev, n);
            CHECK(step > last, "step %llu after %llu", (unsigned long long)step,
                  (unsigned long long)last);
            last = step;
            const char *tag = "\x0d" "chute/wait_ms";
            const uint8_t *t = memmem(ev, n, tag, strlen(tag));
            CHECK(t && memcmp(t + strlen(tag), wait_val, 5) == 0,
                  "chute/wait_ms is not simple_value 2.5 at step %llu", (unsigned long long)step);
        }
        off += 16 + n;
        nrec++;
    }
    CHECK(last == 500, "the newest snapshot (500) is written, last %llu", (unsigned long long)last);
    CHECK(nrec >= 1 + 16 && nrec <= 1 + 500, "%zu records", nrec);
    free(f);
    return 0;
}

TEST(a_file_in_the_way_names_the_path)
{
    char dir[4096], file[4200], sub[4300];
    unit_scratch("tboard_errors", dir, sizeof dir);
    snprintf(file, sizeof file, "%s/plain", dir);
    CHECK(unit_write_file(file, "x", 1) == 0, "write %s", file);
    ch_tboard *tb = (ch_tboard *)1;
    chute_error err = {0};
    CHECK(ch_tboard_open(file, &tb, &err) != CHUTE_OK && tb == NULL, "a file as log dir");
    CHECK(strstr(err.message, "tensorboard") && strstr(err.message, file), "%s", err.message);
    snprintf(sub, sizeof sub, "%s/sub/run", file);
    CHECK(ch_tboard_open(sub, &tb, &err) != CHUTE_OK, "below a file");
    CHECK(strstr(err.message, "cannot create log directory") &&
              strstr(err.message, "Not a directory"),
          "%s", err.message);
    CHECK(ch_tboard_open("", &tb, &err) != CHUTE_OK, "empty path");
    return 0;
}

/* One scalar of the caller's (rank_report's): its own event with that tag,
 * value and step; a tag too long for the fixed slot is refused. */
TEST(a_caller_scalar_is_one_event)
{
    char dir[4096];
    unit_scratch("tboard_scalar", dir, sizeof dir);
    ch_tboard *tb = NULL;
    chute_error err = {0};
    CHECK_OK(ch_tboard_open(dir, &tb, &err));
    char longtag[CH_TB_TAG_MAX + 1];
    memset(longtag, 'x', CH_TB_TAG_MAX);
    longtag[CH_TB_TAG_MAX] = '\0';
    CHECK(ch_tboard_post_scalar(tb, longtag, 1.0, 1) == CHUTE_EINVAL, "a 64-byte tag");
    CHECK(ch_tboard_post_scalar(tb, "", 1.0, 1) == CHUTE_EINVAL, "an empty tag");
    CHECK_OK(ch_tboard_post_scalar(tb, "chute/ranks/max_wait_s", 0.75, 42));
    ch_tboard_close(tb);
    size_t len = 0;
    uint8_t *f = read_events(dir, &len);
    CHECK(f != NULL, "no event file");
    size_t n0 = (size_t)rd_le(f, 8);
    const uint8_t *ev = f + 16 + n0 + 12; /* the second record's Event */
    size_t n = (size_t)rd_le(f + 16 + n0, 8);
    CHECK(16 + n0 + 16 + n == len, "two records, %zu bytes", len);
    CHECK(event_step(ev, n) == 42, "step");
    /* summary { value { tag "chute/ranks/max_wait_s" simple_value 0.75 } } */
    uint8_t want[64] = {0x2a, 2 + 2 + 22 + 5, 0x0a, 2 + 22 + 5, 0x0a, 22};
    memcpy(want + 6, "chute/ranks/max_wait_s", 22);
    want[28] = 0x15;
    float v = 0.75f;
    memcpy(want + 29, &v, 4);
    CHECK(n >= 33 && memcmp(ev + n - 33, want, 33) == 0, "summary bytes");
    free(f);
    return 0;
}

/* Through the loader: option tensorboard on a real dataset (the fixture
 * tree), every 2 batches; the steps written are even, in order, end at
 * the last even batch count, and chute/batches equals the step. */
TEST(loader_option_writes_every_n_batches)
{
    char tree[4200], ready[4200], dir[4096];
    if (!g_data)
        SKIP("no --data");
    snprintf(tree, sizeof tree, "%s/tree", g_data);
    snprintf(ready, sizeof ready, "%s/READY", g_data);
    if (access(ready, F_OK) != 0)
        SKIP("fixture data missing (run the data_setup test)");
    unit_scratch("tboard_loader", dir, sizeof dir);
    chute_dataset *ds = NULL;
    chute_error err = {0};
    CHECK_OK(chute_dataset_open(tree, CHUTE_SOURCE_AUTO, &ds, &err));
    chute_loader_options o = {0};
    o.batch_size = 8;
    o.size = 16;
    o.workers = 2;
    o.tensorboard = dir;
    o.tensorboard_every = 2;
    chute_loader *ld = NULL;
    CHECK_OK(chute_loader_create(ds, &o, &ld, &err));
    chute_batch *b = NULL;
    uint64_t nb = 0;
    while (chute_loader_next(ld, &b) == CHUTE_OK && b) {
        nb++;
        chute_batch_release(b);
    }
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    CHECK(nb >= 4, "%llu batches", (unsigned long long)nb);
    size_t len = 0;
    uint8_t *f = read_events(dir, &len);
    CHECK(f != NULL, "no event file in %s", dir);
    uint64_t last = 0;
    for (size_t off = 0, i = 0; off + 16 <= len; i++) {
        uint64_t n = rd_le(f + off, 8);
        CHECK(n <= len - off - 16, "record length at %zu", off);
        const uint8_t *ev = f + off + 12;
        if (i > 0) {
            uint64_t step = event_step(ev, n);
            CHECK(step % 2 == 0 && step > last, "step %llu after %llu",
                  (unsigned long long)step, (unsigned long long)last);
            last = step;
            float want = (float)step;
            uint8_t val[5] = {0x15};
            memcpy(val + 1, &want, 4);
            const char *tag = "\x0d" "chute/batches";
            const uint8_t *t = memmem(ev, n, tag, strlen(tag));
            CHECK(t && memcmp(t + strlen(tag), val, 5) == 0, "chute/batches != step %llu",
                  (unsigned long long)step);
        }
        off += 16 + n;
    }
    CHECK(last == nb / 2 * 2, "last step %llu of %llu batches", (unsigned long long)last,
          (unsigned long long)nb);
    free(f);
    return 0;
}

UNIT_MAIN
