/*
 * test_kafka.c — the Kafka consumer (src/io/kafka.c) against a real Kafka
 * protocol peer: librdkafka's mock cluster (test.mock.num.brokers=3 on a
 * producer handle; the consumer connects to its bootstrap servers over
 * TCP, in this process), or a real broker when CHUTE_TEST_KAFKA_BROKERS
 * names one (host:port[,host:port]; topics are created with the admin
 * API, named after the test and the process so runs never collide).
 *
 * Messages are produced by librdkafka's producer (and, in one test, by
 * the confluent-kafka Python client); what the consumer hands out is
 * compared with what was produced: every message's value byte for byte,
 * its id/label headers, its key, its partition and offset.  Message i
 * goes to partition i % 4 with headers id=i, label=i%10, key "id=i,cls=i%10".
 */
#include "unit.h"

#include "io/kafka.h"

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <pthread.h>
#include <sys/wait.h>
#include <time.h>

#define NPART 4

typedef struct cluster {
    rd_kafka_t *prod;       /* producer; owns the mock cluster */
    char boot[512];
    int real;               /* CHUTE_TEST_KAFKA_BROKERS */
} cluster;

static void quiet_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
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
        fprintf(stderr, "no mock cluster: %s\n", es);
        rd_kafka_conf_destroy(conf);
        return -1;
    }
    rd_kafka_conf_set(conf, "linger.ms", "5", es, sizeof es);
    rd_kafka_conf_set_log_cb(conf, quiet_log); /* the brokers-down test makes it noisy */
    c->prod = rd_kafka_new(RD_KAFKA_PRODUCER, conf, es, sizeof es);
    if (!c->prod) {
        fprintf(stderr, "producer: %s\n", es);
        return -1;
    }
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

/* A fresh name per test and process. */
static void uniq(char *buf, size_t n, const char *what)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(buf, n, "chute-%s-%s-%d-%ld", unit_current, what, (int)getpid(), (long)ts.tv_nsec);
}

static int topic_create(cluster *c, const char *topic, int parts)
{
    if (!c->real) {
        rd_kafka_mock_cluster_t *mc = rd_kafka_handle_mock_cluster(c->prod);
        return rd_kafka_mock_topic_create(mc, topic, parts, 1) ? -1 : 0;
    }
    char es[256];
    rd_kafka_NewTopic_t *nt = rd_kafka_NewTopic_new(topic, parts, 1, es, sizeof es);
    rd_kafka_queue_t *q = rd_kafka_queue_new(c->prod);
    rd_kafka_CreateTopics(c->prod, &nt, 1, NULL, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 30000);
    int rc = -1;
    if (ev) {
        const rd_kafka_CreateTopics_result_t *r = rd_kafka_event_CreateTopics_result(ev);
        size_t n = 0;
        const rd_kafka_topic_result_t **tr = r ? rd_kafka_CreateTopics_result_topics(r, &n) : NULL;
        rc = tr && n == 1 && !rd_kafka_topic_result_error(tr[0]) ? 0 : -1;
        rd_kafka_event_destroy(ev);
    }
    rd_kafka_queue_destroy(q);
    rd_kafka_NewTopic_destroy(nt);
    return rc;
}

/* Value of message i: 1..8 KiB of seeded bytes (zeros included). */
static size_t value_of(uint64_t id, uint8_t *buf)
{
    uint64_t s = id * 0x9E3779B97F4A7C15ull + 12345;
    size_t len = 1 + (size_t)(unit_rand(&s) % 8192);
    for (size_t i = 0; i < len; i++)
        buf[i] = (uint8_t)unit_rand(&s);
    return len;
}

/* Produce ids [from, to) to topic; message i to partition i % NPART. */
static int produce(cluster *c, const char *topic, uint64_t from, uint64_t to)
{
    static uint8_t val[8192];
    for (uint64_t i = from; i < to; i++) {
        size_t len = value_of(i, val);
        char id[32], label[32], key[64];
        snprintf(id, sizeof id, "%llu", (unsigned long long)i);
        snprintf(label, sizeof label, "%d", (int)(i % 10));
        snprintf(key, sizeof key, "id=%llu,cls=%d", (unsigned long long)i, (int)(i % 10));
        rd_kafka_resp_err_t e;
        while ((e = rd_kafka_producev(c->prod, RD_KAFKA_V_TOPIC(topic),
                                      RD_KAFKA_V_PARTITION((int32_t)(i % NPART)),
                                      RD_KAFKA_V_VALUE(val, len), RD_KAFKA_V_KEY(key, strlen(key)),
                                      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                      RD_KAFKA_V_HEADER("id", id, -1),
                                      RD_KAFKA_V_HEADER("label", label, -1), RD_KAFKA_V_END)) ==
               RD_KAFKA_RESP_ERR__QUEUE_FULL)
            rd_kafka_poll(c->prod, 10);
        if (e) {
            fprintf(stderr, "produce %llu: %s\n", (unsigned long long)i, rd_kafka_err2str(e));
            return -1;
        }
    }
    if (rd_kafka_flush(c->prod, 20000)) {
        fprintf(stderr, "flush timed out\n");
        return -1;
    }
    return 0;
}

static int setup(cluster *c, char *topic, size_t tn, uint64_t n)
{
    if (cluster_up(c))
        return -1;
    uniq(topic, tn, "t");
    if (topic_create(c, topic, NPART) || produce(c, topic, 0, n))
        return -1;
    return 0;
}

/* What one consumer saw: per id, how many times; plus checks on each. */
typedef struct seen {
    uint32_t *count;   /* [n] */
    uint64_t n, total, bad;
    int64_t *part_offset; /* [n]: offset it came at */
} seen;

static int seen_init(seen *s, uint64_t n)
{
    memset(s, 0, sizeof *s);
    s->n = n;
    s->count = calloc(n, sizeof *s->count);
    s->part_offset = calloc(n, sizeof *s->part_offset);
    return s->count && s->part_offset ? 0 : -1;
}
static void seen_free(seen *s)
{
    free(s->count);
    free(s->part_offset);
}

/* Check one message against what was produced; returns its id or -1. */
static int64_t check_msg(const ch_kafka_msg *m, seen *s)
{
    static uint8_t want[8192];
    const void *v;
    size_t vl;
    if (ch_kafka_header(m, "id", &v, &vl) != CHUTE_OK || !v || vl == 0 || vl > 20) {
        fprintf(stderr, "message at partition %d offset %lld has no id header\n", (int)m->partition,
                (long long)m->offset);
        s->bad++;
        return -1;
    }
    char tmp[24];
    memcpy(tmp, v, vl);
    tmp[vl] = 0;
    uint64_t id = strtoull(tmp, NULL, 10);
    if (id >= s->n) {
        s->bad++;
        return -1;
    }
    size_t wl = value_of(id, want);
    if (wl != m->value_len || memcmp(want, m->value, wl) || m->partition != (int32_t)(id % NPART)) {
        fprintf(stderr, "message %llu: value %zu bytes (want %zu) or partition %d wrong\n",
                (unsigned long long)id, m->value_len, wl, (int)m->partition);
        s->bad++;
        return -1;
    }
    s->count[id]++;
    s->total++;
    s->part_offset[id] = m->offset;
    return (int64_t)id;
}

/* A short session timeout: the mock cluster waits (session timeout - 1 s)
 * for the members of a group's previous generation before a rejoin
 * completes, even after they left; 6 s is the brokers' minimum. */
static void openuri(char *buf, size_t n, const cluster *c, const char *topic, const char *query)
{
    snprintf(buf, n, "kafka://%s/%s?%s&kafka.session.timeout.ms=6000&kafka.heartbeat.interval.ms=500",
             c->boot, topic, query);
}

/* Consume until END (or `limit` messages), releasing each at once if
 * `release`; tokens of unreleased ones kept in `held`. */
static int drain(ch_kafka *k, seen *s, int release, void **held, size_t *nheld, int max_s)
{
    uint64_t t0 = ch_now_ns();
    chute_error err = {0};
    for (;;) {
        ch_kafka_msg m;
        int rc = ch_kafka_next(k, &m, 200, &err);
        if (rc == CHUTE_END)
            return 0;
        if (rc == CH_KAFKA_AGAIN) {
            if (ch_now_ns() - t0 > (uint64_t)max_s * 1000000000ull) {
                ch_kafka_stats st;
                ch_kafka_get_stats(k, &st);
                fprintf(stderr, "no END after %d s (%llu messages, %u partitions assigned)\n", max_s,
                        (unsigned long long)s->total, st.assigned);
                return -1;
            }
            continue;
        }
        if (rc != CHUTE_OK) {
            fprintf(stderr, "next: %d %s\n", rc, err.message);
            return -1;
        }
        check_msg(&m, s);
        if (release)
            ch_kafka_release(k, m.token);
        else if (held)
            held[(*nheld)++] = m.token;
    }
}

TEST(consume_all_exactly_once)
{
    cluster c;
    char topic[256], group[256], uri[1024];
    const uint64_t N = 400;
    if (setup(&c, topic, sizeof topic, N))
        SKIP("no Kafka cluster (mock or CHUTE_TEST_KAFKA_BROKERS)");
    uniq(group, sizeof group, "g");
    char q[512];
    snprintf(q, sizeof q, "group=%s&until=eof&label_header=label", group);
    openuri(uri, sizeof uri, &c, topic, q);
    ch_kafka *k;
    chute_error err = {0};
    CHECK(ch_kafka_open(uri, NULL, &k, &err) == CHUTE_OK, "%s", err.message);
    seen s;
    CHECK(seen_init(&s, N) == 0, "oom");
    int64_t last[NPART] = {-1, -1, -1, -1};
    uint64_t t0 = ch_now_ns();
    for (;;) {
        ch_kafka_msg m;
        int rc = ch_kafka_next(k, &m, 200, &err);
        if (rc == CHUTE_END)
            break;
        if (rc == CH_KAFKA_AGAIN) {
            CHECK(ch_now_ns() - t0 < 30000000000ull, "no END after 30 s");
            continue;
        }
        CHECK(rc == CHUTE_OK, "next: %d %s", rc, err.message);
        int64_t id = check_msg(&m, &s);
        CHECK(id >= 0, "bad message");
        CHECK(m.label_status == CHUTE_OK && m.label == id % 10, "label %lld (%s) for id %lld",
              (long long)m.label, m.label_why ? m.label_why : "", (long long)id);
        CHECK(m.offset > last[m.partition], "offsets not increasing in partition %d", (int)m.partition);
        /* message i is the (i / NPART)-th of its partition */
        CHECK(m.offset == id / NPART, "id %lld at offset %lld", (long long)id, (long long)m.offset);
        last[m.partition] = m.offset;
        char where[128];
        ch_kafka_msg_where(&m, where, sizeof where);
        CHECK(strstr(where, topic) && strstr(where, "offset"), "%s", where);
        ch_kafka_release(k, m.token);
    }
    for (uint64_t i = 0; i < N; i++)
        CHECK(s.count[i] == 1, "message %llu seen %u times", (unsigned long long)i, s.count[i]);
    ch_kafka_stats st;
    ch_kafka_get_stats(k, &st);
    CHECK(st.delivered == N && st.released == N && st.assigned == NPART, "stats %llu %llu %u",
          (unsigned long long)st.delivered, (unsigned long long)st.released, st.assigned);
    CHECK(ch_kafka_close(k, &err) == CHUTE_OK, "%s", err.message);
    /* Everything released was committed: the group has nothing left. */
    CHECK(ch_kafka_open(uri, NULL, &k, &err) == CHUTE_OK, "%s", err.message);
    seen s2;
    CHECK(seen_init(&s2, N) == 0, "oom");
    CHECK(drain(k, &s2, 1, NULL, NULL, 30) == 0, "drain");
    CHECK(s2.total == 0, "%llu messages delivered again after all were released",
          (unsigned long long)s2.total);
    ch_kafka_close(k, NULL);
    seen_free(&s);
    seen_free(&s2);
    cluster_down(&c);
    return 0;
}

TEST(max_samples_ends_epoch)
{
    cluster c;
    char topic[256], group[256], uri[1024], q[512];
    if (setup(&c, topic, sizeof topic, 100))
        SKIP("no Kafka cluster");
    uniq(group, sizeof group, "g");
    snprintf(q, sizeof q, "group=%s&max_samples=37", group);
    openuri(uri, sizeof uri, &c, topic, q);
    ch_kafka *k;
    chute_error err = {0};
    CHECK(ch_kafka_open(uri, NULL, &k, &err) == CHUTE_OK, "%s", err.message);
    seen s;
    CHECK(seen_init(&s, 100) == 0, "oom");
    CHECK(drain(k, &s, 1, NULL, NULL, 30) == 0, "drain");
    CHECK(s.total == 37 && s.bad == 0, "%llu messages (want 37), %llu bad", (unsigned long long)s.total,
          (unsigned long long)s.bad);
    ch_kafka_close(k, NULL);
    seen_free(&s);
    cluster_down(&c);
    return 0;
}

TEST(labels_from_key_and_bad_labels)
{
    cluster c;
    char topic[256], group[256], uri[1024], q[512];
    if (setup(&c, topic, sizeof topic, 8))
        SKIP("no Kafka cluster");
    /* Three more on partition 0: a bad field, no key, whole-key int. */
    const char *keys[3] = {"id=8,cls=x7", NULL, "-42"};
    for (int i = 0; i < 3; i++)
        CHECK(rd_kafka_producev(c.prod, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(0),
                                RD_KAFKA_V_VALUE("v", 1),
                                RD_KAFKA_V_KEY(keys[i], keys[i] ? strlen(keys[i]) : 0),
                                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END) == 0,
              "produce");
    CHECK(rd_kafka_flush(c.prod, 10000) == 0, "flush");
    uniq(group, sizeof group, "g");
    snprintf(q, sizeof q, "group=%s&until=eof&label_key=cls", group);
    openuri(uri, sizeof uri, &c, topic, q);
    ch_kafka *k;
    chute_error err = {0};
    CHECK(ch_kafka_open(uri, NULL, &k, &err) == CHUTE_OK, "%s", err.message);
    int ok = 0, bad = 0;
    uint64_t t0 = ch_now_ns();
    for (;;) {
        ch_kafka_msg m;
        int rc = ch_kafka_next(k, &m, 200, &err);
        if (rc == CHUTE_END)
            break;
        if (rc == CH_KAFKA_AGAIN) {
            CHECK(ch_now_ns() - t0 < 30000000000ull, "no END");
            continue;
        }
        CHECK(rc == CHUTE_OK, "%s", err.message);
        if (m.value_len == 1) {
            CHECK(m.label_status == CHUTE_EFORMAT && m.label_why, "bad key gave label %lld",
                  (long long)m.label);
            bad++;
        } else {
            const void *v;
            size_t vl;
            CHECK(ch_kafka_header(&m, "label", &v, &vl) == CHUTE_OK, "no label header");
            CHECK(m.label_status == CHUTE_OK && vl == 1 && m.label == ((const char *)v)[0] - '0',
                  "key label %lld vs header", (long long)m.label);
            const char *hn;
            CHECK(ch_kafka_header_at(&m, 0, &hn, &v, &vl) == CHUTE_OK && !strcmp(hn, "id"), "header 0");
            CHECK(ch_kafka_header_at(&m, 2, &hn, &v, &vl) == CHUTE_END, "header 2");
            ok++;
        }
        ch_kafka_release(k, m.token);
    }
    CHECK(ok == 8 && bad == 3, "ok %d bad %d", ok, bad);
    ch_kafka_close(k, NULL);
    /* Whole key as the label: "-42" parses, "id=8,cls=x7" does not. */
    uniq(group, sizeof group, "g2");
    snprintf(q, sizeof q, "group=%s&until=eof&label_key=-", group);
    openuri(uri, sizeof uri, &c, topic, q);
    CHECK(ch_kafka_open(uri, NULL, &k, &err) == CHUTE_OK, "%s", err.message);
    int got42 = 0;
    for (;;) {
        ch_kafka_msg m;
        int rc = ch_kafka_next(k, &m, 200, &err);
        if (rc == CHUTE_END)
            break;
        if (rc == CH_KAFKA_AGAIN)
            continue;
        CHECK(rc == CHUTE_OK, "%s", err.message);
        if (m.key_len == 3 && !memcmp(m.key, "-42", 3)) {
            CHECK(m.label_status == CHUTE_OK && m.label == -42, "label %lld", (long long)m.label);
            got42 = 1;
        } else {
            CHECK(m.label_status == CHUTE_EFORMAT, "key '%.*s' parsed as %lld", (int)m.key_len,
                  m.key ? (const char *)m.key : "", (long long)m.label);
        }
        ch_kafka_release(k, m.token);
    }
    CHECK(got42, "no -42");
    ch_kafka_close(k, NULL);
    cluster_down(&c);
    return 0;
}

TEST(rebalance_second_consumer_no_loss)
{
    cluster c;
    char topic[256], group[256], uri[1024], q[512];
    const uint64_t N1 = 200, N = 600;
    if (setup(&c, topic, sizeof topic, N1))
        SKIP("no Kafka cluster");
    uniq(group, sizeof group, "g");
    snprintf(q, sizeof q, "group=%s&until=eof", group);
    openuri(uri, sizeof uri, &c, topic, q);
    ch_kafka *a, *b;
    chute_error err = {0};
    seen sa, sb;
    CHECK(seen_init(&sa, N) == 0 && seen_init(&sb, N) == 0, "oom");
    CHECK(ch_kafka_open(uri, NULL, &a, &err) == CHUTE_OK, "%s", err.message);
    /* A alone takes a few. */
    while (sa.total < 20) {
        ch_kafka_msg m;
        int rc = ch_kafka_next(a, &m, 200, &err);
        CHECK(rc == CHUTE_OK || rc == CH_KAFKA_AGAIN, "%d %s", rc, err.message);
        if (rc == CHUTE_OK) {
            check_msg(&m, &sa);
            ch_kafka_release(a, m.token);
        }
    }
    CHECK(ch_kafka_open(uri, NULL, &b, &err) == CHUTE_OK, "%s", err.message);
    int produced2 = 0;
    uint64_t b_after = 0, a_after = 0;
    uint64_t t0 = ch_now_ns();
    for (;;) {
        ch_kafka *ks[2] = {a, b};
        seen *ss[2] = {&sa, &sb};
        for (int i = 0; i < 2; i++) {
            ch_kafka_msg m;
            int rc = ch_kafka_next(ks[i], &m, 20, &err);
            CHECK(rc == CHUTE_OK || rc == CH_KAFKA_AGAIN || rc == CHUTE_END, "%d %s", rc, err.message);
            if (rc == CHUTE_OK) {
                int64_t id = check_msg(&m, ss[i]);
                if (produced2 && id >= (int64_t)N1)
                    *(i ? &b_after : &a_after) += 1;
                ch_kafka_release(ks[i], m.token);
            }
        }
        ch_kafka_stats stA, stB;
        ch_kafka_get_stats(a, &stA);
        ch_kafka_get_stats(b, &stB);
        if (!produced2 && stA.assigned > 0 && stB.assigned > 0 && stA.assigned + stB.assigned == NPART) {
            /* The group has settled on two members: more messages to every partition. */
            CHECK(produce(&c, topic, N1, N) == 0, "produce");
            produced2 = 1;
        }
        uint64_t have = 0;
        for (uint64_t i = 0; i < N; i++)
            have += sa.count[i] + sb.count[i] > 0;
        if (produced2 && have == N)
            break;
        CHECK(ch_now_ns() - t0 < 60000000000ull, "after 60 s: %llu of %llu messages, rebalanced %d",
              (unsigned long long)have, (unsigned long long)N, produced2);
    }
    CHECK(sa.bad == 0 && sb.bad == 0, "bad messages");
    CHECK(a_after > 0 && b_after > 0, "after the rebalance A got %llu, B %llu of the new messages",
          (unsigned long long)a_after, (unsigned long long)b_after);
    /* Each message was released before the next poll, and the revoke
     * commits what was released; Kafka accepts that commit while the group
     * prepares the rebalance, the mock cluster refuses it (REBALANCE_IN_
     * PROGRESS), so here a revoked partition's messages since A's last
     * periodic commit may come again to B: at-least-once.  Duplicates are
     * allowed only there: messages of the first round that A had, none of
     * the second round (produced after the group settled). */
    uint64_t dup = 0;
    for (uint64_t i = 0; i < N; i++) {
        uint32_t n = sa.count[i] + sb.count[i];
        if (n > 1) {
            dup += n - 1;
            CHECK(i < N1 && sa.count[i] >= 1,
                  "message %llu: A %u times, B %u times", (unsigned long long)i, sa.count[i], sb.count[i]);
        }
    }
    ch_kafka_stats stA;
    ch_kafka_get_stats(a, &stA);
    fprintf(stderr, "%llu duplicates after the rebalance; A: %llu commits, %llu refused\n",
            (unsigned long long)dup, (unsigned long long)stA.commits, (unsigned long long)stA.commit_errors);
    /* Commit both while the group is stable (a close commits too, but the
     * first to leave starts a rebalance in which the mock refuses the
     * other's commit). */
    CHECK(ch_kafka_commit(a, &err) == CHUTE_OK, "%s", err.message);
    CHECK(ch_kafka_commit(b, &err) == CHUTE_OK, "%s", err.message);
    ch_kafka_close(a, NULL);
    ch_kafka_close(b, NULL);
    seen_free(&sa);
    seen_free(&sb);
    cluster_down(&c);
    return 0;
}

/* Which offsets of partition p the first consumer releases before it is
 * "killed": partitions 1..3 a prefix, partition 0 everything but offset 10. */
static int released_before_kill(int32_t p, int64_t off)
{
    if (p == 0)
        return off != 10;
    return off < 5 + 10 * p;
}

TEST(killed_consumer_redelivers_unreleased)
{
    cluster c;
    char topic[256], group[256], uri[1024], q[512];
    const uint64_t N = 200; /* 50 per partition */
    if (setup(&c, topic, sizeof topic, N))
        SKIP("no Kafka cluster");
    uniq(group, sizeof group, "g");
    snprintf(q, sizeof q, "group=%s&until=eof&commit_interval_ms=1", group);
    openuri(uri, sizeof uri, &c, topic, q);
    ch_kafka *a;
    chute_error err = {0};
    uint64_t rs = 7;
    CHECK(ch_kafka_open(uri, NULL, &a, &err) == CHUTE_OK, "%s", err.message);
    typedef struct { void *tok; int32_t p; int64_t off; } held_t;
    held_t *hs = calloc(N, sizeof *hs);
    size_t nh = 0;
    uint64_t t0 = ch_now_ns();
    for (;;) {
        ch_kafka_msg m;
        int rc = ch_kafka_next(a, &m, 200, &err);
        if (rc == CHUTE_END)
            break;
        if (rc == CH_KAFKA_AGAIN) {
            CHECK(ch_now_ns() - t0 < 30000000000ull, "no END");
            continue;
        }
        CHECK(rc == CHUTE_OK && nh < N, "%d %s", rc, err.message);
        hs[nh++] = (held_t){m.token, m.partition, m.offset};
    }
    /* Release in a scrambled order, as batches would be. */
    CHECK(nh == N, "A saw %zu", nh);
    for (size_t i = nh - 1; i > 0; i--) {
        size_t j = (size_t)(unit_rand(&rs) % (i + 1));
        held_t t = hs[i];
        hs[i] = hs[j];
        hs[j] = t;
    }
    for (size_t i = 0; i < nh; i++)
        if (released_before_kill(hs[i].p, hs[i].off))
            ch_kafka_release(a, hs[i].tok);
    /* Killed mid-batch: closed with the rest unreleased. */
    CHECK(ch_kafka_close(a, &err) == CHUTE_OK, "%s", err.message);
    free(hs);

    ch_kafka *b;
    CHECK(ch_kafka_open(uri, NULL, &b, &err) == CHUTE_OK, "%s", err.message);
    seen sb;
    CHECK(seen_init(&sb, N) == 0, "oom");
    CHECK(drain(b, &sb, 1, NULL, NULL, 30) == 0, "drain");
    uint64_t want = 0;
    for (uint64_t i = 0; i < N; i++) {
        int32_t p = (int32_t)(i % NPART);
        int64_t off = (int64_t)(i / NPART);
        /* Partition 0: offset 10 was never released, so 10.. come again
         * (11.. were released: at-least-once redelivers them).  Others:
         * exactly the unreleased suffix. */
        int again = p == 0 ? off >= 10 : !released_before_kill(p, off);
        want += again;
        CHECK(sb.count[i] == (uint32_t)again, "message %llu (partition %d offset %lld) seen %u times by B, want %d",
              (unsigned long long)i, (int)p, (long long)off, sb.count[i], again);
    }
    CHECK(sb.total == want && sb.bad == 0, "B got %llu, want %llu", (unsigned long long)sb.total,
          (unsigned long long)want);
    ch_kafka_close(b, NULL);
    seen_free(&sb);
    cluster_down(&c);
    return 0;
}

static int collect_state(void *user, const char *topic, size_t tl, int32_t partition, int64_t offset)
{
    int64_t *pos = user;
    if (partition < 0 || partition >= NPART)
        return -1;
    pos[partition] = offset;
    return 0;
}

TEST(state_restores_exact_position)
{
    cluster c;
    char topic[256], group[256], uri[1024], q[512];
    const uint64_t N = 200;
    if (setup(&c, topic, sizeof topic, N))
        SKIP("no Kafka cluster");
    /* Released prefix per partition; partition 3 releases nothing. */
    const int64_t keep[NPART] = {7, 23, 50, 0};
    uniq(group, sizeof group, "g");
    snprintf(q, sizeof q, "group=%s&until=eof&commit_interval_ms=3600000", group);
    openuri(uri, sizeof uri, &c, topic, q);
    ch_kafka *a;
    chute_error err = {0};
    CHECK(ch_kafka_open(uri, NULL, &a, &err) == CHUTE_OK, "%s", err.message);
    uint64_t t0 = ch_now_ns();
    for (;;) {
        ch_kafka_msg m;
        int rc = ch_kafka_next(a, &m, 200, &err);
        if (rc == CHUTE_END)
            break;
        if (rc == CH_KAFKA_AGAIN) {
            CHECK(ch_now_ns() - t0 < 30000000000ull, "no END");
            continue;
        }
        CHECK(rc == CHUTE_OK, "%d %s", rc, err.message);
        if (m.offset < keep[m.partition])
            ch_kafka_release(a, m.token);
    }
    size_t len = 0;
    CHECK(ch_kafka_state_save(a, NULL, 0, &len, &err) == CH_ESMALL && len > 12, "size %zu", len);
    uint8_t *st = malloc(len);
    size_t len2 = 0;
    CHECK(ch_kafka_state_save(a, st, len, &len2, &err) == CHUTE_OK && len2 == len, "save");
    int64_t pos[NPART] = {-1, -1, -1, -1};
    CHECK(ch_kafka_state_parse(st, len, collect_state, pos, &err) == CHUTE_OK, "%s", err.message);
    for (int p = 0; p < 3; p++)
        CHECK(pos[p] == keep[p], "state: partition %d at %lld, want %lld", p, (long long)pos[p],
              (long long)keep[p]);
    CHECK(pos[3] == -1, "partition 3 (nothing released) in state at %lld", (long long)pos[3]);
    /* Crash without close: nothing committed (interval of an hour). */
    ch_kafka_close(a, NULL);

    /* A new group (no committed offsets: it would start at 0) restored
     * from the state resumes exactly after what was released. */
    uniq(group, sizeof group, "g2");
    snprintf(q, sizeof q, "group=%s&until=eof", group);
    openuri(uri, sizeof uri, &c, topic, q);
    ch_kafka_opts o = {0};
    o.state = st;
    o.state_len = len;
    ch_kafka *b;
    CHECK(ch_kafka_open(uri, &o, &b, &err) == CHUTE_OK, "%s", err.message);
    /* Saved before any assignment, the state is what was restored. */
    size_t len3 = 0;
    uint8_t *st3 = malloc(len);
    CHECK(ch_kafka_state_save(b, st3, len, &len3, &err) == CHUTE_OK && len3 == len && !memcmp(st3, st, len),
          "state of a restored consumer differs");
    free(st3);
    seen sb;
    CHECK(seen_init(&sb, N) == 0, "oom");
    CHECK(drain(b, &sb, 1, NULL, NULL, 30) == 0, "drain");
    for (uint64_t i = 0; i < N; i++) {
        int64_t off = (int64_t)(i / NPART);
        uint32_t want = off >= keep[i % NPART];
        CHECK(sb.count[i] == want, "message %llu (partition %d offset %lld): %u times, want %u",
              (unsigned long long)i, (int)(i % NPART), (long long)off, sb.count[i], want);
    }
    ch_kafka_close(b, NULL);
    /* Damaged state is refused at open, naming the byte. */
    for (size_t cut = 0; cut < len; cut += 5) {
        o.state_len = cut;
        ch_kafka *x = NULL;
        int rc = ch_kafka_open(uri, &o, &x, &err);
        CHECK(rc == CHUTE_ECORRUPT && !x && strstr(err.message, "kafka state"), "cut %zu: %d %s", cut, rc,
              err.message);
    }
    free(st);
    seen_free(&sb);
    cluster_down(&c);
    return 0;
}

TEST(ranks_world2_explicit_assignment)
{
    cluster c;
    char topic[256], group[256], uri[1024], q[512];
    const uint64_t N = 200;
    if (setup(&c, topic, sizeof topic, N))
        SKIP("no Kafka cluster");
    uniq(group, sizeof group, "g");
    snprintf(q, sizeof q, "group=%s&until=eof&assign=ranks", group);
    openuri(uri, sizeof uri, &c, topic, q);
    seen s[2];
    chute_error err = {0};
    for (uint32_t r = 0; r < 2; r++) {
        ch_kafka_opts o = {0};
        o.rank = r;
        o.world = 2;
        ch_kafka *k;
        CHECK(seen_init(&s[r], N) == 0, "oom");
        CHECK(ch_kafka_open(uri, &o, &k, &err) == CHUTE_OK, "%s", err.message);
        CHECK(drain(k, &s[r], 1, NULL, NULL, 30) == 0, "drain");
        ch_kafka_stats st;
        ch_kafka_get_stats(k, &st);
        CHECK(st.assigned == 2, "rank %u: %u partitions", r, st.assigned);
        ch_kafka_close(k, NULL);
    }
    for (uint64_t i = 0; i < N; i++) {
        uint32_t r = (uint32_t)(i % NPART) % 2;
        CHECK(s[r].count[i] == 1 && s[1 - r].count[i] == 0, "message %llu (partition %d): rank0 %u rank1 %u",
              (unsigned long long)i, (int)(i % NPART), s[0].count[i], s[1].count[i]);
    }
    /* A topic that does not exist is ENOTFOUND at open (a real broker
     * only: the mock cluster creates every topic it is asked about). */
    if (!c.real) {
        seen_free(&s[0]);
        seen_free(&s[1]);
        cluster_down(&c);
        return 0;
    }
    snprintf(q, sizeof q, "group=%s&assign=ranks&error_timeout_ms=5000", group);
    openuri(uri, sizeof uri, &c, "no-such-topic-here", q);
    ch_kafka *k = NULL;
    int rc = ch_kafka_open(uri, NULL, &k, &err);
    CHECK(rc == CHUTE_ENOTFOUND && strstr(err.message, "no-such-topic-here"), "%d %s", rc, err.message);
    seen_free(&s[0]);
    seen_free(&s[1]);
    cluster_down(&c);
    return 0;
}

TEST(uri_and_property_errors)
{
    chute_error err = {0};
    ch_kafka *k = NULL;
    struct {
        const char *uri;
        const char *const props[3];
        const char *want;
    } cases[] = {
        {"http://h:1/t?group=g", {NULL}, "not a kafka:// URI"},
        {"kafka://h:1?group=g", {NULL}, "expected kafka://"},
        {"kafka://h:1/?group=g", {NULL}, "names no topic"},
        {"kafka://h:1/t", {NULL}, "no consumer group"},
        {"kafka://h:1/t?group=g&colour=blue", {NULL}, "unknown query key 'colour'"},
        {"kafka://h:1/t?group=g&assign=sometimes", {NULL}, "assign="},
        {"kafka://h:1/t?group=g&max_samples=-3", {NULL}, "max_samples"},
        {"kafka://h:1/t?group=g&label_key=a&label_header=b", {NULL}, "both given"},
        {"kafka://h:1/t?group=g", {"kafka.enable.auto.commit=true", NULL}, "set by chute"},
        {"kafka://h:1/t?group=g", {"kafka.no.such.property=SECRET-1", NULL}, "no.such.property"},
        {"kafka://h:1/t?group=g", {"kafka.security.protocol=sasl_plaintext",
                                  "kafka.sasl.mechanisms=SECRET-2", NULL}, "not shown"},
        {"kafka://h:1/t?group=g&kafka.session.timeout.ms=SECRET-3", {NULL}, "session.timeout.ms"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ch_kafka_opts o = {0};
        o.props = cases[i].props;
        int rc = ch_kafka_open(cases[i].uri, &o, &k, &err);
        CHECK(rc == CHUTE_EINVAL && !k, "case %zu: %d", i, rc);
        CHECK(strstr(err.message, cases[i].want), "case %zu: '%s' lacks '%s'", i, err.message, cases[i].want);
        CHECK(!strstr(err.message, "SECRET"), "case %zu: message shows a value: %s", i, err.message);
    }
    /* The parser of state bytes refuses garbage. */
    static const uint8_t bad1[] = "CHKS\1\0\0\0\1\0\0\0\3\0a/b\0\0\0\0\0\0\0\0\0\0\0\0";
    CHECK(ch_kafka_state_parse(bad1, sizeof bad1 - 1, NULL, NULL, &err) == CHUTE_ECORRUPT &&
          strstr(err.message, "not a topic character"), "%s", err.message);
    static const uint8_t bad2[] = "CHKS\2\0\0\0\0\0\0\0";
    CHECK(ch_kafka_state_parse(bad2, sizeof bad2 - 1, NULL, NULL, &err) == CHUTE_ECORRUPT &&
          strstr(err.message, "version 2"), "%s", err.message);
    static const uint8_t good[] = "CHKS\1\0\0\0\1\0\0\0\3\0abc\2\0\0\0\5\0\0\0\0\0\0\0";
    int64_t pos[NPART] = {-1, -1, -1, -1};
    CHECK(ch_kafka_state_parse(good, sizeof good - 1, collect_state, pos, &err) == CHUTE_OK && pos[2] == 5,
          "%s", err.message);
    return 0;
}

TEST(brokers_down_is_eio_without_secrets)
{
    cluster c;
    char topic[256], group[256], uri[1024], q[512];
    if (setup(&c, topic, sizeof topic, 40))
        SKIP("no Kafka cluster");
    if (c.real)
        SKIP("needs the mock cluster to take the brokers down");
    uniq(group, sizeof group, "g");
    snprintf(q, sizeof q, "group=%s&error_timeout_ms=2000&kafka.sasl.password=SECRET-pw", group);
    openuri(uri, sizeof uri, &c, topic, q);
    ch_kafka *k;
    chute_error err = {0};
    CHECK(ch_kafka_open(uri, NULL, &k, &err) == CHUTE_OK, "%s", err.message);
    seen s;
    CHECK(seen_init(&s, 40) == 0, "oom");
    uint64_t t0 = ch_now_ns();
    while (s.total < 40) {
        ch_kafka_msg m;
        int rc = ch_kafka_next(k, &m, 200, &err);
        CHECK(rc == CHUTE_OK || rc == CH_KAFKA_AGAIN, "%d %s", rc, err.message);
        if (rc == CHUTE_OK) {
            check_msg(&m, &s);
            ch_kafka_release(k, m.token);
        }
        CHECK(ch_now_ns() - t0 < 30000000000ull, "only %llu messages", (unsigned long long)s.total);
    }
    rd_kafka_mock_cluster_t *mc = rd_kafka_handle_mock_cluster(c.prod);
    for (int b = 1; b <= 3; b++)
        rd_kafka_mock_broker_set_down(mc, b);
    uint64_t t1 = ch_now_ns();
    int rc;
    for (;;) {
        ch_kafka_msg m;
        rc = ch_kafka_next(k, &m, 200, &err);
        if (rc != CH_KAFKA_AGAIN)
            break;
        CHECK(ch_now_ns() - t1 < 40000000000ull, "no error 40 s after every broker went down");
    }
    double el = (double)(ch_now_ns() - t1) / 1e9;
    CHECK(rc == CHUTE_EIO && strstr(err.message, "unreachable") && strstr(err.message, c.boot),
          "%d after %.1f s: %s", rc, el, err.message);
    CHECK(el >= 1.9, "EIO after %.1f s, before error_timeout_ms", el);
    CHECK(!strstr(err.message, "SECRET"), "%s", err.message);
    fprintf(stderr, "after %.1f s: %s\n", el, err.message);
    for (int b = 1; b <= 3; b++)
        rd_kafka_mock_broker_set_up(mc, b);
    ch_kafka_close(k, NULL);
    seen_free(&s);
    cluster_down(&c);
    return 0;
}

/* The loader's shape: a reader thread calls next() and hands tokens over;
 * another thread releases them in batches (release_n) and saves state
 * while the reader runs (TSan checks the locking).  Bounded in-flight
 * (max_unreleased 16): next() says EBUSY instead of growing. */
typedef struct handoff {
    ch_kafka *k;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    void *tok[64];
    size_t n;
    int done;
    uint64_t released, saves, busy;
} handoff;

static void *releaser(void *arg)
{
    handoff *h = arg;
    void *batch[64];
    for (;;) {
        pthread_mutex_lock(&h->mu);
        while (h->n < 8 && !h->done)
            pthread_cond_wait(&h->cv, &h->mu);
        size_t n = h->n;
        memcpy(batch, h->tok, n * sizeof *batch);
        h->n = 0;
        int done = h->done;
        pthread_cond_broadcast(&h->cv);
        pthread_mutex_unlock(&h->mu);
        ch_kafka_release_n(h->k, batch, n);
        h->released += n;
        uint8_t st[4096];
        size_t len;
        if (ch_kafka_state_save(h->k, st, sizeof st, &len, NULL) == CHUTE_OK)
            h->saves++;
        if (done && n == 0)
            return NULL;
    }
}

TEST(release_from_another_thread)
{
    cluster c;
    char topic[256], group[256], uri[1024], q[512];
    const uint64_t N = 1000;
    if (setup(&c, topic, sizeof topic, N))
        SKIP("no Kafka cluster");
    uniq(group, sizeof group, "g");
    snprintf(q, sizeof q, "group=%s&until=eof&max_unreleased=16&commit_interval_ms=5", group);
    openuri(uri, sizeof uri, &c, topic, q);
    handoff h = {0};
    chute_error err = {0};
    CHECK(ch_kafka_open(uri, NULL, &h.k, &err) == CHUTE_OK, "%s", err.message);
    pthread_mutex_init(&h.mu, NULL);
    pthread_cond_init(&h.cv, NULL);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, releaser, &h) == 0, "thread");
    seen s;
    CHECK(seen_init(&s, N) == 0, "oom");
    uint64_t t0 = ch_now_ns();
    int rc;
    for (;;) {
        ch_kafka_msg m;
        rc = ch_kafka_next(h.k, &m, 200, &err);
        if (rc == CHUTE_END)
            break;
        if (rc == CHUTE_EBUSY) {
            /* all 16 slots held: wait for the releaser */
            h.busy++;
            pthread_mutex_lock(&h.mu);
            pthread_cond_broadcast(&h.cv);
            pthread_mutex_unlock(&h.mu);
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
            continue;
        }
        if (rc == CH_KAFKA_AGAIN) {
            if (ch_now_ns() - t0 > 40000000000ull)
                break;
            continue;
        }
        if (rc != CHUTE_OK)
            break;
        check_msg(&m, &s);
        pthread_mutex_lock(&h.mu);
        while (h.n == 64)
            pthread_cond_wait(&h.cv, &h.mu);
        h.tok[h.n++] = m.token;
        if (h.n >= 8)
            pthread_cond_broadcast(&h.cv);
        pthread_mutex_unlock(&h.mu);
    }
    pthread_mutex_lock(&h.mu);
    h.done = 1;
    pthread_cond_broadcast(&h.cv);
    pthread_mutex_unlock(&h.mu);
    pthread_join(th, NULL);
    CHECK(rc == CHUTE_END, "%d %s", rc, err.message);
    for (uint64_t i = 0; i < N; i++)
        CHECK(s.count[i] == 1, "message %llu seen %u times", (unsigned long long)i, s.count[i]);
    CHECK(h.released == N && s.bad == 0, "released %llu", (unsigned long long)h.released);
    CHECK(h.busy > 0, "max_unreleased=16 never reached");
    ch_kafka_stats st;
    ch_kafka_get_stats(h.k, &st);
    CHECK(st.released == N, "stats released %llu", (unsigned long long)st.released);
    CHECK(ch_kafka_close(h.k, &err) == CHUTE_OK, "%s", err.message);
    /* All committed: the group has nothing left to give. */
    ch_kafka *k2;
    CHECK(ch_kafka_open(uri, NULL, &k2, &err) == CHUTE_OK, "%s", err.message);
    seen s2;
    CHECK(seen_init(&s2, N) == 0, "oom");
    CHECK(drain(k2, &s2, 1, NULL, NULL, 30) == 0 && s2.total == 0, "%llu again", (unsigned long long)s2.total);
    ch_kafka_close(k2, NULL);
    pthread_mutex_destroy(&h.mu);
    pthread_cond_destroy(&h.cv);
    seen_free(&s);
    seen_free(&s2);
    cluster_down(&c);
    return 0;
}

/* The same data produced by another client: confluent-kafka (Python). */
TEST(python_producer_bytes_identical)
{
#ifndef CHUTE_TEST_PYTHON
    SKIP("no Python");
#else
    cluster c;
    char topic[256], group[256], uri[1024], q[512], dir[4096], cmd[8192], out[4200];
    if (cluster_up(&c))
        SKIP("no Kafka cluster");
    uniq(topic, sizeof topic, "t");
    CHECK(topic_create(&c, topic, NPART) == 0, "topic");
    unit_scratch("python_producer", dir, sizeof dir);
    snprintf(out, sizeof out, "%s/values.bin", dir);
    snprintf(cmd, sizeof cmd, "%s %s/tools/kafka_produce.py '%s' '%s' 120 '%s'", CHUTE_TEST_PYTHON,
             CHUTE_TESTS_DIR, c.boot, topic, out);
    int rc = system(cmd);
    if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77)
        SKIP("confluent_kafka not importable");
    CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "%s: status %d", cmd, rc);
    size_t flen;
    uint8_t *vals = unit_read_file(out, &flen);
    CHECK(vals, "no %s", out);
    /* values.bin: per message u32 id, u32 len, bytes */
    const uint8_t *want[120] = {0};
    uint32_t wlen[120] = {0};
    for (size_t off = 0; off < flen;) {
        CHECK(flen - off >= 8, "values.bin truncated");
        uint32_t id, len;
        memcpy(&id, vals + off, 4);
        memcpy(&len, vals + off + 4, 4);
        CHECK(id < 120 && flen - off - 8 >= len, "values.bin entry");
        want[id] = vals + off + 8;
        wlen[id] = len;
        off += 8 + len;
    }
    uniq(group, sizeof group, "g");
    snprintf(q, sizeof q, "group=%s&until=eof&label_header=label", group);
    openuri(uri, sizeof uri, &c, topic, q);
    ch_kafka *k;
    chute_error err = {0};
    CHECK(ch_kafka_open(uri, NULL, &k, &err) == CHUTE_OK, "%s", err.message);
    uint32_t count[120] = {0};
    uint64_t t0 = ch_now_ns();
    for (;;) {
        ch_kafka_msg m;
        rc = ch_kafka_next(k, &m, 200, &err);
        if (rc == CHUTE_END)
            break;
        if (rc == CH_KAFKA_AGAIN) {
            CHECK(ch_now_ns() - t0 < 30000000000ull, "no END");
            continue;
        }
        CHECK(rc == CHUTE_OK, "%d %s", rc, err.message);
        CHECK(m.key_len > 0 && m.key_len < 8, "key");
        char kb[8];
        memcpy(kb, m.key, m.key_len);
        kb[m.key_len] = 0;
        int id = atoi(kb);
        CHECK(id >= 0 && id < 120 && want[id], "id %d", id);
        CHECK(m.value_len == wlen[id] && !memcmp(m.value, want[id], wlen[id]),
              "message %d: %zu bytes differ from the %u Python produced", id, m.value_len, wlen[id]);
        CHECK(m.label_status == CHUTE_OK && m.label == id % 7, "label %lld", (long long)m.label);
        count[id]++;
        ch_kafka_release(k, m.token);
    }
    for (int i = 0; i < 120; i++)
        CHECK(count[i] == 1, "message %d seen %u times", i, count[i]);
    ch_kafka_close(k, NULL);
    free(vals);
    cluster_down(&c);
    return 0;
#endif
}

int main(int argc, char **argv)
{
    return unit_main(argc, argv);
}
