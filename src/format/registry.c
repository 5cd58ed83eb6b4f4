/*
 * registry.c — the one list of formats.
 *
 * Adding a format is one file that defines a ch_format_ops (format.h says
 * what each op must do) and one line here.  dataset.c probes the entries
 * in this order and opens the one most sure of the path, or the one named
 * in chute_dataset_options.format; nothing else in the library asks which
 * format a dataset has.  Order matters only for listing (messages, help)
 * and never for which format wins: ties at the top are an error, not a
 * coin toss.
 */
#include "format.h"

#include <string.h>

const ch_format_ops *const ch_formats[] = {
    &ch_format_tree,      /* ImageFolder tree (tree.c) */
    &ch_format_shards,    /* chute shard directory (shard.c, docs/FORMAT.md) */
    &ch_format_tfrecord,  /* TFRecord files of tf.train.Example (fmt_tfrecord.c) */
    &ch_format_wds,       /* WebDataset tar shards (fmt_wds.c) */
    &ch_format_npy,       /* NumPy: one large .npy, or a directory of .npy files (fmt_npy.c) */
    &ch_format_csv,       /* CSV rows as typed scalar fields (fmt_csv.c, csv.c) */
#ifdef CHUTE_HAVE_HDF5
    &ch_format_hdf5,      /* HDF5 file via libhdf5 at open only (fmt_hdf5.c) */
#endif
    &ch_format_wav,       /* WAV audio: a tree or directory of .wav files (fmt_wav.c, wav.c) */
#ifdef CHUTE_HAVE_FFMPEG
    &ch_format_video,     /* video clips via libavformat/libavcodec (fmt_video.c, vidindex.c) */
#endif
    NULL,
};

const ch_format_ops *ch_format_find(const char *name)
{
    for (size_t k = 0; name && ch_formats[k]; k++)
        if (strcmp(ch_formats[k]->name, name) == 0)
            return ch_formats[k];
    return NULL;
}

const char *chute_format_name(uint32_t k)
{
    for (uint32_t i = 0; ch_formats[i]; i++)
        if (i == k)
            return ch_formats[i]->name;
    return NULL;
}
