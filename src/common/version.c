/* version.c — runtime version and status names. */
#include "common.h"

#define CH_STR2(x) #x
#define CH_STR(x) CH_STR2(x)

const char *chute_version(void)
{
    return CH_STR(CHUTE_VERSION_MAJOR) "." CH_STR(CHUTE_VERSION_MINOR) "." CH_STR(
        CHUTE_VERSION_PATCH);
}

int chute_version_number(void) { return CHUTE_VERSION_NUMBER; }

/* Compile-time truth, so the CLI's `version` and Python's chute.features()
 * report what this binary can decode instead of guessing from the system. */
/* "cuda": the CUDA module was built beside this library (CMake option
 * CHUTE_CUDA); it is loaded only when a loader asks for a CUDA device. */
#ifdef CHUTE_HAVE_CUDA_MODULE
#define CH_FEATURE_CUDA " cuda"
#else
#define CH_FEATURE_CUDA ""
#endif
#ifdef CHUTE_HAVE_SPNG
#define CH_FEATURE_PNG " png"
#else
#define CH_FEATURE_PNG ""
#endif
/* "s3 http": built with libcurl (src/io/remote/). */
#ifdef CHUTE_HAVE_CURL
#define CH_FEATURE_CURL " s3 http"
#else
#define CH_FEATURE_CURL ""
#endif
/* "hdf5": the hdf5 format (libhdf5 found at build time). */
#ifdef CHUTE_HAVE_HDF5
#define CH_FEATURE_HDF5 " hdf5"
#else
#define CH_FEATURE_HDF5 ""
#endif
/* "kafka": kafka:// stream datasets (librdkafka found at build time). */
#ifdef CHUTE_HAVE_KAFKA
#define CH_FEATURE_KAFKA " kafka"
#else
#define CH_FEATURE_KAFKA ""
#endif
/* "libdeflate": gzip HDF5 chunks and PNG level-0 checksums go through
 * libdeflate; without it through zlib, the same bytes at ~1.6x the CPU
 * (docs/DESIGN.md, HDF5).  Listed so that a benchmark can say which of
 * the two its figures used (bench/hdf5.py prints it). */
#ifdef CHUTE_HAVE_LIBDEFLATE
#define CH_FEATURE_LIBDEFLATE " libdeflate"
#else
#define CH_FEATURE_LIBDEFLATE ""
#endif
/* "coco": COCO annotation JSON (libjansson found at build time). */
#ifdef CHUTE_HAVE_JANSSON
#define CH_FEATURE_COCO " coco"
#else
#define CH_FEATURE_COCO ""
#endif
/* "video": the video format (FFmpeg's libavformat/libavcodec/libswscale
 * found at build time). */
#ifdef CHUTE_HAVE_FFMPEG
#define CH_FEATURE_VIDEO " video"
#else
#define CH_FEATURE_VIDEO ""
#endif
const char *chute_features(void)
{
    return "jpeg" CH_FEATURE_PNG CH_FEATURE_CURL CH_FEATURE_CUDA CH_FEATURE_HDF5 CH_FEATURE_KAFKA
        CH_FEATURE_LIBDEFLATE CH_FEATURE_COCO CH_FEATURE_VIDEO;
}

const char *chute_status_name(int status)
{
    switch (status) {
    case CHUTE_OK: return "CHUTE_OK";
    case CHUTE_END: return "CHUTE_END";
    case CHUTE_EINVAL: return "CHUTE_EINVAL";
    case CHUTE_ENOMEM: return "CHUTE_ENOMEM";
    case CHUTE_EIO: return "CHUTE_EIO";
    case CHUTE_EFORMAT: return "CHUTE_EFORMAT";
    case CHUTE_ECORRUPT: return "CHUTE_ECORRUPT";
    case CHUTE_ELIMIT: return "CHUTE_ELIMIT";
    case CHUTE_ENOTFOUND: return "CHUTE_ENOTFOUND";
    case CHUTE_EBUSY: return "CHUTE_EBUSY";
    case CHUTE_EUNSUPPORTED: return "CHUTE_EUNSUPPORTED";
    case CHUTE_EINTERRUPTED: return "CHUTE_EINTERRUPTED";
    default: return "CHUTE_E?";
    }
}
