/* TensorBoard event files (tfevents.h): records framed with masked
 * CRC-32C, Event and Summary protobufs encoded by hand (only the fields
 * tfevents.h lists). */
#include "core/io/tfevents.h"

#include "core/util/file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct tfevents {
    int fd;
    char path[MODE_PATH_MAX];
    uint8_t *summary; /* the pending Summary's encoded values */
    size_t n, cap;
};

/* ---- CRC-32C ---------------------------------------------------------------- */

/* Castagnoli's polynomial, bit-reflected (as TensorFlow's crc32c). */
#define CRC32C_POLY 0x82f63b78u

uint32_t tfevents_crc32c(const void *p, size_t n)
{
    static uint32_t table[256];
    static bool ready; /* the same table whichever thread builds it */
    if (!ready) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? (c >> 1) ^ CRC32C_POLY : c >> 1;
            table[i] = c;
        }
        ready = true;
    }
    const uint8_t *b = p;
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < n; i++)
        crc = table[(crc ^ b[i]) & 0xff] ^ (crc >> 8);
    return crc ^ 0xffffffffu;
}

uint32_t tfevents_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* ---- protobuf encoding ----------------------------------------------------- */

enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_BYTES = 2, WIRE_FIXED32 = 5 };
/* Event's and Summary.Value's fields */
enum { EVENT_WALL_TIME = 1, EVENT_STEP = 2, EVENT_FILE_VERSION = 3, EVENT_SUMMARY = 5 };
enum { SUMMARY_VALUE = 1, VALUE_TAG = 1, VALUE_SIMPLE = 2 };

static size_t put_varint(uint8_t *b, uint64_t v)
{
    size_t n = 0;
    do {
        b[n++] = (uint8_t)((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return n;
}

static size_t put_le(uint8_t *b, uint64_t v, int bytes)
{
    for (int k = 0; k < bytes; k++)
        b[k] = (uint8_t)(v >> (8 * k));
    return (size_t)bytes;
}

static size_t put_key(uint8_t *b, int field, int wire)
{
    return put_varint(b, (uint64_t)field << 3 | (uint64_t)wire);
}

/* A length-delimited field: key, length, bytes. */
static size_t put_bytes(uint8_t *b, int field, const void *p, size_t n)
{
    size_t at = put_key(b, field, WIRE_BYTES);
    at += put_varint(b + at, n);
    memcpy(b + at, p, n);
    return at + n;
}

static int reserve(tfevents *w, size_t more)
{
    if (w->n + more <= w->cap)
        return 0;
    size_t cap = w->cap ? w->cap : 256;
    while (cap < w->n + more)
        cap *= 2;
    uint8_t *b = realloc(w->summary, cap);
    if (!b)
        return -ENOMEM;
    w->summary = b;
    w->cap = cap;
    return 0;
}

int tfevents_add(tfevents *w, const char *tag, double value)
{
    if (!isfinite(value))
        return 0;
    size_t len = strlen(tag);
    /* Summary.value { tag, simple_value }: at most 10 + 10 + len + 1 + 4 */
    uint8_t head[16], val[32];
    if (reserve(w, len + 64))
        return -ENOMEM;
    size_t nv = put_key(val, VALUE_SIMPLE, WIRE_FIXED32);
    float f = (float)value;
    uint32_t bits;
    memcpy(&bits, &f, sizeof(bits));
    nv += put_le(val + nv, bits, 4);
    size_t inner = 1 + (size_t)put_varint(head, len) + len + nv; /* tag's key is one byte */
    size_t at = w->n;
    at += put_key(w->summary + at, SUMMARY_VALUE, WIRE_BYTES);
    at += put_varint(w->summary + at, inner);
    at += put_bytes(w->summary + at, VALUE_TAG, tag, len);
    memcpy(w->summary + at, val, nv);
    w->n = at + nv;
    return 0;
}

/* ---- records ---------------------------------------------------------------- */

static double wall_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Event { wall_time, step, and body (already a field: file_version or
 * summary) } framed as a record, appended with one write(). */
static int write_event(tfevents *w, long step, int field, const void *body, size_t n, char *err,
                       int err_len)
{
    size_t cap = 12 + 32 + 10 + n + 4;
    uint8_t *rec = malloc(cap);
    if (!rec) {
        snprintf(err, (size_t)err_len, "%s: out of memory for an event of %zu bytes", w->path, n);
        return -ENOMEM;
    }
    uint8_t *e = rec + 12; /* the payload */
    size_t at = put_key(e, EVENT_WALL_TIME, WIRE_FIXED64);
    double t = wall_time();
    uint64_t bits;
    memcpy(&bits, &t, sizeof(bits));
    at += put_le(e + at, bits, 8);
    if (step != 0) { /* proto3: a zero is left out */
        at += put_key(e + at, EVENT_STEP, WIRE_VARINT);
        at += put_varint(e + at, (uint64_t)step);
    }
    at += put_bytes(e + at, field, body, n);
    put_le(rec, at, 8);
    put_le(rec + 8, tfevents_mask(tfevents_crc32c(rec, 8)), 4);
    put_le(e + at, tfevents_mask(tfevents_crc32c(e, at)), 4);
    size_t total = 12 + at + 4, done = 0;
    int rc = 0;
    while (done < total) {
        ssize_t k = write(w->fd, rec + done, total - done);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            rc = k < 0 ? -errno : -EIO;
            snprintf(err, (size_t)err_len, "%s: writing the event of step %ld failed (%s)",
                     w->path, step, strerror(-rc));
            break;
        }
        done += (size_t)k;
    }
    free(rec);
    return rc;
}

int tfevents_write(tfevents *w, long step, char *err, int err_len)
{
    if (!w->n)
        return 0;
    int rc = write_event(w, step, EVENT_SUMMARY, w->summary, w->n, err, err_len);
    w->n = 0;
    return rc;
}

int tfevents_open(tfevents **out, const char *dir, char *err, int err_len)
{
    *out = NULL;
    tfevents *w = calloc(1, sizeof(*w));
    if (!w) {
        snprintf(err, (size_t)err_len, "%s: out of memory for the event file", dir);
        return -ENOMEM;
    }
    char host[256] = "";
    if (gethostname(host, sizeof(host) - 1) || !host[0])
        snprintf(host, sizeof(host), "localhost");
    long now = (long)time(NULL);
    w->fd = -1;
    int rc = 0;
    for (int k = 0; w->fd < 0 && k < 100; k++) {
        int len = k ? snprintf(w->path, sizeof(w->path), "%s/" TFEVENTS_PREFIX "%ld.%s.%d", dir,
                               now, host, k)
                    : snprintf(w->path, sizeof(w->path), "%s/" TFEVENTS_PREFIX "%ld.%s", dir,
                               now, host);
        if (len >= (int)sizeof(w->path)) {
            rc = -ENAMETOOLONG;
            break;
        }
        w->fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC | O_NOFOLLOW,
                     0644);
        rc = w->fd < 0 ? -errno : 0;
        if (rc && rc != -EEXIST)
            break;
    }
    if (!rc)
        rc = write_event(w, 0, EVENT_FILE_VERSION, TFEVENTS_FILE_VERSION,
                         strlen(TFEVENTS_FILE_VERSION), err, err_len);
    else
        snprintf(err, (size_t)err_len, "%s: cannot create the TensorBoard event file (%s)",
                 w->path, strerror(-rc));
    if (rc) {
        tfevents_close(&w);
        return rc;
    }
    *out = w;
    return 0;
}

void tfevents_close(tfevents **w)
{
    if (!*w)
        return;
    if ((*w)->fd >= 0)
        close((*w)->fd);
    free((*w)->summary);
    free(*w);
    *w = NULL;
}

const char *tfevents_path(const tfevents *w)
{
    return w->path;
}

/* ---- resume ------------------------------------------------------------------ */

static uint64_t get_le(const uint8_t *b, int bytes)
{
    uint64_t v = 0;
    for (int k = 0; k < bytes; k++)
        v |= (uint64_t)b[k] << (8 * k);
    return v;
}

/* A varint at p[*at] (which moves past it); false when it runs past n. */
static bool get_varint(const uint8_t *p, size_t n, size_t *at, uint64_t *v)
{
    *v = 0;
    for (int s = 0; s < 64; s += 7) {
        if (*at >= n)
            return false;
        uint8_t b = p[(*at)++];
        *v |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80))
            return true;
    }
    return false;
}

/* The step of an Event payload (0 when absent); false when it does not
 * parse as one. */
static bool event_step(const uint8_t *p, size_t n, long *step)
{
    *step = 0;
    for (size_t at = 0; at < n;) {
        uint64_t key, v;
        if (!get_varint(p, n, &at, &key))
            return false;
        switch (key & 7) {
        case WIRE_VARINT:
            if (!get_varint(p, n, &at, &v))
                return false;
            if (key >> 3 == EVENT_STEP)
                *step = (long)v;
            break;
        case WIRE_FIXED64: at += 8; break;
        case WIRE_FIXED32: at += 4; break;
        case WIRE_BYTES:
            if (!get_varint(p, n, &at, &v) || v > n - at)
                return false;
            at += v;
            break;
        default: return false;
        }
        if (at > n)
            return false;
    }
    return true;
}

/* The length of the head of f to keep: its whole records up to the first
 * of a step past step. */
static long keep_bytes(FILE *f, long step)
{
    long keep = 0;
    uint8_t head[12], *p = NULL;
    while (fread(head, 1, 12, f) == 12) {
        uint64_t n = get_le(head, 8);
        if ((uint32_t)get_le(head + 8, 4) != tfevents_mask(tfevents_crc32c(head, 8)) ||
            n > (1u << 30))
            break;
        uint8_t *q = realloc(p, (size_t)n + 4);
        if (!q)
            break;
        p = q;
        long s;
        if (fread(p, 1, (size_t)n + 4, f) != (size_t)n + 4 ||
            (uint32_t)get_le(p + n, 4) != tfevents_mask(tfevents_crc32c(p, (size_t)n)) ||
            !event_step(p, (size_t)n, &s) || s > step)
            break;
        keep += 12 + (long)n + 4;
    }
    free(p);
    return keep;
}

/* Calls fn(path, arg) for every event file in dir; the first error stops. */
static int each_event_file(const char *dir, int (*fn)(const char *, void *), void *arg)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : -errno;
    int rc = 0;
    struct dirent *e;
    while (!rc && (e = readdir(d))) {
        if (strncmp(e->d_name, TFEVENTS_PREFIX, strlen(TFEVENTS_PREFIX)))
            continue;
        char path[MODE_PATH_MAX + 256];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        rc = fn(path, arg);
    }
    closedir(d);
    return rc;
}

typedef struct rewind_arg {
    long step;
    char *err;
    int err_len;
} rewind_arg;

static int rewind_file(const char *path, void *arg)
{
    rewind_arg *a = arg;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(a->err, (size_t)a->err_len, "%s: cannot open it (%s)", path, strerror(errno));
        return -errno;
    }
    long keep = keep_bytes(f, a->step);
    int rc = fseek(f, 0, SEEK_END) ? -errno : 0;
    long size = rc ? 0 : ftell(f);
    fclose(f);
    if (!rc && keep < size && truncate(path, (off_t)keep))
        rc = -errno;
    if (rc)
        snprintf(a->err, (size_t)a->err_len, "%s: cannot cut it to the checkpoint's step %ld (%s)",
                 path, a->step, strerror(-rc));
    return rc;
}

int tfevents_rewind(const char *dir, long step, char *err, int err_len)
{
    rewind_arg a = { step, err, err_len };
    err[0] = '\0';
    int rc = each_event_file(dir, rewind_file, &a);
    if (rc && !err[0])
        snprintf(err, (size_t)err_len, "%s: cannot read the folder (%s)", dir, strerror(-rc));
    return rc;
}

static int remove_file(const char *path, void *arg)
{
    (void)arg;
    return remove(path) && errno != ENOENT ? -errno : 0;
}

int tfevents_remove(const char *dir)
{
    return each_event_file(dir, remove_file, NULL);
}
