#include "core/util/lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The holder's own words: "pid N on host H since T: what (command)". */
static void describe_self(char *buf, size_t len, const char *what)
{
    char host[256] = "?", cmd[400] = "", when[32] = "?";
    gethostname(host, sizeof(host) - 1);
    FILE *f = fopen("/proc/self/cmdline", "rb");
    if (f) {
        size_t n = fread(cmd, 1, sizeof(cmd) - 1, f);
        fclose(f);
        cmd[n] = '\0';
        for (size_t i = 0; i + 1 < n; i++)
            if (cmd[i] == '\0')
                cmd[i] = ' ';
    }
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm))
        strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
    snprintf(buf, len, "pid %ld on host %s since %s: %s (%s)", (long)getpid(), host, when, what,
             cmd);
}

/* Whether fd is still the file at path (not removed or replaced by a
 * releasing holder between our open and our lock). */
static bool still_there(int fd, const char *path)
{
    struct stat a, b;
    return fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

int folder_lock_take(folder_lock *lk, const char *dir, const char *what, char *err, int err_len)
{
    lk->fd = -1;
    if (snprintf(lk->path, sizeof(lk->path), "%s/" FOLDER_LOCK_NAME, dir) >=
        (int)sizeof(lk->path)) {
        snprintf(err, (size_t)err_len, "%s: the path is too long", dir);
        return -ENAMETOOLONG;
    }
    for (int tries = 0; tries < 100; tries++) {
        int fd = open(lk->path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0) {
            int e = errno;
            snprintf(err, (size_t)err_len, "%s: cannot create the lock file: %s", lk->path,
                     strerror(e));
            return -e;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            char holder[1024] = "";
            ssize_t n = e == EWOULDBLOCK ? pread(fd, holder, sizeof(holder) - 1, 0) : -1;
            close(fd);
            if (e != EWOULDBLOCK) {
                snprintf(err, (size_t)err_len, "%s: cannot lock it: %s", lk->path, strerror(e));
                return -e;
            }
            holder[n > 0 ? n : 0] = '\0';
            holder[strcspn(holder, "\n")] = '\0';
            snprintf(err, (size_t)err_len, "%s is in use by another process (%s); wait for it "
                     "to end, or choose another folder", dir,
                     holder[0] ? holder : "it has not said who it is yet");
            return -EBUSY;
        }
        if (!still_there(fd, lk->path)) { /* released and removed meanwhile: again */
            close(fd);
            continue;
        }
        char me[1024];
        describe_self(me, sizeof(me), what);
        size_t len = strlen(me);
        me[len++] = '\n';
        if (ftruncate(fd, 0) != 0 || pwrite(fd, me, len, 0) != (ssize_t)len) {
            int e = errno;
            snprintf(err, (size_t)err_len, "%s: cannot write the lock file: %s", lk->path,
                     strerror(e ? e : EIO));
            unlink(lk->path);
            close(fd);
            return e ? -e : -EIO;
        }
        lk->fd = fd;
        return 0;
    }
    snprintf(err, (size_t)err_len, "%s: the lock file keeps changing under us", lk->path);
    return -EBUSY;
}

void folder_lock_release(folder_lock *lk)
{
    if (lk->fd < 0)
        return;
    /* remove, then unlock: a process that opened the file meanwhile finds
     * it gone once it holds the lock (still_there) and starts again */
    unlink(lk->path);
    close(lk->fd);
    lk->fd = -1;
}
