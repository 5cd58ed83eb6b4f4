/*
 * cuda_loader.h — the loader's device side, as libchute sees it: find and
 * dlopen libchute_cuda.so when a loader asks for device "cuda[:N]", and
 * forward the few moments that matter (a batch finished, a slot reused, a
 * batch viewed or released) to it.  No CUDA header or type here: libchute
 * never links CUDA (see cuda_module.h for why).
 */
#ifndef CHUTE_CUDA_LOADER_H
#define CHUTE_CUDA_LOADER_H

#include "../ops/ops.h"
#include "cuda_module.h"

typedef struct ch_cuda_loader ch_cuda_loader;

/* Parse a device string: NULL, "" or "cpu" -> -1 (host); "cuda" -> 0;
 * "cuda:N" -> N.  CHUTE_EINVAL with a message otherwise. */
int ch_cuda_parse_device(const char *device, int *out_dev, chute_error *err);

/* Find, dlopen and check the module (CHUTE_CUDA_MODULE, else beside the
 * binary that holds libchute, else the loader's search path) and the
 * driver.  `who` prefixes messages ("device cuda:0").  On success *out_mod
 * and *out_handle (dlclose it) are set.  CHUTE_EUNSUPPORTED, with the
 * reason, when there is no module, driver or device. */
int ch_cuda_module_load(const char *who, const ch_cuda_module **out_mod, void **out_handle,
                        chute_error *err);

/* Whether the module can load nvJPEG (no device needed): CHUTE_OK with
 * "nvJPEG found at PATH" in msg, else CHUTE_EUNSUPPORTED with "nvJPEG not
 * found ..." and the places tried. */
int ch_cuda_nvjpeg_find(const ch_cuda_module *m, char *msg, size_t msglen);

/* For a loader created with options->device: -1 (host) leaves *out NULL.
 * Otherwise loads the module and checks the device, remembers the output
 * the user asked for (dtype, layout, normalize: from *o and *spec), and
 * rewrites *o and *spec to uint8 NHWC, what the CPU workers then make. */
int ch_cuda_loader_open(chute_loader_options *o, ch_out_spec *spec, ch_cuda_loader **out,
                        chute_error *err);
/* Once the ring exists: pin it, allocate the device buffers. */
int ch_cuda_loader_attach(ch_cuda_loader *g, void *ring, size_t ring_len, uint32_t nslots,
                          size_t slot_stride, chute_error *err);
/* Hybrid decode: a worker about to decode the JPEG `enc` for the sample at
 * `dst` (in the ring) with `crop` asks whether the GPU takes it instead.
 * 1: its bytes were staged, skip the decode; 0: decode it on the CPU.
 * Any worker thread. */
int ch_cuda_loader_route(ch_cuda_loader *g, uint8_t *dst, int is_jpeg, uint32_t channels,
                         const uint8_t *enc, size_t len, const ch_crop *crop);
/* A batch's last sample is written (any worker thread). */
int ch_cuda_loader_submit(ch_cuda_loader *g, uint32_t slot, uint32_t count, chute_error *err);
/* Before workers write into a slot again: its last H2D copy is done. */
void ch_cuda_loader_host_wait(ch_cuda_loader *g, uint32_t slot);
/* Describe the device batch in *v (after the host description is in it). */
void ch_cuda_loader_view(const ch_cuda_loader *g, uint32_t slot, uint32_t count,
                         chute_batch_view *v);
int ch_cuda_loader_stream_wait(ch_cuda_loader *g, uint32_t slot, void *stream, chute_error *err);
/* The stream the next release of `slot` is ordered after (NULL: legacy). */
void ch_cuda_loader_set_release_stream(ch_cuda_loader *g, uint32_t slot, void *stream);
/* Release: record the slot's freed event on its release stream. */
void ch_cuda_loader_release(ch_cuda_loader *g, uint32_t slot);
/* Free everything; in a fork() child only the host memory (the CUDA
 * context belongs to the parent).  NULL ok. */
void ch_cuda_loader_close(ch_cuda_loader *g);

#endif
