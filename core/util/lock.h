/* A folder belongs to one writer at a time: a run folder to the run that
 * trains into it, a sweep's out folder to its sweep.  The lock is an
 * flock() on DIR/.lock, taken before anything is written there, so a
 * second writer is refused at once with a message naming the holder (pid,
 * host, command, since when: what the holder wrote into the file).  The
 * kernel drops a dead process's lock, so a lock left by a crash or a kill
 * is stale by construction and the next writer takes it; the file itself
 * is removed when the lock is released.  flock() works across the nodes
 * of a cluster on NFSv4 (Linux maps it to byte-range locks there). */
#ifndef MODE_CORE_UTIL_LOCK_H
#define MODE_CORE_UTIL_LOCK_H

#include "core/util/file.h"

#define FOLDER_LOCK_NAME ".lock"

typedef struct folder_lock {
    int fd; /* -1: not held */
    char path[MODE_PATH_MAX];
} folder_lock;

/* Take dir's lock (dir must exist); what says what holds it ("training",
 * "sweep").  0, or -EBUSY with err naming the holder, or another negative
 * errno with err. */
int folder_lock_take(folder_lock *lk, const char *dir, const char *what, char *err, int err_len);
/* Release a held lock (and remove its file); a lock never taken (fd -1,
 * as a zeroed-then-initialised one is) is left alone. */
void folder_lock_release(folder_lock *lk);
/* A lock not held: { .fd = -1 }. */
static inline folder_lock folder_lock_none(void)
{
    folder_lock lk = { .fd = -1 };
    return lk;
}

#endif
