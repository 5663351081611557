/* One JSON object on one line, written as it goes: keys in order, numbers
 * that are not finite written as null (JSON has no NaN), strings escaped.
 * "sep" is what goes between entries: ", " for the one-shot outputs (eval,
 * plan, bench), "," for the training log's lines. */
#ifndef MODE_EXPERIMENTS_JSON_H
#define MODE_EXPERIMENTS_JSON_H

#include <stdio.h>

typedef struct json_line {
    FILE *f;
    const char *sep;
    int n; /* entries so far */
} json_line;

json_line json_begin(FILE *f, const char *sep);
void json_str(json_line *j, const char *key, const char *value);
/* v with digits significant digits (%.*g), or decimals after the point
 * (json_fixed, %.*f); null when v is not finite. */
void json_num(json_line *j, const char *key, int digits, double v);
void json_fixed(json_line *j, const char *key, int decimals, double v);
void json_int(json_line *j, const char *key, long v);
/* "}\n" */
void json_end(json_line *j);

#endif
