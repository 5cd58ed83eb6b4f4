/*
 * kafka.c — the Kafka consumer behind kafka.h (see the essay there: why
 * next/release, at-least-once, how offsets are tracked).
 *
 * Shape of the bookkeeping.  A partition (kpart) is made the first time
 * it is assigned or named by restored state, and lives until close; the
 * table is small (one entry per partition) and searched linearly with a
 * one-entry cache (messages come in runs from one partition).  A message
 * handed out takes a slot from the pool made at open; the slot is linked
 * at the tail of its partition's list (delivery order = offset order,
 * Kafka's per-partition guarantee).  Release marks the slot, frees the
 * message's bytes, and pops the released head of the list, moving the
 * partition's position.  A slot whose partition was revoked is detached
 * (part == NULL): releasing it only frees it.
 *
 * State bytes (little-endian):
 *   "CHKS"  u32 version (1)  u32 count
 *   count x { u16 topic_len, topic bytes, i32 partition, i64 offset }
 * offset = the next offset to read.  Parsed with every length checked
 * against what is left (tests/fuzz/fuzz_kafka_state.c).
 *
 * What this file must never do: commit an offset past an unreleased
 * message of its partition; print a client property's value; call
 * librdkafka while holding the mutex in a way that can call back into
 * this file (the callbacks are served only from poll and consumer_close,
 * which run unlocked).
 */
#define _GNU_SOURCE
#include "kafka.h"

#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

typedef struct kpart kpart;

typedef struct kslot {
    rd_kafka_message_t *rkm; /* held until release; NULL once released */
    kpart *part;             /* NULL: detached (partition revoked) or free */
    int64_t offset;
    int in_use, released;
    struct kslot *next;      /* partition's delivery list, or the free list */
} kslot;

struct kpart {
    char *topic;
    int32_t partition;
    int64_t position;  /* next offset after the released prefix; -1 unknown */
    int64_t committed; /* last position sent in a commit; -1 none */
    int64_t restore;   /* from state, applied at the next assignment; -1 none */
    int assigned, eof;
    kslot *head, *tail;
};

struct ch_kafka {
    rd_kafka_t *rk;
    pthread_mutex_t mu; /* protects everything below that is not "const after open" */
    /* const after open */
    char *brokers;
    char **topics;
    size_t ntopics;
    int assign;
    uint32_t rank, world;
    char *label_header, *label_key;
    int until_eof;
    uint64_t max_samples;
    uint32_t error_timeout_ms, commit_interval_ms;
    /* partitions and slots (mu) */
    kpart *parts;
    size_t nparts, capparts, last_part;
    kslot *slots, *free_slots;
    uint32_t nslots, nfree;
    uint64_t last_commit_ns;
    ch_kafka_stats st;
    /* reader thread only */
    uint64_t err_since_ns;
    char last_err[256];
    int cb_status;          /* an error inside the rebalance callback */
    char cb_msg[256];
};

/* ---- small helpers ---------------------------------------------------------------- */

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

/* Decimal int64 in exactly [p, p+n): optional '-', at least one digit. */
static int parse_i64(const char *p, size_t n, int64_t *out)
{
    size_t i = 0;
    int neg = 0;
    if (n && p[0] == '-') {
        neg = 1;
        i = 1;
    }
    if (i == n)
        return -1;
    uint64_t v = 0;
    const uint64_t lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        unsigned d = (unsigned)(p[i] - '0');
        if (v > (lim - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

static int parse_u64_str(const char *s, uint64_t *out)
{
    int64_t v;
    if (parse_i64(s, strlen(s), &v) || v < 0)
        return -1;
    *out = (uint64_t)v;
    return 0;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Percent-decode [p, p+n) into a new string; NULL on a bad escape or OOM. */
static char *pct_decode(const char *p, size_t n)
{
    char *d = malloc(n + 1);
    if (!d)
        return NULL;
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '%') {
            if (i + 2 >= n) {
                free(d);
                return NULL;
            }
            int h = hexval((unsigned char)p[i + 1]), l = hexval((unsigned char)p[i + 2]);
            if (h < 0 || l < 0 || (h == 0 && l == 0)) {
                free(d);
                return NULL;
            }
            d[j++] = (char)(h * 16 + l);
            i += 2;
        } else {
            d[j++] = p[i];
        }
    }
    d[j] = 0;
    return d;
}

static void rk_log_quiet(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    /* librdkafka's threads log here; errors reach the caller through next(). */
}

/* Served from poll (the reader thread): client-level errors (brokers down,
 * transport, authentication).  librdkafka retries them; next() turns them
 * into CHUTE_EIO once they have lasted error_timeout_ms (check_down). */
static void error_cb(rd_kafka_t *rk, int e, const char *reason, void *opaque)
{
    ch_kafka *k = opaque;
    snprintf(k->last_err, sizeof k->last_err, "%s", reason);
    if (!k->err_since_ns)
        k->err_since_ns = ch_now_ns();
}

/* ---- partitions and slots (mu held) --------------------------------------------- */

static kpart *part_find(ch_kafka *k, const char *topic, int32_t partition)
{
    if (k->last_part < k->nparts) {
        kpart *p = &k->parts[k->last_part];
        if (p->partition == partition && !strcmp(p->topic, topic))
            return p;
    }
    for (size_t i = 0; i < k->nparts; i++)
        if (k->parts[i].partition == partition && !strcmp(k->parts[i].topic, topic)) {
            k->last_part = i;
            return &k->parts[i];
        }
    return NULL;
}

/* Find or add; NULL only when out of memory.  Pointers into the table stay
 * valid only until the next add: slots therefore keep an index-stable
 * pointer by the table never being reallocated while slots point into it
 * (capacity is reserved for every partition of an assignment first). */
static kpart *part_get(ch_kafka *k, const char *topic, size_t topic_len, int32_t partition)
{
    for (size_t i = 0; i < k->nparts; i++)
        if (k->parts[i].partition == partition && strlen(k->parts[i].topic) == topic_len &&
            !memcmp(k->parts[i].topic, topic, topic_len))
            return &k->parts[i];
    if (k->nparts == k->capparts)
        return NULL; /* the caller reserved room */
    kpart *p = &k->parts[k->nparts];
    memset(p, 0, sizeof *p);
    if (!(p->topic = dup_n(topic, topic_len)))
        return NULL;
    p->partition = partition;
    p->position = p->committed = p->restore = -1;
    k->nparts++;
    return p;
}

/* Room for `more` partitions.  Reallocating moves the table, so every slot
 * pointing into it is re-pointed. */
static int part_reserve(ch_kafka *k, size_t more)
{
    if (k->capparts - k->nparts >= more)
        return 0;
    size_t cap = k->capparts ? k->capparts : 16;
    while (cap - k->nparts < more) {
        if (cap > SIZE_MAX / 2 / sizeof(kpart))
            return -1;
        cap *= 2;
    }
    kpart *old = k->parts;
    kpart *np = malloc(cap * sizeof *np);
    if (!np)
        return -1;
    if (k->nparts)
        memcpy(np, old, k->nparts * sizeof *np);
    for (uint32_t i = 0; i < k->nslots; i++)
        if (k->slots[i].part)
            k->slots[i].part = np + (k->slots[i].part - old);
    free(old);
    k->parts = np;
    k->capparts = cap;
    return 0;
}

static void slot_free(ch_kafka *k, kslot *s)
{
    s->in_use = 0;
    s->released = 0;
    s->part = NULL;
    s->rkm = NULL;
    s->next = k->free_slots;
    k->free_slots = s;
    k->nfree++;
}

static void release_locked(ch_kafka *k, kslot *s)
{
    if (!s || !s->in_use || s->released)
        return; /* a double release is harmless */
    rd_kafka_message_destroy(s->rkm);
    s->rkm = NULL;
    s->released = 1;
    k->st.released++;
    kpart *p = s->part;
    if (!p) {
        slot_free(k, s);
        return;
    }
    while (p->head && p->head->released) {
        kslot *h = p->head;
        p->head = h->next;
        p->position = h->offset + 1;
        slot_free(k, h);
    }
    if (!p->head)
        p->tail = NULL;
}

/* The partition is no longer ours: released slots go back to the pool,
 * unreleased ones are detached (their owner gets them again). */
static void part_detach(ch_kafka *k, kpart *p)
{
    kslot *s = p->head;
    while (s) {
        kslot *n = s->next;
        if (s->released) {
            slot_free(k, s);
        } else {
            s->part = NULL;
            s->next = NULL;
            k->st.revoked_unreleased++;
        }
        s = n;
    }
    p->head = p->tail = NULL;
    p->assigned = 0;
    p->eof = 0;
    p->position = -1; /* committed at revoke; the next owner's to track */
    p->committed = -1;
}

/* ---- commits ------------------------------------------------------------------- */

/* Partitions whose position moved past what was committed (mu held).
 * `only`: restrict to these partitions (revoke), or NULL for all assigned. */
static rd_kafka_topic_partition_list_t *commit_list(ch_kafka *k,
                                                    const rd_kafka_topic_partition_list_t *only)
{
    rd_kafka_topic_partition_list_t *l = NULL;
    for (size_t i = 0; i < k->nparts; i++) {
        kpart *p = &k->parts[i];
        if (!p->assigned || p->position < 0 || p->position <= p->committed)
            continue;
        if (only) {
            int hit = 0;
            for (int j = 0; j < only->cnt && !hit; j++)
                hit = only->elems[j].partition == p->partition &&
                      !strcmp(only->elems[j].topic, p->topic);
            if (!hit)
                continue;
        }
        if (!l && !(l = rd_kafka_topic_partition_list_new(8)))
            return NULL;
        rd_kafka_topic_partition_list_add(l, p->topic, p->partition)->offset = p->position;
        p->committed = p->position; /* undone by commit_cb on failure */
    }
    return l;
}

static void commit_failed(ch_kafka *k, const rd_kafka_topic_partition_list_t *l)
{
    pthread_mutex_lock(&k->mu);
    k->st.commit_errors++;
    for (int j = 0; j < l->cnt; j++) {
        kpart *p = part_find(k, l->elems[j].topic, l->elems[j].partition);
        if (p && p->committed == l->elems[j].offset)
            p->committed = -1; /* send it again with the next commit */
    }
    pthread_mutex_unlock(&k->mu);
}

/* Served from poll: the result of an async commit. */
static void commit_cb(rd_kafka_t *rk, rd_kafka_resp_err_t e,
                      rd_kafka_topic_partition_list_t *offsets, void *opaque)
{
    ch_kafka *k = opaque;
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR || e == RD_KAFKA_RESP_ERR__NO_OFFSET || !offsets)
        return;
    commit_failed(k, offsets);
}

static int commit_now(ch_kafka *k, const rd_kafka_topic_partition_list_t *only, int async,
                      chute_error *err)
{
    pthread_mutex_lock(&k->mu);
    rd_kafka_topic_partition_list_t *l = commit_list(k, only);
    k->last_commit_ns = ch_now_ns();
    if (l)
        k->st.commits++;
    pthread_mutex_unlock(&k->mu);
    if (!l)
        return CHUTE_OK;
    rd_kafka_resp_err_t e = rd_kafka_commit(k->rk, l, async);
    if (!async) {
        int bad = e != RD_KAFKA_RESP_ERR_NO_ERROR;
        for (int j = 0; j < l->cnt && !bad; j++)
            bad = l->elems[j].err != RD_KAFKA_RESP_ERR_NO_ERROR;
        if (bad) {
            commit_failed(k, l);
            if (!e)
                for (int j = 0; j < l->cnt && !e; j++)
                    e = l->elems[j].err;
        }
    } else if (e) {
        commit_failed(k, l);
    }
    rd_kafka_topic_partition_list_destroy(l);
    if (e)
        return ch_err(err, CHUTE_EIO, "kafka://%s: committing offsets failed: %s", k->brokers,
                      rd_kafka_err2str(e));
    return CHUTE_OK;
}

static void maybe_commit(ch_kafka *k)
{
    uint64_t now = ch_now_ns();
    pthread_mutex_lock(&k->mu);
    int due = now - k->last_commit_ns >= (uint64_t)k->commit_interval_ms * 1000000ull;
    pthread_mutex_unlock(&k->mu);
    if (due)
        commit_now(k, NULL, 1, NULL);
}

/* ---- assignment ---------------------------------------------------------------- */

/* Mark `l`'s partitions ours; restored positions become the offsets to
 * start from (so assign seeks there).  mu held.  -1: out of memory. */
static int take_assignment(ch_kafka *k, rd_kafka_topic_partition_list_t *l)
{
    if (part_reserve(k, (size_t)l->cnt))
        return -1;
    for (int i = 0; i < l->cnt; i++) {
        kpart *p = part_get(k, l->elems[i].topic, strlen(l->elems[i].topic), l->elems[i].partition);
        if (!p)
            return -1;
        p->assigned = 1;
        p->eof = 0;
        p->head = p->tail = NULL;
        if (p->restore >= 0) {
            l->elems[i].offset = p->restore;
            p->position = p->restore;
            p->restore = -1;
        }
        k->st.assigned++;
    }
    return 0;
}

static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t e,
                         rd_kafka_topic_partition_list_t *l, void *opaque)
{
    ch_kafka *k = opaque;
    int coop = !strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE");
    if (e == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        pthread_mutex_lock(&k->mu);
        int bad = take_assignment(k, l);
        pthread_mutex_unlock(&k->mu);
        if (bad && !k->cb_status) {
            k->cb_status = CHUTE_ENOMEM;
            snprintf(k->cb_msg, sizeof k->cb_msg, "out of memory tracking %d partitions", l->cnt);
        }
        rd_kafka_error_t *ee = NULL;
        if (coop)
            ee = rd_kafka_incremental_assign(rk, l);
        else
            rd_kafka_assign(rk, l);
        if (ee)
            rd_kafka_error_destroy(ee);
    } else {
        /* Revoked (or an error: give everything up).  Commit what was
         * released first, unless the assignment was lost (then the group
         * has moved on and a commit would be refused). */
        if (e == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS && !rd_kafka_assignment_lost(rk))
            commit_now(k, l, 0, NULL);
        pthread_mutex_lock(&k->mu);
        for (int i = 0; i < l->cnt; i++) {
            kpart *p = part_find(k, l->elems[i].topic, l->elems[i].partition);
            if (p && p->assigned) {
                part_detach(k, p);
                k->st.assigned--;
            }
        }
        pthread_mutex_unlock(&k->mu);
        if (coop) {
            rd_kafka_error_t *ee = rd_kafka_incremental_unassign(rk, l);
            if (ee)
                rd_kafka_error_destroy(ee);
        } else {
            rd_kafka_assign(rk, NULL);
        }
    }
}

/* Explicit assignment: every (topic, partition), numbered in topic order
 * then partition order, goes to rank i % world. */
static int assign_ranks(ch_kafka *k, chute_error *err)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(16);
    if (!l)
        return ch_err(err, CHUTE_ENOMEM, "kafka: out of memory");
    uint64_t idx = 0;
    int rc = CHUTE_OK;
    for (size_t t = 0; t < k->ntopics && rc == CHUTE_OK; t++) {
        rd_kafka_topic_t *rkt = rd_kafka_topic_new(k->rk, k->topics[t], NULL);
        if (!rkt) {
            rc = ch_err(err, CHUTE_ENOMEM, "kafka: out of memory");
            break;
        }
        const struct rd_kafka_metadata *md = NULL;
        uint64_t t0 = ch_now_ns();
        rd_kafka_resp_err_t e;
        /* Retry while the cluster is still coming up (leader unknown). */
        for (;;) {
            e = rd_kafka_metadata(k->rk, 0, rkt, &md, (int)k->error_timeout_ms);
            if (e == RD_KAFKA_RESP_ERR_NO_ERROR && md->topic_cnt == 1 &&
                md->topics[0].err == RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE &&
                ch_now_ns() - t0 < (uint64_t)k->error_timeout_ms * 1000000ull) {
                rd_kafka_metadata_destroy(md);
                md = NULL;
                struct timespec ts = {0, 50 * 1000000L};
                nanosleep(&ts, NULL);
                continue;
            }
            break;
        }
        rd_kafka_topic_destroy(rkt);
        if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
            rc = ch_err(err, CHUTE_EIO, "kafka://%s: reading metadata of topic %s failed after %u ms: %s",
                        k->brokers, k->topics[t], k->error_timeout_ms, rd_kafka_err2str(e));
            break;
        }
        if (md->topic_cnt != 1 || md->topics[0].err) {
            rd_kafka_resp_err_t te = md->topic_cnt == 1 ? md->topics[0].err
                                                        : RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART;
            rc = ch_err(err,
                        te == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ? CHUTE_ENOTFOUND : CHUTE_EIO,
                        "kafka://%s: topic %s: %s", k->brokers, k->topics[t], rd_kafka_err2str(te));
        } else {
            /* Metadata lists partitions in no promised order. */
            int n = md->topics[0].partition_cnt;
            for (int32_t p = 0; p < n; p++, idx++)
                if (idx % k->world == k->rank)
                    rd_kafka_topic_partition_list_add(l, k->topics[t], p)->offset =
                        RD_KAFKA_OFFSET_INVALID;
        }
        rd_kafka_metadata_destroy(md);
    }
    if (rc == CHUTE_OK) {
        pthread_mutex_lock(&k->mu);
        int bad = take_assignment(k, l);
        pthread_mutex_unlock(&k->mu);
        if (bad)
            rc = ch_err(err, CHUTE_ENOMEM, "kafka: out of memory");
        else if (rd_kafka_assign(k->rk, l))
            rc = ch_err(err, CHUTE_EIO, "kafka://%s: assigning partitions failed", k->brokers);
    }
    rd_kafka_topic_partition_list_destroy(l);
    return rc;
}

/* ---- state --------------------------------------------------------------------- */

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

int ch_kafka_state_parse(const void *buf, size_t len,
                         int (*fn)(void *user, const char *topic, size_t topic_len,
                                   int32_t partition, int64_t offset),
                         void *user, chute_error *err)
{
    const uint8_t *b = buf;
    if (len < 12 || memcmp(b, "CHKS", 4))
        return ch_err(err, CHUTE_ECORRUPT, "kafka state: not chute kafka state (%zu bytes, no CHKS header)", len);
    uint32_t ver = (uint32_t)get_le(b + 4, 4), count = (uint32_t)get_le(b + 8, 4);
    if (ver != 1)
        return ch_err(err, CHUTE_ECORRUPT, "kafka state: version %u (this build reads 1)", ver);
    size_t off = 12;
    for (uint32_t i = 0; i < count; i++) {
        if (len - off < 2)
            return ch_err(err, CHUTE_ECORRUPT, "kafka state: entry %u truncated at byte %zu", i, off);
        size_t tl = (size_t)get_le(b + off, 2);
        off += 2;
        if (tl == 0 || tl > 249)
            return ch_err(err, CHUTE_ECORRUPT, "kafka state: entry %u: topic length %zu at byte %zu (1..249)",
                          i, tl, off - 2);
        if (len - off < tl + 12)
            return ch_err(err, CHUTE_ECORRUPT, "kafka state: entry %u truncated at byte %zu", i, off);
        const char *topic = (const char *)b + off;
        for (size_t j = 0; j < tl; j++) {
            char c = topic[j];
            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-'))
                return ch_err(err, CHUTE_ECORRUPT,
                              "kafka state: entry %u: byte %zu of the topic name is not a topic character",
                              i, off + j);
        }
        off += tl;
        int32_t part = (int32_t)(uint32_t)get_le(b + off, 4);
        int64_t o = (int64_t)get_le(b + off + 4, 8);
        if (part < 0 || o < 0)
            return ch_err(err, CHUTE_ECORRUPT, "kafka state: entry %u at byte %zu: partition %d offset %lld",
                          i, off, (int)part, (long long)o);
        off += 12;
        if (fn) {
            int rc = fn(user, topic, tl, part, o);
            if (rc)
                return rc;
        }
    }
    if (off != len)
        return ch_err(err, CHUTE_ECORRUPT, "kafka state: %zu bytes after the last entry (byte %zu)",
                      len - off, off);
    return CHUTE_OK;
}

static int restore_one(void *user, const char *topic, size_t tl, int32_t partition, int64_t offset)
{
    ch_kafka *k = user;
    if (part_reserve(k, 1))
        return CHUTE_ENOMEM;
    kpart *p = part_get(k, topic, tl, partition);
    if (!p)
        return CHUTE_ENOMEM;
    p->restore = offset;
    return 0;
}

int ch_kafka_state_save(ch_kafka *k, void *buf, size_t cap, size_t *len, chute_error *err)
{
    pthread_mutex_lock(&k->mu);
    size_t need = 12;
    uint32_t count = 0;
    for (size_t i = 0; i < k->nparts; i++) {
        kpart *p = &k->parts[i];
        if ((p->assigned && p->position >= 0) || p->restore >= 0) {
            need += 2 + strlen(p->topic) + 12;
            count++;
        }
    }
    *len = need;
    if (!buf || cap < need) {
        pthread_mutex_unlock(&k->mu);
        return CH_ESMALL;
    }
    uint8_t *b = buf;
    memcpy(b, "CHKS", 4);
    put_le(b + 4, 1, 4);
    put_le(b + 8, count, 4);
    size_t off = 12;
    for (size_t i = 0; i < k->nparts; i++) {
        kpart *p = &k->parts[i];
        int64_t o = p->restore >= 0 ? p->restore : p->assigned ? p->position : -1;
        if (o < 0)
            continue;
        size_t tl = strlen(p->topic);
        put_le(b + off, tl, 2);
        memcpy(b + off + 2, p->topic, tl);
        off += 2 + tl;
        put_le(b + off, (uint32_t)p->partition, 4);
        put_le(b + off + 4, (uint64_t)o, 8);
        off += 12;
    }
    pthread_mutex_unlock(&k->mu);
    (void)err;
    return CHUTE_OK;
}

/* ---- open ---------------------------------------------------------------------- */

typedef struct kprops {
    char **kv; /* "name=value" without the kafka. prefix */
    size_t n, cap;
} kprops;

static int props_add(kprops *pr, const char *s)
{
    if (!strncmp(s, "kafka.", 6))
        s += 6;
    if (pr->n == pr->cap) {
        size_t cap = pr->cap ? pr->cap * 2 : 8;
        char **nk = realloc(pr->kv, cap * sizeof *nk);
        if (!nk)
            return -1;
        pr->kv = nk;
        pr->cap = cap;
    }
    if (!(pr->kv[pr->n] = strdup(s)))
        return -1;
    pr->n++;
    return 0;
}

static void props_free(kprops *pr)
{
    for (size_t i = 0; i < pr->n; i++)
        free(pr->kv[i]);
    free(pr->kv);
}

/* librdkafka's own message may quote the value: blank every copy of it. */
static void redact(char *msg, const char *value)
{
    size_t vl = strlen(value);
    if (!vl)
        return;
    char *p;
    while ((p = strstr(msg, value)))
        memset(p, '*', vl);
}

static int set_prop(rd_kafka_conf_t *conf, const char *name, const char *value, chute_error *err)
{
    char es[512];
    if (rd_kafka_conf_set(conf, name, value, es, sizeof es) != RD_KAFKA_CONF_OK) {
        redact(es, value);
        return ch_err(err, CHUTE_EINVAL, "kafka: client property %s rejected (value not shown): %s", name, es);
    }
    return CHUTE_OK;
}

typedef struct kuri {
    char *brokers, *topics, *group, *assign, *label_header, *label_key, *until;
    char *max_samples, *max_unreleased, *error_timeout_ms, *commit_interval_ms;
} kuri;

static void kuri_free(kuri *u)
{
    free(u->brokers); free(u->topics); free(u->group); free(u->assign);
    free(u->label_header); free(u->label_key); free(u->until); free(u->max_samples);
    free(u->max_unreleased); free(u->error_timeout_ms); free(u->commit_interval_ms);
}

static int parse_uri(const char *uri, kuri *u, kprops *pr, chute_error *err)
{
    if (strncmp(uri, "kafka://", 8))
        return ch_err(err, CHUTE_EINVAL, "kafka: '%.200s' is not a kafka:// URI", uri);
    const char *p = uri + 8;
    const char *slash = strchr(p, '/');
    if (!slash || slash == p)
        return ch_err(err, CHUTE_EINVAL, "kafka: '%.200s': expected kafka://HOST:PORT[,HOST:PORT]/TOPIC[,TOPIC]", uri);
    u->brokers = dup_n(p, (size_t)(slash - p));
    p = slash + 1;
    const char *q = strchr(p, '?');
    size_t tl = q ? (size_t)(q - p) : strlen(p);
    if (!tl)
        return ch_err(err, CHUTE_EINVAL, "kafka: '%.200s' names no topic", uri);
    u->topics = pct_decode(p, tl);
    if (!u->brokers || !u->topics)
        return ch_err(err, CHUTE_EINVAL, "kafka: '%.200s': bad %%-escape in the topics", uri);
    if (!q)
        return CHUTE_OK;
    p = q + 1;
    while (*p) {
        const char *amp = strchr(p, '&');
        size_t n = amp ? (size_t)(amp - p) : strlen(p);
        const char *eq = memchr(p, '=', n);
        if (!eq)
            return ch_err(err, CHUTE_EINVAL, "kafka: query item '%.*s' is not name=value", (int)CH_MIN(n, 100), p);
        size_t kl = (size_t)(eq - p);
        char *val = pct_decode(eq + 1, n - kl - 1);
        if (!val)
            return ch_err(err, CHUTE_EINVAL, "kafka: query item %.*s: bad %%-escape", (int)CH_MIN(kl, 100), p);
        char **slot = NULL;
#define KEY(s, f) else if (kl == sizeof(s) - 1 && !memcmp(p, s, kl)) slot = &u->f;
        if (0) {}
        KEY("group", group) KEY("assign", assign) KEY("label_header", label_header)
        KEY("label_key", label_key) KEY("until", until) KEY("max_samples", max_samples)
        KEY("max_unreleased", max_unreleased) KEY("error_timeout_ms", error_timeout_ms)
        KEY("commit_interval_ms", commit_interval_ms)
#undef KEY
        if (slot) {
            free(*slot);
            *slot = val;
        } else if (kl > 6 && !memcmp(p, "kafka.", 6)) {
            char *kv = malloc(kl + 1 + strlen(val) + 1);
            if (!kv || (sprintf(kv, "%.*s=%s", (int)kl, p, val), props_add(pr, kv))) {
                free(kv);
                free(val);
                return ch_err(err, CHUTE_ENOMEM, "kafka: out of memory");
            }
            free(kv);
            free(val);
        } else {
            free(val);
            return ch_err(err, CHUTE_EINVAL,
                          "kafka: unknown query key '%.*s' (group, assign, label_header, label_key, until, "
                          "max_samples, max_unreleased, error_timeout_ms, commit_interval_ms, kafka.<property>)",
                          (int)CH_MIN(kl, 100), p);
        }
        p += n;
        if (*p == '&')
            p++;
    }
    return CHUTE_OK;
}

static int uint_opt(const char *name, const char *s, uint64_t max, uint64_t *out, chute_error *err)
{
    if (parse_u64_str(s, out) || *out > max)
        return ch_err(err, CHUTE_EINVAL, "kafka: %s=%.40s is not an integer in 0..%llu", name, s,
                      (unsigned long long)max);
    return CHUTE_OK;
}

/* Properties chute sets itself: overriding them would break at-least-once
 * or the end-of-partition test. */
static const char *const k_reserved[] = {"enable.auto.commit", "enable.auto.offset.store",
                                         "enable.partition.eof", "group.id", "bootstrap.servers",
                                         NULL};

/* Client properties given by the user ("name=value"): each well formed
 * and none of those chute sets itself.  Checked before any client exists. */
static int props_check(const kprops *pr, chute_error *err)
{
    for (size_t i = 0; i < pr->n; i++) {
        const char *eq = strchr(pr->kv[i], '=');
        if (!eq || eq == pr->kv[i])
            return ch_err(err, CHUTE_EINVAL, "kafka: client property '%.*s...' is not name=value",
                          (int)CH_MIN(strcspn(pr->kv[i], "="), 60), pr->kv[i]);
        for (const char *const *r = k_reserved; *r; r++)
            if (strlen(*r) == (size_t)(eq - pr->kv[i]) && !memcmp(pr->kv[i], *r, strlen(*r)))
                return ch_err(err, CHUTE_EINVAL, "kafka: client property %s is set by chute (at-least-once "
                              "delivery needs it; use the URI or options instead)", *r);
    }
    return CHUTE_OK;
}

/* dry: parse and check everything, make no client (ch_kafka_uri_check). */
static int build(ch_kafka *k, const char *uri, const ch_kafka_opts *o, int dry, chute_error *err)
{
    kuri u = {0};
    kprops pr = {0};
    rd_kafka_conf_t *conf = NULL;
    int rc = parse_uri(uri, &u, &pr, err);
    if (rc)
        goto out;
    for (const char *const *pp = o->props; pp && *pp; pp++)
        if (props_add(&pr, *pp)) {
            rc = ch_err(err, CHUTE_ENOMEM, "kafka: out of memory");
            goto out;
        }
    k->brokers = u.brokers;
    u.brokers = NULL;
    /* topics */
    for (char *s = u.topics; s; ) {
        char *c = strchr(s, ',');
        size_t n = c ? (size_t)(c - s) : strlen(s);
        if (!n || n > 249) {
            rc = ch_err(err, CHUTE_EINVAL, "kafka: empty or over-long topic name in '%.200s'", u.topics);
            goto out;
        }
        char **nt = realloc(k->topics, (k->ntopics + 1) * sizeof *nt);
        if (!nt || !(nt[k->ntopics] = dup_n(s, n))) {
            if (nt)
                k->topics = nt;
            rc = ch_err(err, CHUTE_ENOMEM, "kafka: out of memory");
            goto out;
        }
        k->topics = nt;
        k->ntopics++;
        s = c ? c + 1 : NULL;
    }
    const char *group = o->group ? o->group : u.group;
    if (!group || !*group) {
        rc = ch_err(err, CHUTE_EINVAL,
                    "kafka://%s: no consumer group (?group=NAME): offsets are committed to one", k->brokers);
        goto out;
    }
    k->assign = o->assign;
    if (u.assign && !o->assign) {
        if (!strcmp(u.assign, "ranks"))
            k->assign = CH_KAFKA_ASSIGN_RANKS;
        else if (strcmp(u.assign, "group")) {
            rc = ch_err(err, CHUTE_EINVAL, "kafka: assign=%.40s (group or ranks)", u.assign);
            goto out;
        }
    }
    if (k->assign != CH_KAFKA_ASSIGN_GROUP && k->assign != CH_KAFKA_ASSIGN_RANKS) {
        rc = ch_err(err, CHUTE_EINVAL, "kafka: assign mode %d (0 group, 1 ranks)", k->assign);
        goto out;
    }
    k->world = o->world ? o->world : 1;
    k->rank = o->rank;
    if (k->rank >= k->world) {
        rc = ch_err(err, CHUTE_EINVAL, "kafka: rank %u of world %u", k->rank, k->world);
        goto out;
    }
    const char *lh = o->label_header ? o->label_header : u.label_header;
    const char *lk = o->label_key ? o->label_key : u.label_key;
    if (lh && lk) {
        rc = ch_err(err, CHUTE_EINVAL, "kafka: label_header and label_key both given (one label source)");
        goto out;
    }
    if ((lh && !(k->label_header = strdup(lh))) || (lk && !(k->label_key = strdup(lk)))) {
        rc = ch_err(err, CHUTE_ENOMEM, "kafka: out of memory");
        goto out;
    }
    k->until_eof = o->until_eof;
    if (u.until) {
        if (strcmp(u.until, "eof")) {
            rc = ch_err(err, CHUTE_EINVAL, "kafka: until=%.40s (eof is the one end condition by name)", u.until);
            goto out;
        }
        k->until_eof = 1;
    }
    uint64_t v;
    k->max_samples = o->max_samples;
    if (!k->max_samples && u.max_samples) {
        if ((rc = uint_opt("max_samples", u.max_samples, UINT64_MAX >> 1, &v, err)))
            goto out;
        k->max_samples = v;
    }
    k->nslots = o->max_unreleased ? o->max_unreleased : 65536;
    if (!o->max_unreleased && u.max_unreleased) {
        if ((rc = uint_opt("max_unreleased", u.max_unreleased, 1u << 24, &v, err)) || v == 0) {
            rc = ch_err(err, CHUTE_EINVAL, "kafka: max_unreleased=%.40s is not in 1..16777216", u.max_unreleased);
            goto out;
        }
        k->nslots = (uint32_t)v;
    }
    k->error_timeout_ms = o->error_timeout_ms ? o->error_timeout_ms : 30000;
    if (!o->error_timeout_ms && u.error_timeout_ms) {
        if ((rc = uint_opt("error_timeout_ms", u.error_timeout_ms, 86400000, &v, err)))
            goto out;
        if (v)
            k->error_timeout_ms = (uint32_t)v;
    }
    k->commit_interval_ms = o->commit_interval_ms ? o->commit_interval_ms : 1000;
    if (!o->commit_interval_ms && u.commit_interval_ms) {
        if ((rc = uint_opt("commit_interval_ms", u.commit_interval_ms, 86400000, &v, err)))
            goto out;
        if (v)
            k->commit_interval_ms = (uint32_t)v;
    }
    if ((rc = props_check(&pr, err)))
        goto out;
    if (dry)
        k->nslots = 0; /* checked; a dry build holds no message */
    /* slots */
    if (!dry && !(k->slots = calloc(k->nslots, sizeof *k->slots))) {
        rc = ch_err(err, CHUTE_ENOMEM, "kafka: out of memory for %u message slots", k->nslots);
        goto out;
    }
    for (uint32_t i = k->nslots; !dry && i-- > 0;)
        slot_free(k, &k->slots[i]);
    if (o->state && (rc = ch_kafka_state_parse(o->state, o->state_len, restore_one, k, err))) {
        if (rc == CHUTE_ENOMEM)
            ch_err(err, rc, "kafka: out of memory restoring state");
        goto out;
    }
    if (dry)
        goto out;
    /* client configuration */
    if (!(conf = rd_kafka_conf_new())) {
        rc = ch_err(err, CHUTE_ENOMEM, "kafka: out of memory");
        goto out;
    }
    char tmo[32];
    snprintf(tmo, sizeof tmo, "%u", CH_MAX(k->error_timeout_ms, 1000u));
    if ((rc = set_prop(conf, "bootstrap.servers", k->brokers, err)) ||
        (rc = set_prop(conf, "group.id", group, err)) ||
        (rc = set_prop(conf, "enable.auto.commit", "false", err)) ||
        (rc = set_prop(conf, "enable.auto.offset.store", "false", err)) ||
        (rc = set_prop(conf, "enable.partition.eof", k->until_eof ? "true" : "false", err)) ||
        (rc = set_prop(conf, "auto.offset.reset", "earliest", err)))
        goto out;
    for (size_t i = 0; i < pr.n; i++) {
        char *eq = strchr(pr.kv[i], '='); /* props_check: present, not first */
        *eq = 0;
        if ((rc = set_prop(conf, pr.kv[i], eq + 1, err)))
            goto out;
    }
    rd_kafka_conf_set_log_cb(conf, rk_log_quiet);
    rd_kafka_conf_set_opaque(conf, k);
    rd_kafka_conf_set_offset_commit_cb(conf, commit_cb);
    rd_kafka_conf_set_error_cb(conf, error_cb);
    if (k->assign == CH_KAFKA_ASSIGN_GROUP)
        rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
    char es[512];
    k->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, es, sizeof es);
    if (!k->rk) {
        for (size_t i = 0; i < pr.n; i++) {
            char *eq = pr.kv[i] + strlen(pr.kv[i]) + 1; /* the '=' was cut above */
            redact(es, eq);
        }
        rc = ch_err(err, CHUTE_EINVAL, "kafka://%s: creating the consumer failed (property values not shown): %s",
                    k->brokers, es);
        goto out;
    }
    conf = NULL; /* owned by rk now */
    rd_kafka_poll_set_consumer(k->rk);
    k->last_commit_ns = ch_now_ns();
    if (k->assign == CH_KAFKA_ASSIGN_GROUP) {
        rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new((int)k->ntopics);
        if (!l) {
            rc = ch_err(err, CHUTE_ENOMEM, "kafka: out of memory");
            goto out;
        }
        for (size_t t = 0; t < k->ntopics; t++)
            rd_kafka_topic_partition_list_add(l, k->topics[t], RD_KAFKA_PARTITION_UA);
        rd_kafka_resp_err_t e = rd_kafka_subscribe(k->rk, l);
        rd_kafka_topic_partition_list_destroy(l);
        if (e)
            rc = ch_err(err, CHUTE_EINVAL, "kafka://%s: subscribing failed: %s", k->brokers, rd_kafka_err2str(e));
    } else {
        rc = assign_ranks(k, err);
    }
out:
    if (conf)
        rd_kafka_conf_destroy(conf);
    kuri_free(&u);
    props_free(&pr);
    return rc;
}

static void k_free(ch_kafka *k)
{
    for (uint32_t i = 0; k->slots && i < k->nslots; i++) /* no slots: a dry or failed build */
        if (k->slots[i].in_use && k->slots[i].rkm)
            rd_kafka_message_destroy(k->slots[i].rkm);
    if (k->rk)
        rd_kafka_destroy(k->rk);
    for (size_t i = 0; i < k->nparts; i++)
        free(k->parts[i].topic);
    free(k->parts);
    free(k->slots);
    for (size_t i = 0; i < k->ntopics; i++)
        free(k->topics[i]);
    free(k->topics);
    free(k->brokers);
    free(k->label_header);
    free(k->label_key);
    pthread_mutex_destroy(&k->mu);
    free(k);
}

int ch_kafka_open(const char *uri, const ch_kafka_opts *opts, ch_kafka **out, chute_error *err)
{
    *out = NULL;
    ch_kafka_opts none = {0};
    ch_kafka *k = calloc(1, sizeof *k);
    if (!k)
        return ch_err(err, CHUTE_ENOMEM, "kafka: out of memory");
    pthread_mutex_init(&k->mu, NULL);
    int rc = build(k, uri, opts ? opts : &none, 0, err);
    if (rc) {
        if (k->rk && k->assign == CH_KAFKA_ASSIGN_GROUP)
            rd_kafka_consumer_close(k->rk);
        k_free(k);
        return rc;
    }
    *out = k;
    return CHUTE_OK;
}

int ch_kafka_uri_check(const char *uri, const ch_kafka_opts *opts, chute_error *err)
{
    ch_kafka_opts none = {0};
    ch_kafka *k = calloc(1, sizeof *k);
    if (!k)
        return ch_err(err, CHUTE_ENOMEM, "kafka: out of memory");
    pthread_mutex_init(&k->mu, NULL);
    int rc = build(k, uri, opts ? opts : &none, 1, err);
    k_free(k);
    return rc;
}

/* ---- next ---------------------------------------------------------------------- */

static void label_of(ch_kafka *k, const rd_kafka_message_t *m, ch_kafka_msg *msg)
{
    msg->label = 0;
    msg->label_why = NULL;
    const char *p = NULL;
    size_t n = 0;
    if (k->label_header) {
        rd_kafka_headers_t *h = NULL;
        const void *v = NULL;
        if (rd_kafka_message_headers(m, &h) ||
            rd_kafka_header_get_last(h, k->label_header, &v, &n)) {
            msg->label_status = CHUTE_EFORMAT;
            msg->label_why = "the label header is missing";
            return;
        }
        if (!v) {
            msg->label_status = CHUTE_EFORMAT;
            msg->label_why = "the label header is null";
            return;
        }
        p = v;
    } else if (k->label_key) {
        if (!m->key) {
            msg->label_status = CHUTE_EFORMAT;
            msg->label_why = "the message has no key to read the label from";
            return;
        }
        p = m->key;
        n = m->key_len;
        if (k->label_key[0] && strcmp(k->label_key, "-")) {
            size_t fl = strlen(k->label_key);
            const char *end = p + n, *s = p, *found = NULL;
            while (s < end && !found) {
                const char *e = s;
                while (e < end && *e != ',' && *e != ';' && *e != '&')
                    e++;
                if ((size_t)(e - s) > fl && !memcmp(s, k->label_key, fl) && s[fl] == '=') {
                    found = s + fl + 1;
                    n = (size_t)(e - found);
                }
                s = e + 1;
            }
            if (!found) {
                msg->label_status = CHUTE_EFORMAT;
                msg->label_why = "the key has no label field";
                return;
            }
            p = found;
        }
    } else {
        msg->label_status = CHUTE_ENOTFOUND;
        msg->label_why = "no label source configured";
        return;
    }
    if (parse_i64(p, n, &msg->label)) {
        msg->label = 0;
        msg->label_status = CHUTE_EFORMAT;
        msg->label_why = "the label is not a decimal int64";
        return;
    }
    msg->label_status = CHUTE_OK;
}

static int all_eof(ch_kafka *k)
{
    pthread_mutex_lock(&k->mu);
    int any = 0, all = 1;
    for (size_t i = 0; i < k->nparts; i++)
        if (k->parts[i].assigned) {
            any = 1;
            all &= k->parts[i].eof;
        }
    pthread_mutex_unlock(&k->mu);
    return any && all;
}

/* After error_timeout_ms of transport errors and no message: one direct
 * metadata request decides (an idle consumer sees no messages either). */
static int check_down(ch_kafka *k, chute_error *err)
{
    if (!k->err_since_ns)
        return CHUTE_OK;
    uint64_t el = ch_now_ns() - k->err_since_ns;
    if (el < (uint64_t)k->error_timeout_ms * 1000000ull)
        return CHUTE_OK;
    const struct rd_kafka_metadata *md = NULL;
    if (rd_kafka_metadata(k->rk, 0, NULL, &md, 1000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_metadata_destroy(md);
        k->err_since_ns = 0;
        return CHUTE_OK;
    }
    return ch_err(err, CHUTE_EIO, "kafka://%s: brokers unreachable for %.1f s (last error: %s)",
                  k->brokers, (double)el / 1e9, k->last_err);
}

int ch_kafka_next(ch_kafka *k, ch_kafka_msg *msg, int timeout_ms, chute_error *err)
{
    uint64_t deadline = ch_now_ns() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000ull;
    for (;;) {
        if (k->cb_status)
            return ch_err(err, k->cb_status, "kafka://%s: %s", k->brokers, k->cb_msg);
        if (rd_kafka_fatal_error(k->rk, NULL, 0)) {
            char es[256];
            rd_kafka_fatal_error(k->rk, es, sizeof es);
            return ch_err(err, CHUTE_EIO, "kafka://%s: fatal client error: %s", k->brokers, es);
        }
        pthread_mutex_lock(&k->mu);
        int ended = k->max_samples && k->st.delivered >= k->max_samples;
        int busy = k->nfree == 0;
        pthread_mutex_unlock(&k->mu);
        if (ended)
            return CHUTE_END;
        if (busy)
            return ch_err(err, CHUTE_EBUSY, "kafka://%s: %u messages handed out and not released "
                          "(max_unreleased)", k->brokers, k->nslots);
        maybe_commit(k);
        int eof = k->until_eof && all_eof(k);
        uint64_t now = ch_now_ns();
        int wait = eof || now >= deadline ? 0 : (int)CH_MIN((deadline - now + 999999) / 1000000, 100);
        rd_kafka_message_t *m = rd_kafka_consumer_poll(k->rk, wait);
        if (!m) {
            int rc = check_down(k, err);
            if (rc)
                return rc;
            if (eof)
                return CHUTE_END;
            if (ch_now_ns() >= deadline)
                return CH_KAFKA_AGAIN;
            continue;
        }
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            pthread_mutex_lock(&k->mu);
            kpart *p = m->rkt ? part_find(k, rd_kafka_topic_name(m->rkt), m->partition) : NULL;
            if (p && p->assigned)
                p->eof = 1;
            pthread_mutex_unlock(&k->mu);
            rd_kafka_message_destroy(m);
            k->err_since_ns = 0;
            continue;
        }
        if (m->err) {
            rd_kafka_resp_err_t e = m->err;
            if (e == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART || e == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC ||
                e == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION) {
                int rc = ch_err(err, CHUTE_ENOTFOUND, "kafka://%s: topic %s: %s", k->brokers,
                                m->rkt ? rd_kafka_topic_name(m->rkt) : "?", rd_kafka_err2str(e));
                rd_kafka_message_destroy(m);
                return rc;
            }
            snprintf(k->last_err, sizeof k->last_err, "%s", rd_kafka_message_errstr(m));
            if (!k->err_since_ns)
                k->err_since_ns = ch_now_ns();
            rd_kafka_message_destroy(m);
            int rc = check_down(k, err);
            if (rc)
                return rc;
            if (ch_now_ns() >= deadline)
                return CH_KAFKA_AGAIN;
            continue;
        }
        k->err_since_ns = 0;
        const char *topic = rd_kafka_topic_name(m->rkt);
        pthread_mutex_lock(&k->mu);
        kpart *p = part_find(k, topic, m->partition);
        if (!p || !p->assigned) {
            /* Not ours (any more): its owner reads it. */
            pthread_mutex_unlock(&k->mu);
            rd_kafka_message_destroy(m);
            continue;
        }
        kslot *s = k->free_slots;
        k->free_slots = s->next;
        k->nfree--;
        s->rkm = m;
        s->part = p;
        s->offset = m->offset;
        s->in_use = 1;
        s->released = 0;
        s->next = NULL;
        if (p->tail)
            p->tail->next = s;
        else
            p->head = s;
        p->tail = s;
        p->eof = 0;
        k->st.delivered++;
        pthread_mutex_unlock(&k->mu);
        msg->value = m->payload;
        msg->value_len = m->len;
        msg->key = m->key;
        msg->key_len = m->key ? m->key_len : 0;
        msg->topic = topic;
        msg->partition = m->partition;
        msg->offset = m->offset;
        rd_kafka_timestamp_type_t tt;
        msg->timestamp_ms = rd_kafka_message_timestamp(m, &tt);
        msg->token = s;
        label_of(k, m, msg);
        return CHUTE_OK;
    }
}

void ch_kafka_msg_where(const ch_kafka_msg *msg, char *buf, size_t n)
{
    snprintf(buf, n, "kafka topic %s partition %d offset %lld", msg->topic, (int)msg->partition,
             (long long)msg->offset);
}

int ch_kafka_header(const ch_kafka_msg *msg, const char *name, const void **val, size_t *len)
{
    const kslot *s = msg->token;
    rd_kafka_headers_t *h = NULL;
    if (!s || !s->rkm || rd_kafka_message_headers(s->rkm, &h) ||
        rd_kafka_header_get_last(h, name, val, len))
        return CHUTE_ENOTFOUND;
    return CHUTE_OK;
}

int ch_kafka_header_at(const ch_kafka_msg *msg, size_t idx, const char **name, const void **val,
                       size_t *len)
{
    const kslot *s = msg->token;
    rd_kafka_headers_t *h = NULL;
    if (!s || !s->rkm || rd_kafka_message_headers(s->rkm, &h) ||
        rd_kafka_header_get_all(h, idx, name, val, len))
        return CHUTE_END;
    return CHUTE_OK;
}

/* ---- release, commit, close ----------------------------------------------------- */

void ch_kafka_release(ch_kafka *k, void *token)
{
    ch_kafka_release_n(k, &token, 1);
}

void ch_kafka_release_n(ch_kafka *k, void *const *tokens, size_t n)
{
    pthread_mutex_lock(&k->mu);
    for (size_t i = 0; i < n; i++) {
        kslot *s = tokens[i];
        if (s >= k->slots && s < k->slots + k->nslots)
            release_locked(k, s);
    }
    pthread_mutex_unlock(&k->mu);
    maybe_commit(k);
}

int ch_kafka_commit(ch_kafka *k, chute_error *err)
{
    return commit_now(k, NULL, 0, err);
}

void ch_kafka_get_stats(ch_kafka *k, ch_kafka_stats *out)
{
    pthread_mutex_lock(&k->mu);
    *out = k->st;
    pthread_mutex_unlock(&k->mu);
}

int ch_kafka_close(ch_kafka *k, chute_error *err)
{
    if (!k)
        return CHUTE_OK;
    int rc = commit_now(k, NULL, 0, err);
    /* Group mode: leaving serves the revoke callback (it commits nothing
     * new: the commit above covered every released message). */
    rd_kafka_consumer_close(k->rk);
    k_free(k);
    return rc;
}
