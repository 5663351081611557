#include "experiments/json.h"

#include <math.h>

json_line json_begin(FILE *f, const char *sep)
{
    fputc('{', f);
    return (json_line){ .f = f, .sep = sep };
}

static void put_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void put_key(json_line *j, const char *key)
{
    if (j->n++)
        fputs(j->sep, j->f);
    put_string(j->f, key);
    fputs(j->sep[0] == ',' && j->sep[1] ? ": " : ":", j->f);
}

void json_str(json_line *j, const char *key, const char *value)
{
    put_key(j, key);
    put_string(j->f, value);
}

void json_num(json_line *j, const char *key, int digits, double v)
{
    put_key(j, key);
    if (isfinite(v))
        fprintf(j->f, "%.*g", digits, v);
    else
        fputs("null", j->f);
}

void json_fixed(json_line *j, const char *key, int decimals, double v)
{
    put_key(j, key);
    if (isfinite(v))
        fprintf(j->f, "%.*f", decimals, v);
    else
        fputs("null", j->f);
}

void json_int(json_line *j, const char *key, long v)
{
    put_key(j, key);
    fprintf(j->f, "%ld", v);
}

void json_end(json_line *j)
{
    fputs("}\n", j->f);
}
