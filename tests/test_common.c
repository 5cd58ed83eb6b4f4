/*
 * test_common.c — the CPU budget behind every default thread count:
 * cgroup v1/v2 quota parsing on fixture files (a cgroup root and a
 * /proc/self/cgroup of our own making), hostile file contents, and the
 * affinity mask and LOCAL_WORLD_SIZE applied to this process.
 */
#include "unit.h"

#include "common/common.h"

#include <math.h>
#include <sched.h>

static char g_dir[4096];

static int put(const char *rel, const char *text)
{
    char p[8400];
    snprintf(p, sizeof p, "%s/%s", g_dir, rel);
    char d[8400];
    snprintf(d, sizeof d, "%s", p);
    char *slash = strrchr(d, '/');
    if (slash) {
        *slash = '\0';
        unit_mkdirs(d);
    }
    return unit_write_file(p, text, strlen(text));
}

/* Quota for a fixture: root = g_dir/root, self = g_dir/self. */
static double quota(char *src, size_t n)
{
    char root[4200], self[4200];
    snprintf(root, sizeof root, "%s/root", g_dir);
    snprintf(self, sizeof self, "%s/self", g_dir);
    return ch_cgroup_cpu_quota(root, self, src, n);
}

static int near(double a, double b) { return fabs(a - b) < 1e-9; }

TEST(cgroup_v2_cpu_max)
{
    unit_scratch("cgroup_v2", g_dir, sizeof g_dir);
    char src[4200];
    /* unified hierarchy: the tightest of the cgroup and its ancestors */
    CHECK(put("root/cgroup.controllers", "cpu io memory\n") == 0, "fixture");
    CHECK(put("root/kubepods/cpu.max", "250000 100000\n") == 0, "fixture");
    CHECK(put("root/kubepods/pod1/cpu.max", "max 100000\n") == 0, "fixture");
    CHECK(put("root/kubepods/pod1/ctr/cpu.max", "max 100000\n") == 0, "fixture");
    CHECK(put("self", "0::/kubepods/pod1/ctr\n") == 0, "fixture");
    double q = quota(src, sizeof src);
    CHECK(near(q, 2.5) && strstr(src, "kubepods/cpu.max"), "ancestor quota: %g from '%s'", q, src);
    CHECK(put("root/kubepods/pod1/ctr/cpu.max", "50000 100000\n") == 0, "fixture");
    q = quota(src, sizeof src);
    CHECK(near(q, 0.5) && strstr(src, "ctr/cpu.max"), "leaf quota: %g from '%s'", q, src);
    /* period omitted: the kernel's default 100000 */
    CHECK(put("root/kubepods/pod1/ctr/cpu.max", "300000\n") == 0, "fixture");
    q = quota(src, sizeof src);
    CHECK(near(q, 2.5), "quota without period: %g", q);
    /* no limit anywhere */
    CHECK(put("root/kubepods/cpu.max", "max 100000\n") == 0, "fixture");
    CHECK(put("root/kubepods/pod1/ctr/cpu.max", "max\n") == 0, "fixture");
    CHECK(quota(src, sizeof src) == 0, "'max' read as a limit");
    /* a cgroup namespace shows "/": the root's own cpu.max applies */
    CHECK(put("root/cpu.max", "400000 100000\n") == 0, "fixture");
    CHECK(put("self", "0::/\n") == 0, "fixture");
    q = quota(src, sizeof src);
    CHECK(near(q, 4.0), "namespaced root: %g", q);
    /* a path that does not exist under root falls back to root */
    CHECK(put("self", "0::/elsewhere/x\n") == 0, "fixture");
    q = quota(src, sizeof src);
    CHECK(near(q, 4.0), "missing path: %g", q);
    return 0;
}

TEST(cgroup_v1_cfs_quota)
{
    unit_scratch("cgroup_v1", g_dir, sizeof g_dir);
    char src[4200];
    CHECK(put("root/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "150000\n") == 0, "fixture");
    CHECK(put("root/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n") == 0, "fixture");
    CHECK(put("root/cpu,cpuacct/cpu.cfs_quota_us", "-1\n") == 0, "fixture");
    CHECK(put("root/cpu,cpuacct/cpu.cfs_period_us", "100000\n") == 0, "fixture");
    CHECK(put("self", "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/x\n") ==
              0,
          "fixture");
    double q = quota(src, sizeof src);
    CHECK(near(q, 1.5) && strstr(src, "cfs_quota_us"), "v1 quota: %g from '%s'", q, src);
    /* -1 is "no limit" */
    CHECK(put("root/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1\n") == 0, "fixture");
    CHECK(quota(src, sizeof src) == 0, "-1 read as a limit");
    /* separate "cpu" mount, as on hosts that do not co-mount cpuacct */
    CHECK(put("self", "3:cpu:/job\n2:cpuacct:/job\n") == 0, "fixture");
    CHECK(put("root/cpu/job/cpu.cfs_quota_us", "800000\n") == 0, "fixture");
    CHECK(put("root/cpu/job/cpu.cfs_period_us", "200000\n") == 0, "fixture");
    q = quota(src, sizeof src);
    CHECK(near(q, 4.0), "v1 cpu mount: %g", q);
    /* "cpuacct" alone is not the cpu controller */
    CHECK(put("self", "2:cpuacct:/job\n") == 0, "fixture");
    CHECK(quota(src, sizeof src) == 0, "cpuacct taken for cpu");
    return 0;
}

/* Hostile or odd contents never crash and never invent a limit. */
TEST(cgroup_garbage_is_no_limit)
{
    unit_scratch("cgroup_garbage", g_dir, sizeof g_dir);
    char src[4200];
    CHECK(quota(src, sizeof src) == 0, "missing /proc/self/cgroup");
    static const char *selves[] = {"", "\n\n", "garbage", "0:", "::::", "0::", "4:cpu:",
                                   "0::/../../etc"};
    static const char *cpu_max[] = {"",          "abc",       "max",           "-5 100000",
                                    "100000 0",  "100000 -1", "0 100000",      "1e5 1e5",
                                    "99999999999999999999999 100000",
                                    "100000 99999999999999999999999", "100000x 100000"};
    CHECK(put("root/cgroup.controllers", "cpu\n") == 0, "fixture");
    for (size_t i = 0; i < sizeof selves / sizeof *selves; i++) {
        CHECK(put("self", selves[i]) == 0, "fixture");
        for (size_t j = 0; j < sizeof cpu_max / sizeof *cpu_max; j++) {
            CHECK(put("root/cpu.max", cpu_max[j]) == 0, "fixture");
            /* none of these is a well-formed positive "QUOTA PERIOD" for
             * a cgroup the self file names */
            double q = quota(src, sizeof src);
            CHECK(q == 0, "self '%s', cpu.max '%s' gave a limit of %g", selves[i], cpu_max[j],
                  q);
        }
    }
    /* a v1 quota without a period file is no limit */
    CHECK(put("self", "4:cpu:/a\n") == 0, "fixture");
    CHECK(put("root/cpu/a/cpu.cfs_quota_us", "50000") == 0, "fixture");
    CHECK(quota(src, sizeof src) == 0, "v1 quota without period");
    return 0;
}

/* This process under an affinity mask of one CPU (what `taskset -c 0`
 * does), then two CPUs with LOCAL_WORLD_SIZE=2. */
TEST(cpu_budget_affinity_and_local_world)
{
    cpu_set_t old, one;
    CHECK(sched_getaffinity(0, sizeof old, &old) == 0, "getaffinity: %s", strerror(errno));
    int first = -1, second = -1;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &old)) {
            if (first < 0)
                first = c;
            else if (second < 0)
                second = c;
        }
    CHECK(first >= 0, "no CPU in the affinity mask");
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    CHECK(sched_setaffinity(0, sizeof one, &one) == 0, "setaffinity: %s", strerror(errno));
    unsetenv("LOCAL_WORLD_SIZE");
    ch_cpu_budget b;
    ch_cpu_budget_get(&b);
    CHECK(b.cpus == 1 && b.affinity == 1, "one allowed CPU: cpus %u (affinity %u, online %u): %s",
          b.cpus, b.affinity, b.online, b.why);
    CHECK(b.online <= 1 || strstr(b.why, "affinity"), "reason: '%s'", b.why);
    setenv("LOCAL_WORLD_SIZE", "2", 1);
    ch_cpu_budget_get(&b);
    CHECK(b.cpus == 1 && b.local_world == 2, "1 CPU / 2 ranks: %u (never 0)", b.cpus);
    if (second >= 0) {
        cpu_set_t two;
        CPU_ZERO(&two);
        CPU_SET(first, &two);
        CPU_SET(second, &two);
        CHECK(sched_setaffinity(0, sizeof two, &two) == 0, "setaffinity");
        unsetenv("LOCAL_WORLD_SIZE");
        ch_cpu_budget_get(&b);
        uint32_t alone = b.cpus; /* 2, or 1 under a cgroup quota of one CPU */
        setenv("LOCAL_WORLD_SIZE", "2", 1);
        ch_cpu_budget_get(&b);
        CHECK(alone >= 1 && b.cpus == (alone / 2 ? alone / 2 : 1),
              "2 CPUs, LOCAL_WORLD_SIZE=2: %u (alone %u): %s", b.cpus, alone, b.why);
        CHECK(strstr(b.why, "LOCAL_WORLD_SIZE=2"), "reason: '%s'", b.why);
        setenv("LOCAL_WORLD_SIZE", "two", 1);
        ch_cpu_budget_get(&b);
        CHECK(b.cpus == alone && b.local_world == 0, "unparsable LOCAL_WORLD_SIZE used");
    }
    unsetenv("LOCAL_WORLD_SIZE");
    CHECK(sched_setaffinity(0, sizeof old, &old) == 0, "restore affinity");
    return 0;
}

UNIT_MAIN
