#include "core/model/keys.h"
#include "core/util/num.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool key_text_long(const char *s, long *v)
{
    return num_parse_long(s, LONG_MIN, LONG_MAX, v);
}

bool key_text_double(const char *s, double *v)
{
    return num_parse_double(s, -HUGE_VAL, HUGE_VAL, v);
}

void key_format_double(double v, char *out, size_t n)
{
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(out, n, "%.*g", prec, v);
        if (strtod(out, NULL) == v)
            return;
    }
}

static bool in_range(const kind_key *k, double x)
{
    bool lo = (k->open & KEY_MIN_OPEN) ? x > k->min : x >= k->min;
    bool hi = k->max == KEY_NO_MAX || ((k->open & KEY_MAX_OPEN) ? x < k->max : x <= k->max);
    return lo && hi;
}

static int choice_index(const char *const *choices, const char *s)
{
    for (int i = 0; choices && choices[i]; i++)
        if (!strcmp(choices[i], s))
            return i;
    return -1;
}

void key_expected(const kind_key *k, char *out, size_t n)
{
    size_t used = 0;
    switch (k->type) {
    case KEY_CHOICE:
        used = (size_t)snprintf(out, n, "one of ");
        for (int i = 0; k->choices[i] && used < n; i++)
            used += (size_t)snprintf(out + used, n - used, "%s%s", i ? ", " : "", k->choices[i]);
        return;
    case KEY_BOOL: snprintf(out, n, "true or false"); return;
    default: break;
    }
    const char *what = k->type == KEY_REAL ? "a number" : "an integer";
    if (k->max == KEY_NO_MAX && k->type == KEY_INT) /* the int it is stored in bounds it */
        snprintf(out, n, "%s in %c%.10g, %d]", what, (k->open & KEY_MIN_OPEN) ? '(' : '[', k->min,
                 INT_MAX);
    else if (k->max == KEY_NO_MAX)
        snprintf(out, n, "%s %s %.10g", what, (k->open & KEY_MIN_OPEN) ? ">" : ">=", k->min);
    else
        snprintf(out, n, "%s in %c%.10g, %.10g%c", what, (k->open & KEY_MIN_OPEN) ? '(' : '[',
                 k->min, k->max, (k->open & KEY_MAX_OPEN) ? ')' : ']');
}

int key_parse(const kind_key *k, void *values, const char *text, char *why, size_t why_len)
{
    char *f = (char *)values + k->offset;
    long l = 0;
    double d = 0.0;
    bool ok = false;
    switch (k->type) {
    case KEY_INT:
        if ((ok = key_text_long(text, &l) && l >= INT_MIN && l <= INT_MAX &&
                  in_range(k, (double)l)))
            *(int *)(void *)f = (int)l;
        break;
    case KEY_LONG:
        if ((ok = key_text_long(text, &l) && in_range(k, (double)l)))
            *(long *)(void *)f = l;
        break;
    case KEY_REAL:
        if ((ok = key_text_double(text, &d) && in_range(k, d)))
            *(double *)(void *)f = d;
        break;
    case KEY_BOOL:
        if ((ok = !strcmp(text, "true") || !strcmp(text, "false")))
            *(bool *)(void *)f = !strcmp(text, "true");
        break;
    case KEY_CHOICE: {
        int i = choice_index(k->choices, text);
        if ((ok = i >= 0))
            *(int *)(void *)f = i;
        break;
    }
    }
    if (!ok && why)
        key_expected(k, why, why_len);
    return ok ? 0 : -EINVAL;
}

void key_format(const kind_key *k, const void *values, char *out, size_t n)
{
    const char *f = (const char *)values + k->offset;
    switch (k->type) {
    case KEY_INT: snprintf(out, n, "%d", *(const int *)(const void *)f); break;
    case KEY_LONG: snprintf(out, n, "%ld", *(const long *)(const void *)f); break;
    case KEY_REAL: key_format_double(*(const double *)(const void *)f, out, n); break;
    case KEY_BOOL: snprintf(out, n, "%s", *(const bool *)(const void *)f ? "true" : "false"); break;
    case KEY_CHOICE: snprintf(out, n, "%s", k->choices[*(const int *)(const void *)f]); break;
    }
}

double key_number(const kind_key *k, const void *values)
{
    const char *f = (const char *)values + k->offset;
    switch (k->type) {
    case KEY_INT:
    case KEY_CHOICE: return *(const int *)(const void *)f;
    case KEY_LONG: return (double)*(const long *)(const void *)f;
    case KEY_REAL: return *(const double *)(const void *)f;
    case KEY_BOOL: return *(const bool *)(const void *)f ? 1.0 : 0.0;
    }
    return (double)NAN;
}

void key_group_defaults(const key_group *g, void *values)
{
    memset(values, 0, g->size);
    for (const kind_key *k = g->keys; k->name; k++) {
        int rc = key_parse(k, values, k->def, NULL, 0);
        (void)rc; /* a default that does not parse is caught by the kinds' contract test */
    }
}

const kind_key *key_group_find(const key_group *g, const char *name)
{
    for (const kind_key *k = g->keys; k->name; k++)
        if (!strcmp(k->name, name))
            return k;
    return NULL;
}
