/* realpath */
#define _DEFAULT_SOURCE
#include "core/util/outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The names a run folder holds (core/train/folder.c, core/io/runfile.h). */
static const char *const run_names[] = { "ckpt.h5", "run.h5", "records", "tokenizer.model",
                                         ".lock", "ckpt.h5.tmp", "run.h5.tmp" };
#define N_RUN_NAMES ((int)(sizeof(run_names) / sizeof(run_names[0])))

static void split(const char *path, char *dir, char *base, size_t len)
{
    char a[MODE_PATH_MAX], b[MODE_PATH_MAX];
    snprintf(a, sizeof(a), "%s", path);
    snprintf(b, sizeof(b), "%s", path);
    snprintf(dir, len, "%s", dirname(a));
    snprintf(base, len, "%s", basename(b));
}

/* path as one spelling: resolved when it exists, else its folder resolved
 * and its name; the path itself when neither resolves. */
static void canonical(const char *path, char *out, size_t len)
{
    char r[PATH_MAX], dir[MODE_PATH_MAX], base[MODE_PATH_MAX];
    if (realpath(path, r)) {
        snprintf(out, len, "%s", r);
        return;
    }
    split(path, dir, base, sizeof(dir));
    if (!realpath(dir, r) || snprintf(out, len, "%s/%s", r, base) >= (int)len)
        snprintf(out, len, "%s", path);
}

static bool exists_in(const char *dir, const char *name)
{
    char p[2 * MODE_PATH_MAX];
    struct stat st;
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    return stat(p, &st) == 0;
}

/* Whether dir holds a run: its checkpoint, run file or record pieces. */
static bool is_run_folder(const char *dir)
{
    return exists_in(dir, "ckpt.h5") || exists_in(dir, "run.h5") || exists_in(dir, "records");
}

/* The run folder that path is one of the files of, into dir; false when
 * none. */
static bool run_file_of(const char *path, char *dir, size_t len)
{
    char c[MODE_PATH_MAX], d[MODE_PATH_MAX], base[MODE_PATH_MAX];
    canonical(path, c, sizeof(c));
    split(c, d, base, sizeof(d));
    for (int i = 0; i < N_RUN_NAMES; i++)
        if (!strcmp(base, run_names[i]) && is_run_folder(d)) {
            snprintf(dir, len, "%s", d);
            return true;
        }
    /* a piece of the records: DIR/records/step_N.h5 */
    char up[MODE_PATH_MAX], rec[MODE_PATH_MAX];
    split(d, up, rec, sizeof(up));
    if (!strcmp(rec, "records") && is_run_folder(up)) {
        snprintf(dir, len, "%s", up);
        return true;
    }
    return false;
}

/* One spelling of path against the inputs: 0, or -EEXIST with err. */
static int check_one(const char *path, const char *shown, const char *const *inputs, int n,
                     bool run_rule, char *err, int err_len)
{
    struct stat so, si;
    bool have = stat(path, &so) == 0;
    if (have && S_ISDIR(so.st_mode)) {
        snprintf(err, (size_t)err_len, "%s: refused as an output: it is a folder", shown);
        return -EISDIR;
    }
    char co[MODE_PATH_MAX], ci[MODE_PATH_MAX], dir[MODE_PATH_MAX];
    canonical(path, co, sizeof(co));
    for (int i = 0; i < n; i++) {
        if (!inputs[i] || !inputs[i][0])
            continue;
        canonical(inputs[i], ci, sizeof(ci));
        bool same_inode = have && stat(inputs[i], &si) == 0 && si.st_dev == so.st_dev &&
                          si.st_ino == so.st_ino;
        if (same_inode || !strcmp(co, ci)) {
            snprintf(err, (size_t)err_len, "%s: refused as an output: it is %s%s, one of this "
                     "command's inputs; an output never replaces an input (choose another "
                     "name)", shown, strcmp(shown, inputs[i]) ? "the same file as " : "",
                     inputs[i]);
            return -EEXIST;
        }
    }
    if (run_rule && run_file_of(path, dir, sizeof(dir))) {
        snprintf(err, (size_t)err_len, "%s: refused as an output: it is one of the run's own "
                 "files in %s (ckpt.h5, run.h5, records/, tokenizer.model); an output never "
                 "replaces a run's files (choose another name)", shown, dir);
        return -EEXIST;
    }
    return 0;
}

static int check(const char *path, const char *const *inputs, int n, bool run_rule, char *err,
                 int err_len)
{
    char tmp[MODE_PATH_MAX + 8];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp)) {
        snprintf(err, (size_t)err_len, "%s: path too long", path);
        return -ENAMETOOLONG;
    }
    int rc = check_one(path, path, inputs, n, run_rule, err, err_len);
    /* a command's output (not a run's own files, whose folder the run makes
     * later): its folder is there and takes a new file, checked before the
     * work whose result it would hold */
    char d[MODE_PATH_MAX], base[MODE_PATH_MAX];
    struct stat sd;
    split(path, d, base, sizeof(d));
    if (!rc && run_rule && (stat(d, &sd) || !S_ISDIR(sd.st_mode))) {
        snprintf(err, (size_t)err_len, "%s: refused as an output: its folder %s is not there",
                 path, d);
        rc = -ENOENT;
    } else if (!rc && run_rule && access(d, W_OK | X_OK)) {
        snprintf(err, (size_t)err_len, "%s: refused as an output: its folder %s takes no new "
                 "file (%s)", path, d, strerror(errno));
        rc = -EACCES;
    }
    if (!rc) {
        /* an HDF5 writer's temporary: removed before it is written */
        struct stat st;
        if (!lstat(tmp, &st))
            rc = check_one(tmp, tmp, inputs, n, run_rule, err, err_len);
    }
    return rc;
}

int out_check(const char *path, const char *const *inputs, int n, char *err, int err_len)
{
    return check(path, inputs, n, true, err, err_len);
}

int out_check_inputs(const char *path, const char *const *inputs, int n, char *err, int err_len)
{
    return check(path, inputs, n, false, err, err_len);
}

/* The target's real path: a symlink's target is replaced, not the link. */
static int set_target(out_file *o, const char *path, char *err, int err_len)
{
    memset(o, 0, sizeof(*o));
    struct stat st;
    char r[PATH_MAX];
    const char *use = path;
    if (!lstat(path, &st) && S_ISLNK(st.st_mode) && realpath(path, r))
        use = r;
    if (snprintf(o->path, sizeof(o->path), "%s", use) >= (int)sizeof(o->path)) {
        snprintf(err, (size_t)err_len, "%s: path too long", path);
        return -ENAMETOOLONG;
    }
    return 0;
}

int out_open(out_file *o, const char *path, char *err, int err_len)
{
    int rc = set_target(o, path, err, err_len);
    if (rc)
        return rc;
    struct stat st;
    bool have = stat(o->path, &st) == 0;
    if (have && S_ISDIR(st.st_mode)) {
        snprintf(err, (size_t)err_len, "%s: refused as an output: it is a folder", path);
        return -EISDIR;
    }
    if (have && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))) {
        /* nothing to replace; O_NONBLOCK: a FIFO without a reader fails
         * at once instead of waiting for one */
        int fd = open(o->path, O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
        int fl = fd >= 0 ? fcntl(fd, F_GETFL) : -1;
        if (fd < 0 || fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0 ||
            !(o->f = fdopen(fd, "w"))) {
            rc = -errno;
            if (fd >= 0)
                close(fd);
            snprintf(err, (size_t)err_len, "%s: cannot write it (%s)", path, strerror(-rc));
            return rc;
        }
        o->stream = true;
        return 0;
    }
    /* a new name beside the target, created with O_EXCL (never an existing
     * file, nor followed were it a link) and the mode an ordinary create
     * gives (0666 less the umask, applied by the kernel) */
    int fd = -1;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    for (int i = 0; fd < 0 && i < 100; i++) {
        unsigned long r = (unsigned long)ts.tv_nsec * 2654435761ul + (unsigned long)i * 40503ul;
        if (snprintf(o->tmp, sizeof(o->tmp), "%s.%ld-%06lx.tmp", o->path, (long)getpid(),
                     r & 0xfffffful) >= (int)sizeof(o->tmp)) {
            snprintf(err, (size_t)err_len, "%s: path too long", path);
            o->tmp[0] = '\0';
            return -ENAMETOOLONG;
        }
        fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0) {
        rc = errno ? -errno : -EEXIST;
        snprintf(err, (size_t)err_len, "%s: cannot create a temporary beside it (%s)", path,
                 strerror(-rc));
        o->tmp[0] = '\0';
        return rc;
    }
    if (have) /* the old file's mode */
        fchmod(fd, st.st_mode & 07777);
    o->f = fdopen(fd, "w");
    if (!o->f) {
        rc = -errno;
        close(fd);
        unlink(o->tmp);
        o->tmp[0] = '\0';
        snprintf(err, (size_t)err_len, "%s: cannot open a stream (%s)", path, strerror(-rc));
        return rc;
    }
    return 0;
}

int out_adopt(out_file *o, const char *path, const char *tmp, char *err, int err_len)
{
    int rc = set_target(o, path, err, err_len);
    if (!rc && snprintf(o->tmp, sizeof(o->tmp), "%s", tmp) >= (int)sizeof(o->tmp)) {
        snprintf(err, (size_t)err_len, "%s: path too long", tmp);
        o->tmp[0] = '\0';
        rc = -ENAMETOOLONG;
    }
    return rc;
}

static void fsync_folder(const char *path)
{
    char dir[MODE_PATH_MAX], base[MODE_PATH_MAX];
    split(path, dir, base, sizeof(dir));
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
}

/* The bytes on disk before the rename makes them the file. */
static int sync_path(const char *tmp)
{
    int fd = open(tmp, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) ? -errno : 0;
    close(fd);
    return rc;
}

int out_replace(const char *tmp, const char *path)
{
    int rc = sync_path(tmp);
    if (rc)
        return rc;
    if (rename(tmp, path))
        return -errno;
    /* the rename on disk before the file is called written */
    fsync_folder(path);
    return 0;
}

/* o's stream flushed, fsync'd and closed (o->f NULL after); 0 or -errno. */
static int finish_stream(out_file *o)
{
    if (!o->f)
        return o->tmp[0] ? sync_path(o->tmp) : 0;
    errno = 0;
    int rc = fflush(o->f) || ferror(o->f) ? (errno ? -errno : -EIO) : 0;
    if (!rc && !o->stream && fsync(fileno(o->f)))
        rc = -errno;
    /* a close can still fail (NFS reports a full disk there) */
    if (fclose(o->f) && !rc)
        rc = errno ? -errno : -EIO;
    o->f = NULL;
    return rc;
}

static void fail_msg(const out_file *o, int rc, char *err, int err_len)
{
    if (o->stream)
        snprintf(err, (size_t)err_len, "%s: writing it failed (%s)", o->path, strerror(-rc));
    else
        snprintf(err, (size_t)err_len, "%s: writing it failed (%s); the file there before, if "
                 "any, is unchanged", o->path, strerror(-rc));
}

int out_commit_set(out_file *set, int n, char *err, int err_len)
{
    int rc = 0, bad = -1;
    for (int i = 0; i < n && !rc; i++)
        if ((rc = finish_stream(&set[i])))
            bad = i;
    if (rc) {
        fail_msg(&set[bad], rc, err, err_len);
        for (int i = 0; i < n; i++)
            out_abort(&set[i]);
        return rc;
    }
    sigset_t stop, old;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGHUP);
    sigprocmask(SIG_BLOCK, &stop, &old);
    int done = 0;
    for (int i = 0; i < n && !rc; i++) {
        if (set[i].stream || !set[i].tmp[0])
            continue;
        if (rename(set[i].tmp, set[i].path)) {
            rc = -errno;
            bad = i;
        } else {
            set[i].tmp[0] = '\0';
            done++;
        }
    }
    for (int i = 0; i < n; i++)
        if (!set[i].stream)
            fsync_folder(set[i].path);
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        if (done)
            snprintf(err, (size_t)err_len, "%s: renaming it into place failed (%s) after %d "
                     "other file(s) of its set were replaced: the set is mixed", set[bad].path,
                     strerror(-rc), done);
        else
            fail_msg(&set[bad], rc, err, err_len);
        for (int i = 0; i < n; i++)
            out_abort(&set[i]);
    }
    return rc;
}

int out_commit(out_file *o, char *err, int err_len)
{
    return out_commit_set(o, 1, err, err_len);
}

void out_abort(out_file *o)
{
    if (o->f)
        fclose(o->f);
    o->f = NULL;
    if (!o->stream && o->tmp[0])
        unlink(o->tmp);
    o->tmp[0] = '\0';
}
