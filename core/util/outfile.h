/* Writing the files a user names (docs/robustness.md, "outputs"):
 *
 * - every output goes to a temporary beside its target, is fsync'd and
 *   renamed into place only when whole, so a full disk, a crash or a
 *   signal leaves the file that was there before, never a cut one;
 * - an output that is one of the command's inputs, by path or by inode
 *   (st_dev, st_ino: a symlink, a hard link, "./x" for "x" are the same
 *   file), or one of a run folder's own files (ckpt.h5, run.h5, records/,
 *   tokenizer.model, .lock), is refused before anything is written;
 * - files that belong together (a tokenizer's model, tokens and labels)
 *   are committed as a set: every temporary written first, then renamed
 *   with SIGINT, SIGTERM and SIGHUP blocked, so that no stop signal falls
 *   between two renames.
 *
 * A target that is a character device or a FIFO (/dev/null, /dev/stdout)
 * is a stream: written in place, as there is nothing to replace. */
#ifndef MODE_CORE_UTIL_OUTFILE_H
#define MODE_CORE_UTIL_OUTFILE_H

#include "core/util/file.h"

#include <stdbool.h>
#include <stdio.h>

typedef struct out_file {
    char path[MODE_PATH_MAX];     /* the target (a symlink's target, resolved) */
    char tmp[MODE_PATH_MAX + 32]; /* the temporary beside it; "" when none */
    FILE *f;                      /* open on tmp (or the stream) until commit or abort */
    bool stream;                  /* a device or FIFO, written in place */
} out_file;

/* 0 when path may be written by a command that reads inputs[0..n) (NULL
 * entries skipped); else -EEXIST with err naming the rule: the output is
 * one of the inputs (which one, by path or the same inode), or one of a
 * run folder's own files, or a folder, or its folder is not there or
 * takes no new file.  "<path>.tmp", the temporary an HDF5 writer uses, is
 * checked the same way. */
int out_check(const char *path, const char *const *inputs, int n, char *err, int err_len);
/* The same without the rule of a run's own files: a run writing its own. */
int out_check_inputs(const char *path, const char *const *inputs, int n, char *err, int err_len);

/* Open a temporary beside path (out_check first) and a stream on it in
 * o->f; 0 or a negative errno with err. */
int out_open(out_file *o, const char *path, char *err, int err_len);
/* The same without a stream: o->tmp is the name a library writes (its
 * caller names it: "<prefix>.model" of SentencePiece); tmp must lie in
 * path's folder. */
int out_adopt(out_file *o, const char *path, const char *tmp, char *err, int err_len);

/* Flush, fsync and rename into place; on failure the temporary is removed
 * and err says what failed, and that the file there before is unchanged. */
int out_commit(out_file *o, char *err, int err_len);
/* Every file of set[0..n) whole, then all renamed with the stop signals
 * blocked; on a failure before the renames every temporary is removed and
 * nothing is replaced. */
int out_commit_set(out_file *set, int n, char *err, int err_len);
/* Remove the temporary (a stream is closed); safe on a zeroed out_file. */
void out_abort(out_file *o);

/* tmp (complete, closed) fsync'd and renamed over path, and the folder
 * fsync'd: the one commit of every writer, HDF5's included. */
int out_replace(const char *tmp, const char *path);

#endif
