/*
 * parquet.c — `chute inspect` and `chute bench` of Parquet: handed to the
 * Python package.
 *
 * Why a hand-off and not a reader here: a Parquet reader is a large
 * library (Thrift footers, pages, five encodings, four codecs) and libchute
 * deliberately has none — it takes Arrow through the C Stream Interface
 * from any producer, and for Parquet that producer is pyarrow, which the
 * Python package drives row group by row group (python/chute/arrow.py).
 * Linking libarrow/libparquet into the CLI, or embedding libpython, would
 * make a C tool that builds with no Python depend on it.  So when SOURCE is
 * a .parquet file, a directory of them, or --format parquet/arrow, the CLI
 * replaces itself (exec, so exit codes and signals pass through) with
 * `$CHUTE_PYTHON -c <boot> inspect|bench ARGS...`, which runs
 * chute.cli.main: the same option table (both sides build their flags from
 * src/common/ option tables), the same output shape.  The boot text turns a missing
 * package or pyarrow into one clear line instead of a traceback.
 * CHUTE_PYTHON defaults to python3; the wheel's `chute` entry point sets it
 * to its own interpreter.  Never: guess at a Parquet file's content here.
 */
#define _GNU_SOURCE
#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int ends_with(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

int cli_is_parquet(const char *src, const char *format)
{
    if (format)
        return strcmp(format, "parquet") == 0 || strcmp(format, "arrow") == 0;
    struct stat st;
    if (!src || strstr(src, "://") || stat(src, &st) != 0)
        return 0;
    if (S_ISREG(st.st_mode))
        return ends_with(src, ".parquet");
    if (!S_ISDIR(st.st_mode))
        return 0;
    /* a directory whose regular entries are .parquet files (another
     * format's directory has none) */
    DIR *d = opendir(src);
    if (!d)
        return 0;
    int pq = 0, other = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (ends_with(e->d_name, ".parquet"))
            pq++;
        else if (!ends_with(e->d_name, ".chuteidx"))
            other++;
    }
    closedir(d);
    return pq > 0 && other == 0;
}

/* The program python runs (argv: cmd, source, then the command's own
 * arguments): import chute.cli or say clearly why not. */
static const char boot[] =
    "import sys\n"
    "try:\n"
    "    import chute.cli as c\n"
    "    c.need_pyarrow()\n"
    "except ImportError as e:\n"
    "    sys.stderr.write('chute %s: %s: Parquet is read through the chute Python package and "
    "pyarrow, and %s cannot import them (%s); pip install chute pyarrow, or set CHUTE_PYTHON to "
    "a Python that has both\\n' % (sys.argv[1], sys.argv[2], sys.executable, e))\n"
    "    sys.exit(2)\n"
    "sys.exit(c.main([sys.argv[1]] + sys.argv[3:]))\n";

int cli_parquet_exec(const char *cmd, const char *src, int argc, char **argv)
{
    const char *py = getenv("CHUTE_PYTHON");
    if (!py || !*py)
        py = "python3";
    char **args = calloc((size_t)argc + 6, sizeof *args);
    if (!args) {
        fprintf(stderr, "chute %s: out of memory\n", cmd);
        return 1;
    }
    int k = 0;
    args[k++] = (char *)py;
    args[k++] = "-c";
    args[k++] = (char *)boot;
    args[k++] = (char *)cmd;
    args[k++] = (char *)src;
    for (int i = 0; i < argc; i++)
        args[k++] = argv[i];
    args[k] = NULL;
    fflush(stdout);
    fflush(stderr);
    execvp(py, args);
    int e = errno;
    fprintf(stderr, "chute %s: %s: Parquet is read through the chute Python package and "
            "pyarrow, but %s cannot be run (%s); set CHUTE_PYTHON to a Python that has both\n",
            cmd, src, py, strerror(e));
    free(args);
    return 127;
}
