/* Opening the files a user names (configs, corpora, checkpoints, run
 * files), and checking what is written to standard output.
 *
 * An input path is opened without blocking and refused unless it is a
 * regular file: open() of a FIFO blocks until a writer appears, and a
 * device or a directory is no corpus (FACTS.md; docs/robustness.md). */
#ifndef MODE_CORE_UTIL_FILE_H
#define MODE_CORE_UTIL_FILE_H

#include <stdio.h>

/* The longest path the programs build (a run folder and a file in it). */
#define MODE_PATH_MAX 4096

/* A descriptor of path opened read-only (O_CLOEXEC), or a negative errno
 * with err naming the file: "not a regular file (a FIFO)" and the like.
 * The descriptor is blocking again when returned. */
int file_open_regular(const char *path, char *err, int err_len);
/* The same as a stdio stream ("r" or "rb"), or NULL with err. */
FILE *file_fopen_regular(const char *path, const char *mode, char *err, int err_len);

/* The whole of the regular file at path, read through file_open_regular:
 * malloc'd into *out with a NUL after its *n bytes; 0, or a negative errno
 * with err naming the file. */
int file_read_all(const char *path, char **out, size_t *n, char *err, int err_len);

/* mkdir -p: dir and its parents; 0 or a negative errno. */
int file_make_dirs(const char *dir);

/* Flush and close standard output and report whether everything written to
 * it arrived: 0, or a negative errno with err saying what failed ("No space
 * left on device", a closed pipe).  Programs call it last, so that output
 * lost on a full disk or a closed pipe is an error, never a silent exit 0. */
int file_close_stdout(char *err, int err_len);

#endif
