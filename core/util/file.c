#include "core/util/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *type_name(mode_t m)
{
    return S_ISFIFO(m) ? "a FIFO" : S_ISDIR(m) ? "a directory" : S_ISCHR(m) ? "a character device"
           : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "not a plain file";
}

static int not_regular(const char *path, mode_t m, char *err, int err_len)
{
    if (err && err_len > 0)
        snprintf(err, (size_t)err_len, "%s: not a regular file (%s)", path, type_name(m));
    return S_ISDIR(m) ? -EISDIR : -EINVAL;
}

int file_open_regular(const char *path, char *err, int err_len)
{
    /* O_NONBLOCK: a FIFO's open returns at once instead of waiting for a
     * writer; the fstat below then refuses it */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        if (err && err_len > 0)
            snprintf(err, (size_t)err_len, "%s: cannot open it (%s)", path, strerror(e));
        return e ? -e : -EIO;
    }
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        if (err && err_len > 0)
            snprintf(err, (size_t)err_len, "%s: cannot stat (%s)", path, strerror(-rc));
    } else if (!S_ISREG(st.st_mode)) {
        rc = not_regular(path, st.st_mode, err, err_len);
    } else {
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
            rc = -errno;
            if (err && err_len > 0)
                snprintf(err, (size_t)err_len, "%s: cannot open it (%s)", path, strerror(-rc));
        }
    }
    if (rc) {
        close(fd);
        return rc;
    }
    return fd;
}

FILE *file_fopen_regular(const char *path, const char *mode, char *err, int err_len)
{
    int fd = file_open_regular(path, err, err_len);
    if (fd < 0) {
        errno = -fd;
        return NULL;
    }
    FILE *f = fdopen(fd, mode);
    if (!f) {
        int e = errno;
        if (err && err_len > 0)
            snprintf(err, (size_t)err_len, "%s: cannot open it (%s)", path, strerror(e));
        close(fd);
        errno = e;
    }
    return f;
}

int file_read_all(const char *path, char **out, size_t *n, char *err, int err_len)
{
    *out = NULL;
    *n = 0;
    int fd = file_open_regular(path, err, err_len);
    if (fd < 0)
        return fd;
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap + 1);
    int rc = b ? 0 : -ENOMEM;
    while (!rc) {
        if (len == cap) {
            char *nb = cap > SIZE_MAX / 4 ? NULL : realloc(b, cap * 2 + 1);
            if (!nb) {
                rc = -ENOMEM;
                break;
            }
            b = nb;
            cap *= 2;
        }
        ssize_t got = read(fd, b + len, cap - len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            rc = -errno;
        else if (got == 0)
            break;
        else
            len += (size_t)got;
    }
    close(fd);
    if (rc) {
        free(b);
        if (err && err_len > 0)
            snprintf(err, (size_t)err_len, "%s: %s", path,
                     rc == -ENOMEM ? "out of memory" : strerror(-rc));
        return rc;
    }
    b[len] = '\0';
    *out = b;
    *n = len;
    return 0;
}

int file_make_dirs(const char *dir)
{
    char buf[MODE_PATH_MAX];
    if (snprintf(buf, sizeof(buf), "%s", dir) >= (int)sizeof(buf))
        return -ENAMETOOLONG;
    for (char *p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0777) && errno != EEXIST)
                return -errno;
            *p = '/';
        }
    }
    if (mkdir(buf, 0777) && errno != EEXIST)
        return -errno;
    return 0;
}

int file_close_stdout(char *err, int err_len)
{
    errno = 0;
    bool bad = fflush(stdout) != 0 || ferror(stdout);
    int e = errno;
    /* a close can still fail (NFS reports a full disk there) */
    if (fclose(stdout) != 0 && !bad) {
        bad = true;
        e = errno;
    }
    if (!bad)
        return 0;
    if (err && err_len > 0)
        snprintf(err, (size_t)err_len, "writing the standard output failed (%s)",
                 e ? strerror(e) : "a write error");
    return e ? -e : -EIO;
}
