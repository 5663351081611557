#include "core/io/safetensors.h"

#include "core/util/file.h"
#include "core/util/hash.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The format is little-endian; so is every machine this project runs on. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors.c reads little-endian");

/* The format's dtypes and their sizes in bytes. */
static const struct {
    const char *name;
    int bytes;
} dtypes[] = {
    { "F64", 8 }, { "F32", 4 }, { "F16", 2 }, { "BF16", 2 }, { "I64", 8 }, { "I32", 4 },
    { "I16", 2 }, { "I8", 1 },  { "U64", 8 }, { "U32", 4 },  { "U16", 2 }, { "U8", 1 },
    { "BOOL", 1 }, { "F8_E4M3", 1 }, { "F8_E5M2", 1 },
};

static int dtype_bytes(const char *name)
{
    for (size_t i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); i++)
        if (!strcmp(dtypes[i].name, name))
            return dtypes[i].bytes;
    return 0;
}

/* ---- the header's JSON: a strict parser of the one shape it has ------- */

typedef struct cursor {
    const char *s;
    size_t n, i;
    char why[320]; /* what is wrong, and where */
} cursor;

static bool fail(cursor *c, const char *what)
{
    if (!c->why[0])
        snprintf(c->why, sizeof(c->why), "%s at byte %zu of the header", what, c->i);
    return false;
}

static void skip_space(cursor *c)
{
    while (c->i < c->n && (c->s[c->i] == ' ' || c->s[c->i] == '\t' || c->s[c->i] == '\n' ||
                           c->s[c->i] == '\r'))
        c->i++;
}

static bool expect(cursor *c, char ch)
{
    skip_space(c);
    if (c->i >= c->n || c->s[c->i] != ch) {
        char what[32];
        snprintf(what, sizeof(what), "expected '%c'", ch);
        return fail(c, what);
    }
    c->i++;
    return true;
}

/* Whether the next character (after spaces) is ch; consumed if so. */
static bool accept(cursor *c, char ch)
{
    skip_space(c);
    if (c->i < c->n && c->s[c->i] == ch) {
        c->i++;
        return true;
    }
    return false;
}

static int hex4(cursor *c, unsigned *v)
{
    *v = 0;
    for (int k = 0; k < 4; k++, c->i++) {
        char h = c->i < c->n ? c->s[c->i] : 0;
        int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
              : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
        if (d < 0)
            return fail(c, "a bad \\u escape"), -1;
        *v = *v * 16 + (unsigned)d;
    }
    return 0;
}

static void put_utf8(char *out, size_t *at, unsigned cp)
{
    if (cp < 0x80) {
        out[(*at)++] = (char)cp;
    } else if (cp < 0x800) {
        out[(*at)++] = (char)(0xc0 | (cp >> 6));
        out[(*at)++] = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        out[(*at)++] = (char)(0xe0 | (cp >> 12));
        out[(*at)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[(*at)++] = (char)(0x80 | (cp & 0x3f));
    } else {
        out[(*at)++] = (char)(0xf0 | (cp >> 18));
        out[(*at)++] = (char)(0x80 | ((cp >> 12) & 0x3f));
        out[(*at)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[(*at)++] = (char)(0x80 | (cp & 0x3f));
    }
}

/* A JSON string, malloc'd and decoded (no NUL inside), or NULL. */
static char *parse_string(cursor *c)
{
    if (!expect(c, '"'))
        return NULL;
    size_t start = c->i, at = 0;
    while (c->i < c->n && c->s[c->i] != '"')
        c->i += c->s[c->i] == '\\' ? 2 : 1;
    if (c->i >= c->n)
        return fail(c, "a string without its closing quote"), NULL;
    char *out = malloc(c->i - start + 1); /* decoding never lengthens */
    if (!out)
        return fail(c, "out of memory"), NULL;
    c->i = start;
    while (c->s[c->i] != '"') {
        unsigned char ch = (unsigned char)c->s[c->i++];
        if (ch < 0x20) {
            free(out);
            return fail(c, "a control character in a string"), NULL;
        }
        if (ch != '\\') {
            out[at++] = (char)ch;
            continue;
        }
        char e = c->s[c->i++];
        const char *plain = strchr("\"\\/bfnrt", e);
        if (e && plain) {
            out[at++] = "\"\\/\b\f\n\r\t"[plain - "\"\\/bfnrt"];
            continue;
        }
        unsigned cp, lo;
        if (e != 'u' || hex4(c, &cp)) {
            free(out);
            return fail(c, "a bad escape in a string"), NULL;
        }
        if (cp >= 0xd800 && cp < 0xdc00) { /* a surrogate pair */
            if (c->i + 2 > c->n || c->s[c->i] != '\\' || c->s[c->i + 1] != 'u' ||
                (c->i += 2, hex4(c, &lo)) || lo < 0xdc00 || lo >= 0xe000) {
                free(out);
                return fail(c, "a lone surrogate in a string"), NULL;
            }
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        } else if ((cp >= 0xdc00 && cp < 0xe000) || cp == 0) {
            free(out);
            return fail(c, cp ? "a lone surrogate in a string" : "a NUL in a string"), NULL;
        }
        put_utf8(out, &at, cp);
    }
    c->i++;
    out[at] = '\0';
    return out;
}

/* A non-negative integer below 2^62 (no sign, fraction or exponent). */
static bool parse_count(cursor *c, uint64_t *v)
{
    skip_space(c);
    size_t start = c->i;
    *v = 0;
    while (c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9') {
        if (*v > (1ull << 62) / 10)
            return fail(c, "a number too large");
        *v = *v * 10 + (uint64_t)(c->s[c->i++] - '0');
    }
    if (c->i == start || (c->i - start > 1 && c->s[start] == '0'))
        return fail(c, "expected a non-negative integer");
    if (c->i < c->n && strchr(".eE-+", c->s[c->i]))
        return fail(c, "expected a non-negative integer");
    return true;
}

/* [n, n, ...] into v (at most max), *count of them. */
static bool parse_counts(cursor *c, uint64_t *v, int max, int *count)
{
    *count = 0;
    if (!expect(c, '['))
        return false;
    if (accept(c, ']'))
        return true;
    do {
        if (*count == max)
            return fail(c, "too many numbers in a list");
        if (!parse_count(c, &v[(*count)++]))
            return false;
    } while (accept(c, ','));
    return expect(c, ']');
}

/* One tensor's entry {"dtype": ..., "shape": [...], "data_offsets": [b, e]}. */
static bool parse_entry(cursor *c, st_tensor *t)
{
    bool seen[3] = { false, false, false };
    if (!expect(c, '{'))
        return false;
    do {
        char *key = parse_string(c);
        if (!key || !expect(c, ':')) {
            free(key);
            return false;
        }
        int k = !strcmp(key, "dtype") ? 0 : !strcmp(key, "shape") ? 1
              : !strcmp(key, "data_offsets") ? 2 : -1;
        free(key);
        if (k < 0)
            return fail(c, "an unknown key (a tensor has dtype, shape and data_offsets)");
        if (seen[k])
            return fail(c, "a key given twice");
        seen[k] = true;
        if (k == 0) {
            char *d = parse_string(c);
            if (!d)
                return false;
            bool known = dtype_bytes(d) > 0;
            snprintf(t->dtype, sizeof(t->dtype), "%s", known ? d : "?");
            free(d);
            if (!known)
                return fail(c, "an unknown dtype");
        } else if (k == 1) {
            uint64_t dims[ST_MAX_DIMS];
            if (!parse_counts(c, dims, ST_MAX_DIMS, &t->ndim))
                return false;
            for (int i = 0; i < t->ndim; i++)
                t->shape[i] = (int64_t)dims[i];
        } else {
            uint64_t off[2];
            int n;
            if (!parse_counts(c, off, 2, &n))
                return false;
            if (n != 2)
                return fail(c, "data_offsets is not [begin, end]");
            t->begin = off[0];
            t->end = off[1];
        }
    } while (accept(c, ','));
    if (!expect(c, '}'))
        return false;
    if (!seen[0] || !seen[1] || !seen[2])
        return fail(c, "an entry without dtype, shape or data_offsets");
    return true;
}

static bool parse_metadata(cursor *c, st_file *f)
{
    if (!expect(c, '{'))
        return false;
    if (accept(c, '}'))
        return true;
    do {
        char *k = parse_string(c), *v = NULL;
        if (k && expect(c, ':'))
            v = parse_string(c);
        for (int i = 0; v && i < f->n_meta; i++)
            if (!strcmp(f->meta_key[i], k)) {
                free(v);
                v = NULL;
                fail(c, "a __metadata__ key given twice");
            }
        char **gk = v ? realloc(f->meta_key, (size_t)(f->n_meta + 1) * sizeof(char *)) : NULL;
        if (gk)
            f->meta_key = gk;
        char **gv = gk ? realloc(f->meta_val, (size_t)(f->n_meta + 1) * sizeof(char *)) : NULL;
        if (gv)
            f->meta_val = gv;
        if (!gv) {
            free(k);
            free(v);
            return fail(c, "out of memory");
        }
        f->meta_key[f->n_meta] = k;
        f->meta_val[f->n_meta++] = v;
    } while (accept(c, ','));
    return expect(c, '}');
}

static bool parse_header(cursor *c, st_file *f)
{
    bool meta_seen = false;
    if (!expect(c, '{'))
        return false;
    if (!accept(c, '}')) {
        do {
            char *name = parse_string(c);
            if (!name || !expect(c, ':')) {
                free(name);
                return false;
            }
            if (!strcmp(name, "__metadata__")) {
                free(name);
                if (meta_seen)
                    return fail(c, "__metadata__ given twice");
                meta_seen = true;
                if (!parse_metadata(c, f))
                    return false;
                continue;
            }
            if (st_find(f, name)) {
                snprintf(c->why, sizeof(c->why), "tensor '%.200s' is named twice", name);
                free(name);
                return false;
            }
            st_tensor *g = realloc(f->t, (size_t)(f->n + 1) * sizeof(st_tensor));
            if (!g) {
                free(name);
                return fail(c, "out of memory");
            }
            f->t = g;
            memset(&f->t[f->n], 0, sizeof(st_tensor));
            f->t[f->n].name = name;
            if (!parse_entry(c, &f->t[f->n++])) {
                char why[256];
                snprintf(why, sizeof(why), "%s", c->why);
                snprintf(c->why, sizeof(c->why), "tensor '%.100s': %.140s", name, why);
                return false;
            }
        } while (accept(c, ','));
        if (!expect(c, '}'))
            return false;
    }
    skip_space(c); /* writers pad the header with spaces */
    if (c->i != c->n)
        return fail(c, "bytes after the header's object");
    return true;
}

/* ---- the tensors' places ------------------------------------------------ */

static int by_begin(const void *a, const void *b)
{
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : x->end < y->end ? -1
         : x->end > y->end;
}

static void shape_text(const st_tensor *t, char *out, size_t n)
{
    size_t at = 0;
    out[0] = '\0';
    for (int i = 0; i < t->ndim && at < n; i++)
        at += (size_t)snprintf(out + at, n - at, "[%lld]", (long long)t->shape[i]);
    if (t->ndim == 0)
        snprintf(out, n, "[] (a scalar)");
}

/* Each tensor's bytes are its dtype times its shape, within the data, and
 * together they tile it: sorted by offset, each begins where the one before
 * ends, the first at 0, the last ends at the data's end. */
static int check_places(const st_file *f, char *why, size_t why_len)
{
    uint64_t data = f->size - f->data_start;
    for (int i = 0; i < f->n; i++) {
        const st_tensor *t = &f->t[i];
        char sh[160];
        shape_text(t, sh, sizeof(sh));
        /* the product in 128 bits, stopped past 2^64 (three dimensions of
         * 2^50 would wrap even 128 bits, and a wrapped product can equal
         * the span) */
        unsigned __int128 bytes = (unsigned)dtype_bytes(t->dtype);
        for (int k = 0; k < t->ndim && bytes <= UINT64_MAX; k++)
            bytes *= (uint64_t)t->shape[k];
        if (bytes > UINT64_MAX) {
            snprintf(why, why_len, "tensor '%s': dtype %s of shape %s takes more than 2^64 "
                     "bytes", t->name, t->dtype, sh);
            return -EINVAL;
        }
        if (t->end < t->begin) {
            snprintf(why, why_len, "tensor '%s': data_offsets [%llu, %llu] end before they "
                     "begin", t->name, (unsigned long long)t->begin, (unsigned long long)t->end);
            return -EINVAL;
        }
        if (t->end > data) {
            snprintf(why, why_len, "tensor '%s': data_offsets [%llu, %llu] run past the end of "
                     "the data (%llu bytes)", t->name, (unsigned long long)t->begin,
                     (unsigned long long)t->end, (unsigned long long)data);
            return -EINVAL;
        }
        if (bytes != t->end - t->begin) {
            snprintf(why, why_len, "tensor '%s': dtype %s of shape %s takes %llu bytes, its "
                     "data_offsets [%llu, %llu] hold %llu", t->name, t->dtype, sh,
                     (unsigned long long)bytes, (unsigned long long)t->begin,
                     (unsigned long long)t->end, (unsigned long long)(t->end - t->begin));
            return -EINVAL;
        }
    }
    const st_tensor **o = malloc((size_t)(f->n + 1) * sizeof(*o));
    if (!o)
        return -ENOMEM;
    for (int i = 0; i < f->n; i++)
        o[i] = &f->t[i];
    qsort(o, (size_t)f->n, sizeof(*o), by_begin);
    uint64_t at = 0;
    int rc = 0;
    for (int i = 0; !rc && i < f->n; i++) {
        if (o[i]->begin < at) {
            snprintf(why, why_len, "tensor '%s' (bytes [%llu, %llu]) overlaps tensor '%s' "
                     "(bytes [%llu, %llu])", o[i]->name, (unsigned long long)o[i]->begin,
                     (unsigned long long)o[i]->end, o[i - 1]->name,
                     (unsigned long long)o[i - 1]->begin, (unsigned long long)o[i - 1]->end);
            rc = -EINVAL;
        } else if (o[i]->begin > at) {
            snprintf(why, why_len, "a hole of %llu bytes before tensor '%s' (bytes [%llu, "
                     "%llu]): the tensors must follow one another", 
                     (unsigned long long)(o[i]->begin - at), o[i]->name,
                     (unsigned long long)o[i]->begin, (unsigned long long)o[i]->end);
            rc = -EINVAL;
        }
        at = o[i]->end;
    }
    if (!rc && at != data) {
        snprintf(why, why_len, "%llu bytes of data after the last tensor%s%s%s",
                 (unsigned long long)(data - at), f->n ? " ('" : "",
                 f->n ? o[f->n - 1]->name : "", f->n ? "')" : "");
        rc = -EINVAL;
    }
    free(o);
    return rc;
}

/* ---- reading ------------------------------------------------------------ */

static int read_at(int fd, void *buf, uint64_t n, uint64_t at)
{
    char *p = buf;
    while (n > 0) {
        ssize_t got = pread(fd, p, n > (1u << 30) ? (1u << 30) : n, (off_t)at);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return got < 0 ? -errno : -EIO;
        p += got;
        at += (uint64_t)got;
        n -= (uint64_t)got;
    }
    return 0;
}

int st_is_safetensors(const char *path)
{
    size_t n = strlen(path);
    if (n >= 12 && !strcmp(path + n - 12, ".safetensors"))
        return 1;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct stat st;
    unsigned char head[9];
    int is = !fstat(fd, &st) && S_ISREG(st.st_mode) && read_at(fd, head, 9, 0) == 0 &&
             head[8] == '{' && memcmp(head, "mode-h5\n", 8) != 0;
    close(fd);
    return is;
}

void st_close(st_file **pf)
{
    st_file *f = *pf;
    if (!f)
        return;
    if (f->fd >= 0)
        close(f->fd);
    for (int i = 0; i < f->n; i++)
        free(f->t[i].name);
    for (int i = 0; i < f->n_meta; i++) {
        free(f->meta_key[i]);
        free(f->meta_val[i]);
    }
    free(f->t);
    free(f->meta_key);
    free(f->meta_val);
    free(f->path);
    free(f);
    *pf = NULL;
}

int st_open(st_file **out, const char *path, char *err, int err_len)
{
    st_file *f = calloc(1, sizeof(*f));
    *out = f;
    if (!f || !(f->path = strdup(path))) {
        snprintf(err, (size_t)err_len, "%s: out of memory", path);
        return -ENOMEM;
    }
    f->fd = file_open_regular(path, err, err_len);
    if (f->fd < 0)
        return f->fd;
    struct stat st;
    if (fstat(f->fd, &st)) {
        snprintf(err, (size_t)err_len, "%s: %s", path, strerror(errno));
        return -errno;
    }
    f->size = (uint64_t)st.st_size;
    /* the digest of every byte, through this open (ranks compare it) */
    enum { CHUNK = 1 << 20 };
    unsigned char *buf = malloc(CHUNK);
    if (!buf) {
        snprintf(err, (size_t)err_len, "%s: out of memory", path);
        return -ENOMEM;
    }
    uint64_t h = HASH_FNV1A64_OFFSET;
    int rc = 0;
    for (uint64_t at = 0; !rc && at < f->size; at += CHUNK) {
        uint64_t n = f->size - at < CHUNK ? f->size - at : CHUNK;
        if (!(rc = read_at(f->fd, buf, n, at)))
            h = hash_fnv1a64(h, buf, n);
    }
    free(buf);
    f->digest = h;
    uint64_t n = 0;
    if (rc) {
        snprintf(err, (size_t)err_len, "%s: cannot be read: %s", path, strerror(-rc));
        return rc;
    }
    if (f->size < 8 || read_at(f->fd, &n, 8, 0) || n < 2 || n > ST_MAX_HEADER ||
        n > f->size - 8) {
        snprintf(err, (size_t)err_len, "%s: not safetensors: %llu bytes, a header length of "
                 "%llu (expected 8 bytes of header length N in [2, %u], then N bytes of JSON)",
                 path, (unsigned long long)f->size, (unsigned long long)n, ST_MAX_HEADER);
        return -EINVAL;
    }
    f->data_start = 8 + n;
    char *text = malloc(n + 1);
    if (!text) {
        snprintf(err, (size_t)err_len, "%s: out of memory", path);
        return -ENOMEM;
    }
    cursor c = { .s = text, .n = n, .i = 0, .why = "" };
    if ((rc = read_at(f->fd, text, n, 8))) {
        snprintf(err, (size_t)err_len, "%s: cannot be read: %s", path, strerror(-rc));
    } else if (!parse_header(&c, f)) {
        /* where it went wrong: after the last tensor read whole */
        int last = f->n - 1;
        if (last >= 0 && strncmp(c.why, "tensor '", 8))
            snprintf(err, (size_t)err_len, "%s: a bad safetensors header: %s (after tensor "
                     "'%.200s')", path, c.why, f->t[last].name);
        else
            snprintf(err, (size_t)err_len, "%s: a bad safetensors header: %s", path, c.why);
        rc = -EINVAL;
    } else {
        char why[512];
        rc = check_places(f, why, sizeof(why));
        if (rc)
            snprintf(err, (size_t)err_len, "%s: %s", path, rc == -ENOMEM ? "out of memory" : why);
    }
    free(text);
    return rc;
}

const st_tensor *st_find(const st_file *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, name))
            return &f->t[i];
    return NULL;
}

const char *st_meta(const st_file *f, const char *key)
{
    for (int i = 0; i < f->n_meta; i++)
        if (!strcmp(f->meta_key[i], key))
            return f->meta_val[i];
    return NULL;
}

int st_read_f32(const st_file *f, const char *name, float *out, int ndim, const int64_t *shape,
                int64_t row0, int64_t rows, char *err, int err_len)
{
    const st_tensor *t = st_find(f, name);
    if (!t) {
        snprintf(err, (size_t)err_len, "tensor '%s' is missing", name);
        return -ENOENT;
    }
    if (strcmp(t->dtype, "F32")) {
        snprintf(err, (size_t)err_len, "tensor '%s' has dtype %s: expected F32", name, t->dtype);
        return -EINVAL;
    }
    bool same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = t->shape[i] == shape[i];
    if (!same) {
        st_tensor want = { .ndim = ndim };
        for (int i = 0; i < ndim && i < ST_MAX_DIMS; i++)
            want.shape[i] = shape[i];
        char a[160], b[160];
        shape_text(t, a, sizeof(a));
        shape_text(&want, b, sizeof(b));
        snprintf(err, (size_t)err_len, "tensor '%s' has shape %s: the config gives %s", name, a,
                 b);
        return -EINVAL;
    }
    uint64_t row = 4;
    for (int i = 1; i < ndim; i++)
        row *= (uint64_t)shape[i];
    int rc = read_at(f->fd, out, (uint64_t)rows * row,
                     f->data_start + t->begin + (uint64_t)row0 * row);
    if (rc)
        snprintf(err, (size_t)err_len, "tensor '%s': cannot be read: %s", name, strerror(-rc));
    return rc;
}

/* ---- writing ------------------------------------------------------------ */

void st_json_string(FILE *o, const char *s)
{
    fputc('"', o);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(o, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", o);
        else if (*p == '\t')
            fputs("\\t", o);
        else if (*p < 0x20)
            fprintf(o, "\\u%04x", *p);
        else
            fputc(*p, o);
    }
    fputc('"', o);
}

int st_write(FILE *out, const st_out *t, int n, const char *const *meta_key,
             const char *const *meta_val, int n_meta)
{
    char *json = NULL;
    size_t len = 0;
    FILE *o = open_memstream(&json, &len);
    if (!o)
        return -ENOMEM;
    fputc('{', o);
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        uint64_t bytes = 4;
        st_json_string(o, t[i].name);
        fputs(":{\"dtype\":\"F32\",\"shape\":[", o);
        for (int k = 0; k < t[i].ndim; k++) {
            fprintf(o, "%s%lld", k ? "," : "", (long long)t[i].shape[k]);
            bytes *= (uint64_t)t[i].shape[k];
        }
        fprintf(o, "],\"data_offsets\":[%llu,%llu]},", (unsigned long long)at,
                (unsigned long long)(at + bytes));
        at += bytes;
    }
    fputs("\"__metadata__\":{", o);
    for (int i = 0; i < n_meta; i++) {
        if (i)
            fputc(',', o);
        st_json_string(o, meta_key[i]);
        fputc(':', o);
        st_json_string(o, meta_val[i]);
    }
    fputs("}}", o);
    /* the data 8-aligned, as the format's own writer pads it */
    while ((len = (size_t)ftell(o)) % 8)
        fputc(' ', o);
    if (fclose(o)) {
        free(json);
        return -ENOMEM;
    }
    uint64_t n_head = len;
    int rc = fwrite(&n_head, 8, 1, out) == 1 && fwrite(json, 1, len, out) == len ? 0 : -EIO;
    for (int i = 0; !rc && i < n; i++) {
        size_t count = 1;
        for (int k = 0; k < t[i].ndim; k++)
            count *= (size_t)t[i].shape[k];
        rc = fwrite(t[i].data, sizeof(float), count, out) == count ? 0 : -EIO;
    }
    free(json);
    return rc;
}
