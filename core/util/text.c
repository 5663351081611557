#include "core/util/text.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

/* The length of the UTF-8 sequence at s[0, n), or 0 when it is none (a NUL,
 * a stray continuation byte, an overlong form, a surrogate, past U+10FFFF,
 * or cut short); RFC 3629, section 4. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c == 0)
        return 0;
    if (c < 0x80)
        return 1;
    size_t len = c >= 0xc2 && c <= 0xdf   ? 2
                 : c >= 0xe0 && c <= 0xef ? 3
                 : c >= 0xf0 && c <= 0xf4 ? 4
                                          : 0;
    if (!len || len > n)
        return 0;
    /* the second byte's range rules out overlong forms, surrogates and
     * code points past U+10FFFF */
    unsigned lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
    unsigned hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    return len;
}

static long first_bad(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_len(u + i, n - i);
        if (!k)
            return (long)i;
        i += k;
    }
    return -1;
}

static const char *what(const char *s, size_t n, size_t at, int at_start)
{
    const unsigned char *u = (const unsigned char *)s;
    if (at_start && at == 0 && n >= 2 &&
        ((u[0] == 0xfe && u[1] == 0xff) || (u[0] == 0xff && u[1] == 0xfe)))
        return "a UTF-16 byte-order mark (save the file as UTF-8)";
    if (u[at] == 0)
        return "a NUL byte (a file saved as UTF-16?)";
    return "not UTF-8";
}

int text_check(const char *s, size_t n, int at_start, size_t *at, char *why, int why_len)
{
    long bad = first_bad(s, n);
    if (bad < 0)
        return 0;
    if (at)
        *at = (size_t)bad;
    if (why && why_len > 0)
        snprintf(why, (size_t)why_len, "byte offset %ld is 0x%02x, %s: expected UTF-8 text", bad,
                 (unsigned char)s[bad], what(s, n, (size_t)bad, at_start));
    return -EILSEQ;
}

/* One line's bytes, NULs included (fgets would hide them behind the first) */
static int next_chunk(text_lines *t, char *buf, int cap, size_t *len)
{
    size_t i = 0;
    if (t->f) {
        int ch = 0;
        while (i + 1 < (size_t)cap && (ch = getc(t->f)) != EOF) {
            buf[i++] = (char)ch;
            if (ch == '\n')
                break;
        }
        if (ferror(t->f))
            return -EIO;
    } else {
        while (i + 1 < (size_t)cap && t->text[i]) {
            buf[i] = t->text[i];
            if (t->text[i++] == '\n')
                break;
        }
        t->text += i;
    }
    buf[i] = '\0';
    *len = i;
    return i > 0;
}

static int at_end(text_lines *t)
{
    if (!t->f)
        return !*t->text;
    int ch = getc(t->f);
    if (ch == EOF)
        return 1;
    ungetc(ch, t->f);
    return 0;
}

int text_next_line(text_lines *t, char *buf, int cap, size_t *len, char *why, int why_len)
{
    *len = 0;
    int rc = next_chunk(t, buf, cap, len);
    if (rc < 0) {
        if (why && why_len > 0)
            snprintf(why, (size_t)why_len, "a read error after line %d", t->line);
        return rc;
    }
    if (rc == 0)
        return 0;
    t->line++;
    t->offset = t->next;
    t->next += (long)*len;
    if (buf[*len - 1] != '\n' && !at_end(t)) {
        if (why && why_len > 0)
            snprintf(why, (size_t)why_len, "expected lines of at most %d characters", cap - 2);
        return -E2BIG;
    }
    long bad = first_bad(buf, *len);
    if (bad < 0)
        return 1;
    if (why && why_len > 0)
        snprintf(why, (size_t)why_len,
                 "byte offset %ld of the line (%ld of the file) is 0x%02x, %s: expected UTF-8 "
                 "text", bad, t->offset + bad, (unsigned char)buf[bad],
                 what(buf, *len, (size_t)bad, t->offset == 0));
    return -EILSEQ;
}
