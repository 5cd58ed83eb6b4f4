/*
 * hdf5_lock.c — how much libhdf5's global lock serialises reader threads,
 * measured directly (docs/DESIGN.md, "HDF5").
 *
 *   build/hdf5_lock FILE.h5 [DATASET=images] [READS_PER_THREAD=2000] [MAX_THREADS=ncpu]
 *
 * DATASET must be contiguous (bench/hdf5.py's raw.h5).  For T = 1, 2, 4 ...
 * up to MAX_THREADS, T threads each read READS_PER_THREAD random rows:
 *   h5dread  H5Dread of a one-row hyperslab (what h5py and any libhdf5
 *            reader does; a thread-safe build takes one process-wide lock
 *            per call)
 *   pread    pread of the same row at H5Dget_offset + i * row (what
 *            chute's hdf5 format does: no libhdf5 call per read)
 * and prints rows/s and the speed-up over T = 1 for each.  Run with the
 * file in the page cache so the lock, not the disk, is what is measured.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <hdf5.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct job {
    hid_t d;
    int fd;
    uint64_t off, row, n, reads;
    int rank;
    hsize_t dims[8];
    int use_pread;
    unsigned seed;
    int failed;
} job;

static void *worker(void *p)
{
    job *j = p;
    uint8_t *buf = malloc(j->row);
    hsize_t start[8] = {0}, count[8];
    for (int k = 0; k < j->rank; k++)
        count[k] = k ? j->dims[k] : 1;
    hid_t fs = H5Dget_space(j->d), ms = H5Screate_simple(j->rank, count, NULL);
    for (uint64_t r = 0; r < j->reads; r++) {
        uint64_t i = (uint64_t)rand_r(&j->seed) % j->n;
        if (j->use_pread) {
            if (pread(j->fd, buf, j->row, (off_t)(j->off + i * j->row)) != (ssize_t)j->row)
                j->failed = 1;
        } else {
            start[0] = i;
            H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
            if (H5Dread(j->d, H5T_NATIVE_UCHAR, ms, fs, H5P_DEFAULT, buf) < 0)
                j->failed = 1;
        }
    }
    H5Sclose(fs);
    H5Sclose(ms);
    free(buf);
    return NULL;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE.h5 [DATASET] [READS_PER_THREAD] [MAX_THREADS]\n", argv[0]);
        return 2;
    }
    const char *name = argc > 2 ? argv[2] : "images";
    uint64_t reads = argc > 3 ? strtoull(argv[3], NULL, 10) : 2000;
    long maxt = argc > 4 ? atol(argv[4]) : sysconf(_SC_NPROCESSORS_ONLN);
    hbool_t safe = 0;
    H5is_library_threadsafe(&safe);
    if (!safe) {
        fprintf(stderr, "libhdf5 is not thread-safe: concurrent H5Dread is not allowed at all\n");
        return 1;
    }
    hid_t f = H5Fopen(argv[1], H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = f < 0 ? -1 : H5Dopen2(f, name, H5P_DEFAULT);
    if (d < 0)
        return 1;
    job base = {.d = d, .reads = reads};
    hid_t sp = H5Dget_space(d);
    base.rank = H5Sget_simple_extent_ndims(sp);
    H5Sget_simple_extent_dims(sp, base.dims, NULL);
    H5Sclose(sp);
    hid_t ty = H5Dget_type(d);
    base.row = H5Tget_size(ty);
    H5Tclose(ty);
    for (int k = 1; k < base.rank; k++)
        base.row *= base.dims[k];
    base.n = base.dims[0];
    haddr_t off = H5Dget_offset(d);
    if (off == HADDR_UNDEF || base.n == 0) {
        fprintf(stderr, "%s: dataset %s is not contiguous (or empty)\n", argv[1], name);
        return 1;
    }
    base.off = off;
    base.fd = open(argv[1], O_RDONLY);
    printf("libhdf5 thread-safe build; %s:%s, %llu rows of %llu bytes, %llu reads/thread\n",
           argv[1], name, (unsigned long long)base.n, (unsigned long long)base.row,
           (unsigned long long)reads);
    printf("| threads | H5Dread rows/s | speed-up | pread rows/s | speed-up |\n|---|---|---|---|---|\n");
    double one[2] = {0, 0};
    for (long t = 1; t <= maxt; t = t < maxt && t * 2 > maxt ? maxt : t * 2) {
        double rate[2];
        for (int m = 0; m < 2; m++) {
            job *j = calloc((size_t)t, sizeof *j);
            pthread_t *th = calloc((size_t)t, sizeof *th);
            double t0 = now();
            for (long k = 0; k < t; k++) {
                j[k] = base;
                j[k].use_pread = m;
                j[k].seed = (unsigned)(k * 7919 + 1);
                pthread_create(&th[k], NULL, worker, &j[k]);
            }
            int failed = 0;
            for (long k = 0; k < t; k++) {
                pthread_join(th[k], NULL);
                failed |= j[k].failed;
            }
            rate[m] = (double)t * reads / (now() - t0);
            if (failed)
                fprintf(stderr, "a read failed\n");
            free(j);
            free(th);
        }
        if (t == 1)
            memcpy(one, rate, sizeof one);
        printf("| %ld | %.0f | %.2fx | %.0f | %.2fx |\n", t, rate[0], rate[0] / one[0], rate[1],
               rate[1] / one[1]);
        if (t == maxt)
            break;
    }
    close(base.fd);
    H5Dclose(d);
    H5Fclose(f);
    return 0;
}
