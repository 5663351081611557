/* Text that is parsed (configs, sweep files, key=value overrides, the CSVs
 * the analysis reads back) is UTF-8 without NUL bytes, or refused naming the
 * line and the byte: a file saved as UTF-16 reads as NULs and bytes that are
 * no UTF-8, and a reader that stops at a NUL would see an empty line and skip
 * it (docs/robustness.md).  Every such reader takes its lines from
 * text_next_line, or checks a whole string with text_check.
 *
 * Corpora are not parsed text: a byte-level model reads any bytes. */
#ifndef MODE_CORE_UTIL_TEXT_H
#define MODE_CORE_UTIL_TEXT_H

#include <stddef.h>
#include <stdio.h>

/* 0 when s[0, n) is UTF-8 without NUL bytes; else -EILSEQ, *at the offset
 * of the first bad byte and why what is wrong with it ("byte offset 3 is
 * 0xfe, not UTF-8"). at_start: s starts the file, where a UTF-16 byte-order
 * mark is named as one. */
int text_check(const char *s, size_t n, int at_start, size_t *at, char *why, int why_len);

/* The lines of a stream or of a NUL-terminated string, counted. */
typedef struct text_lines {
    FILE *f;          /* the stream, or NULL */
    const char *text; /* else the rest of the string */
    int line;         /* the line last read, from 1 */
    long offset;      /* the file offset of that line's first byte */
    long next;        /* ... and of the next line's */
} text_lines;

/* The next line into buf (with its '\n', NUL-terminated; *len its bytes):
 * 1, or 0 at the end.  -E2BIG for a line of cap - 1 bytes or more without
 * its end, -EILSEQ for a line that is not UTF-8 or holds a NUL (why: "byte
 * offset 0 of the line (0 of the file) is 0x00, a NUL byte: ..."), -EIO for
 * a read error; t->line is that line. */
int text_next_line(text_lines *t, char *buf, int cap, size_t *len, char *why, int why_len);

#endif
