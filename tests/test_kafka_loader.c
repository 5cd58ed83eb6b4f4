/*
 * test_kafka_loader.c — kafka:// datasets through the loader (issue #13):
 * stream_kafka.c wiring ch_kafka (src/io/kafka.h) into the stream pump
 * (src/pipeline/stream.h).
 *
 * The peer is librdkafka's mock cluster (test.mock.num.brokers=3 on a
 * producer handle: the Kafka protocol over TCP, in this process), or a
 * real broker when CHUTE_TEST_KAFKA_BROKERS names one.  Messages are
 * produced by librdkafka's producer and flushed completely before any
 * loader reads them.
 *
 * The reference for pixels is not the code under test's Kafka path: the
 * message values are the encoded JPEGs of the webdataset-written tars in
 * tests/fixtures/fields/wds (read with chute_dataset_read), and each
 * delivered sample must equal, byte for byte, that same sample decoded
 * through the "wds" dataset with the same eval transform.  Message i
 * carries image i % 6 and header label=i, so the label a batch reports
 * names the message (and, through it, the expected pixels).  Message i
 * goes to partition i % 4.
 */
#include "unit.h"

#include "chute.h"

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <time.h>

#define FIX CHUTE_FIXTURES "/fields/wds"
#define NIMG 6
#define SZ 24
#define NPART 4
#define PX (SZ * SZ * 3)

typedef struct cluster {
    rd_kafka_t *prod;
    char boot[512];
    int real;
} cluster;

static void quiet_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk, (void)level, (void)fac, (void)buf;
}

static int cluster_up(cluster *c)
{
    memset(c, 0, sizeof *c);
    const char *real = getenv("CHUTE_TEST_KAFKA_BROKERS");
    char es[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (real && *real) {
        c->real = 1;
        snprintf(c->boot, sizeof c->boot, "%s", real);
        rd_kafka_conf_set(conf, "bootstrap.servers", real, es, sizeof es);
    } else if (rd_kafka_conf_set(conf, "test.mock.num.brokers", "3", es, sizeof es)) {
        rd_kafka_conf_destroy(conf);
        return -1;
    }
    rd_kafka_conf_set(conf, "linger.ms", "5", es, sizeof es);
    rd_kafka_conf_set_log_cb(conf, quiet_log);
    c->prod = rd_kafka_new(RD_KAFKA_PRODUCER, conf, es, sizeof es);
    if (!c->prod)
        return -1;
    if (!c->real) {
        rd_kafka_mock_cluster_t *mc = rd_kafka_handle_mock_cluster(c->prod);
        if (!mc)
            return -1;
        snprintf(c->boot, sizeof c->boot, "%s", rd_kafka_mock_cluster_bootstraps(mc));
    }
    return 0;
}

static void cluster_down(cluster *c)
{
    if (c->prod) {
        rd_kafka_flush(c->prod, 5000);
        rd_kafka_destroy(c->prod);
    }
}

static void uniq(char *buf, size_t n, const char *what)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(buf, n, "chute-%s-%s-%d-%ld", unit_current, what, (int)getpid(), (long)ts.tv_nsec);
}

static int topic_create(cluster *c, const char *topic)
{
    if (!c->real)
        return rd_kafka_mock_topic_create(rd_kafka_handle_mock_cluster(c->prod), topic, NPART, 1)
                   ? -1 : 0;
    char es[256];
    rd_kafka_NewTopic_t *nt = rd_kafka_NewTopic_new(topic, NPART, 1, es, sizeof es);
    rd_kafka_queue_t *q = rd_kafka_queue_new(c->prod);
    rd_kafka_CreateTopics(c->prod, &nt, 1, NULL, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 30000);
    int rc = ev ? 0 : -1;
    if (ev)
        rd_kafka_event_destroy(ev);
    rd_kafka_queue_destroy(q);
    rd_kafka_NewTopic_destroy(nt);
    return rc;
}

/* The reference: the fixtures' images (encoded) and, decoded through the
 * wds dataset with the same options, their pixels. */
static uint8_t img[NIMG][4096];
static size_t img_len[NIMG];
static uint8_t ref_px[NIMG][PX];

static void opts_base(chute_loader_options *o)
{
    memset(o, 0, sizeof *o);
    o->batch_size = 4;
    o->size = SZ;
    o->workers = 2;
    o->dtype = CHUTE_DTYPE_UINT8;
    o->transform = CHUTE_TRANSFORM_EVAL;
    o->seed = 5;
}

static int load_reference(void)
{
    chute_dataset *ds = NULL;
    chute_error err = {0};
    if (chute_dataset_open_ex(FIX, NULL, &ds, &err) != CHUTE_OK || chute_dataset_size(ds) != NIMG)
        return -1;
    for (int i = 0; i < NIMG; i++)
        if (chute_dataset_read(ds, (uint64_t)i, img[i], sizeof img[i], &img_len[i], &err))
            return -1;
    chute_loader_options o;
    opts_base(&o);
    o.no_shuffle = 1;
    o.batch_size = NIMG;
    chute_loader *ld = NULL;
    if (chute_loader_create(ds, &o, &ld, &err) != CHUTE_OK)
        return -1;
    chute_batch *b;
    int ok = -1;
    if (chute_loader_next(ld, &b) == CHUTE_OK) {
        chute_batch_view v;
        chute_batch_view_get(b, &v);
        if (v.count == NIMG) {
            for (int i = 0; i < NIMG; i++)
                memcpy(ref_px[v.indices[i]], (uint8_t *)v.data + (size_t)i * PX, PX);
            ok = 0;
        }
        chute_batch_release(b);
    }
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    return ok;
}

/* Produce messages [from, to): value image i % 6 (or `bad` for ids in
 * bad_ids), header label=i (or "x" for bad_label), partition i % 4. */
static int produce(cluster *c, const char *topic, uint64_t from, uint64_t to, int64_t bad_id,
                   int64_t bad_label)
{
    static const char notimg[] = "this message is not an image";
    for (uint64_t i = from; i < to; i++) {
        char label[32];
        snprintf(label, sizeof label, "%llu", (unsigned long long)i);
        if ((int64_t)i == bad_label)
            snprintf(label, sizeof label, "x");
        const void *v = (int64_t)i == bad_id ? (const void *)notimg : img[i % NIMG];
        size_t vl = (int64_t)i == bad_id ? sizeof notimg - 1 : img_len[i % NIMG];
        rd_kafka_resp_err_t e;
        while ((e = rd_kafka_producev(c->prod, RD_KAFKA_V_TOPIC(topic),
                                      RD_KAFKA_V_PARTITION((int32_t)(i % NPART)),
                                      RD_KAFKA_V_VALUE((void *)v, vl),
                                      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                      RD_KAFKA_V_HEADER("label", label, -1), RD_KAFKA_V_END)) ==
               RD_KAFKA_RESP_ERR__QUEUE_FULL)
            rd_kafka_poll(c->prod, 10);
        if (e)
            return -1;
    }
    /* Every message acknowledged before anyone consumes (see the
     * until=eof note in tests/README.md). */
    return rd_kafka_flush(c->prod, 20000) ? -1 : 0;
}

static int setup(cluster *c, char *topic, size_t tn, uint64_t n, int64_t bad_id,
                 int64_t bad_label)
{
    if (load_reference() || cluster_up(c))
        return -1;
    uniq(topic, tn, "t");
    return topic_create(c, topic) || produce(c, topic, 0, n, bad_id, bad_label) ? -1 : 0;
}

static void mkuri(char *buf, size_t n, const cluster *c, const char *topic, const char *group,
                  const char *extra)
{
    snprintf(buf, n,
             "kafka://%s/%s?group=%s&until=eof&label_header=label&kafka.session.timeout.ms=6000"
             "&kafka.heartbeat.interval.ms=500%s",
             c->boot, topic, group, extra);
}

typedef struct got {
    uint32_t *count;          /* [n] per message id */
    uint64_t n, total, wrong_px;
    int end_rc;
    uint64_t corrupt;
    char msg[1400];
    uint8_t *state;           /* chute_loader_stream_state at the end */
    size_t state_len;
} got;

/* One epoch over `uri`: release the first `release_batches` batches
 * (UINT64_MAX: all), then hold the next one and destroy the loader with
 * it held.  state (len 0: none) is given to the loader first. */
static int run(const char *uri, const chute_loader_options *o, uint64_t n,
               uint64_t release_batches, const void *state, size_t state_len, got *g)
{
    memset(g, 0, sizeof *g);
    g->n = n;
    g->count = calloc(n, sizeof *g->count);
    chute_dataset *ds = NULL;
    chute_error err = {0};
    if (!g->count || chute_dataset_open_ex(uri, NULL, &ds, &err) != CHUTE_OK) {
        fprintf(stderr, "open: %s\n", err.message);
        return -1;
    }
    chute_loader *ld = NULL;
    if (chute_loader_create(ds, o, &ld, &err) != CHUTE_OK) {
        fprintf(stderr, "create: %s\n", err.message);
        chute_dataset_close(ds);
        return -1;
    }
    if (chute_loader_set_stream_state(ld, state, state_len, &err) != CHUTE_OK) {
        fprintf(stderr, "set_stream_state: %s\n", err.message);
        return -1;
    }
    chute_batch *b;
    int rc;
    uint64_t nb = 0;
    while ((rc = chute_loader_next(ld, &b)) == CHUTE_OK) {
        chute_batch_view v;
        chute_batch_view_get(b, &v);
        for (uint32_t i = 0; i < v.count; i++) {
            int64_t id = v.labels[i];
            if (id < 0 || (uint64_t)id >= n) {
                g->wrong_px++;
                continue;
            }
            g->count[id]++;
            g->total++;
            if (memcmp((uint8_t *)v.data + (size_t)i * PX, ref_px[id % NIMG], PX))
                g->wrong_px++;
        }
        if (nb++ == release_batches) {
            /* held: destroyed with the loader */
            for (uint32_t i = 0; i < v.count; i++)
                if (v.labels[i] >= 0 && (uint64_t)v.labels[i] < n) {
                    g->count[v.labels[i]]--;
                    g->total--;
                }
            rc = CHUTE_END;
            break;
        }
        chute_batch_release(b);
    }
    g->end_rc = rc;
    snprintf(g->msg, sizeof g->msg, "%s", chute_loader_errmsg(ld));
    chute_stats st;
    chute_loader_stats(ld, &st);
    g->corrupt = st.corrupt;
    size_t len = 0;
    chute_loader_stream_state(ld, NULL, 0, &len, &err);
    g->state = malloc(len ? len : 1);
    if (len && chute_loader_stream_state(ld, g->state, len, &g->state_len, &err) != CHUTE_OK) {
        fprintf(stderr, "stream_state: %s\n", err.message);
        return -1;
    }
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    return 0;
}

static void got_free(got *g)
{
    free(g->count);
    free(g->state);
}

TEST(every_message_once_with_the_pixels_of_the_wds_dataset)
{
    cluster c;
    char topic[256], group[256], uri[1024];
    const uint64_t N = 60;
    if (setup(&c, topic, sizeof topic, N, -1, -1))
        SKIP("no Kafka cluster (mock or CHUTE_TEST_KAFKA_BROKERS)");
    uniq(group, sizeof group, "g");
    mkuri(uri, sizeof uri, &c, topic, group, "");
    chute_loader_options o;
    opts_base(&o);
    o.shuffle_buffer = 16;
    got g;
    CHECK(run(uri, &o, N, UINT64_MAX, NULL, 0, &g) == 0, "run");
    CHECK(g.end_rc == CHUTE_END, "end %d: %s", g.end_rc, g.msg);
    CHECK(g.wrong_px == 0, "%llu samples with pixels unlike the wds dataset's",
          (unsigned long long)g.wrong_px);
    for (uint64_t i = 0; i < N; i++)
        CHECK(g.count[i] == 1, "message %llu delivered %u times", (unsigned long long)i, g.count[i]);
    CHECK(g.state_len > 0, "no stream state");
    got_free(&g);
    /* Everything was released and committed: the group has nothing left. */
    CHECK(run(uri, &o, N, UINT64_MAX, NULL, 0, &g) == 0, "run 2");
    CHECK(g.end_rc == CHUTE_END && g.total == 0, "%llu delivered again: %s",
          (unsigned long long)g.total, g.msg);
    got_free(&g);
    cluster_down(&c);
    return 0;
}

/* Released batches are committed, a held one (and whatever was read past
 * it) is delivered again: the two runs together are exactly every message
 * once.  No shuffle, so the released batches are a prefix of every
 * partition (with shuffling, at-least-once may repeat a few more). */
static int redelivery(int by_state)
{
    cluster c;
    char topic[256], group[256], uri[1024];
    const uint64_t N = 60;
    if (setup(&c, topic, sizeof topic, N, -1, -1))
        return 77;
    uniq(group, sizeof group, "g");
    mkuri(uri, sizeof uri, &c, topic, group, "&assign=ranks");
    chute_loader_options o;
    opts_base(&o);
    o.no_shuffle = 1;
    got a, b;
    CHECK(run(uri, &o, N, 5, NULL, 0, &a) == 0, "run 1");
    CHECK(a.total == 20 && a.wrong_px == 0, "run 1 released %llu (want 20), %llu wrong",
          (unsigned long long)a.total, (unsigned long long)a.wrong_px);
    if (by_state) {
        /* A fresh group (nothing committed): only the state says where. */
        uniq(group, sizeof group, "g2");
        mkuri(uri, sizeof uri, &c, topic, group, "&assign=ranks");
    }
    CHECK(run(uri, &o, N, UINT64_MAX, by_state ? a.state : NULL, by_state ? a.state_len : 0,
              &b) == 0, "run 2");
    CHECK(b.end_rc == CHUTE_END && b.wrong_px == 0, "end %d: %s", b.end_rc, b.msg);
    for (uint64_t i = 0; i < N; i++)
        CHECK(a.count[i] + b.count[i] == 1, "message %llu: released %u, then delivered %u",
              (unsigned long long)i, a.count[i], b.count[i]);
    got_free(&a);
    got_free(&b);
    cluster_down(&c);
    return 0;
}

TEST(destroyed_with_a_held_batch_the_group_gets_exactly_the_unreleased_again)
{
    int rc = redelivery(0);
    if (rc == 77)
        SKIP("no Kafka cluster");
    return rc;
}

TEST(stream_state_resumes_after_exactly_what_was_released)
{
    int rc = redelivery(1);
    if (rc == 77)
        SKIP("no Kafka cluster");
    return rc;
}

TEST(a_message_that_is_not_an_image_follows_the_corrupt_policy)
{
    cluster c;
    char topic[256], group[256], uri[1024];
    const uint64_t N = 24;
    if (setup(&c, topic, sizeof topic, N, 9, 14))
        SKIP("no Kafka cluster");
    uniq(group, sizeof group, "g");
    mkuri(uri, sizeof uri, &c, topic, group, "&assign=ranks");
    chute_loader_options o;
    opts_base(&o);
    o.no_shuffle = 1;
    o.on_corrupt = CHUTE_CORRUPT_FAIL;
    got g;
    CHECK(run(uri, &o, N, UINT64_MAX, NULL, 0, &g) == 0, "run");
    /* Message 9 is at partition 1 offset 2 (9 = 2 * 4 + 1); 14 at 2/3. */
    CHECK(g.end_rc == CHUTE_ECORRUPT, "end %d: %s", g.end_rc, g.msg);
    CHECK(strstr(g.msg, topic) && (strstr(g.msg, "/1/2") || strstr(g.msg, "/2/3")), "%s",
          g.msg);
    got_free(&g);
    /* skip: both counted, every other message delivered (a skipped one is
     * replaced by another sample of its batch, so some come twice; when
     * both share a batch, a replacement may pick the other bad one, which
     * the loader counts again: at least 2). */
    uniq(group, sizeof group, "g2");
    mkuri(uri, sizeof uri, &c, topic, group, "&assign=ranks");
    o.on_corrupt = CHUTE_CORRUPT_SKIP;
    CHECK(run(uri, &o, N, UINT64_MAX, NULL, 0, &g) == 0, "run");
    CHECK(g.end_rc == CHUTE_END && g.corrupt >= 2, "end %d, %llu corrupt: %s", g.end_rc,
          (unsigned long long)g.corrupt, g.msg);
    CHECK(g.wrong_px == 0, "wrong pixels");
    for (uint64_t i = 0; i < N; i++)
        CHECK((i == 9 || i == 14) ? g.count[i] == 0 : g.count[i] >= 1, "message %llu: %u",
              (unsigned long long)i, g.count[i]);
    got_free(&g);
    cluster_down(&c);
    return 0;
}

TEST(two_ranks_with_assign_ranks_split_the_partitions)
{
    cluster c;
    char topic[256], group[256], uri[1024];
    const uint64_t N = 40;
    if (setup(&c, topic, sizeof topic, N, -1, -1))
        SKIP("no Kafka cluster");
    uniq(group, sizeof group, "g");
    mkuri(uri, sizeof uri, &c, topic, group, "&assign=ranks");
    chute_loader_options o;
    opts_base(&o);
    o.world_size = 2;
    got r[2];
    for (uint32_t k = 0; k < 2; k++) {
        o.rank = k;
        CHECK(run(uri, &o, N, UINT64_MAX, NULL, 0, &r[k]) == 0, "rank %u", k);
        CHECK(r[k].end_rc == CHUTE_END && r[k].wrong_px == 0, "rank %u: %s", k, r[k].msg);
        CHECK(r[k].total > 0 && r[k].total < N, "rank %u got %llu of %llu", k,
              (unsigned long long)r[k].total, (unsigned long long)N);
    }
    for (uint64_t i = 0; i < N; i++)
        CHECK(r[0].count[i] + r[1].count[i] == 1, "message %llu: rank 0 %u, rank 1 %u",
              (unsigned long long)i, r[0].count[i], r[1].count[i]);
    got_free(&r[0]);
    got_free(&r[1]);
    cluster_down(&c);
    return 0;
}

UNIT_MAIN
