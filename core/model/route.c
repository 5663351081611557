/* Counterfactual routing's plan and book (route.h). */
#include "core/model/route.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const route_policy_names[ROUTE_COUNT] = {
    [ROUTE_LEARNED] = "learned",     [ROUTE_RANDOM] = "random",   [ROUTE_BOTTOM] = "bottom",
    [ROUTE_SHUFFLE] = "shuffle",     [ROUTE_REPLAY] = "replay",   [ROUTE_NOOP_NONE] = "noop-none",
    [ROUTE_NOOP_ALL] = "noop-all",
};

int route_policy_lookup(const char *name)
{
    for (int p = 0; p < ROUTE_COUNT; p++)
        if (!strcmp(name, route_policy_names[p]))
            return p;
    return -1;
}

enum { BOOK_NAME = 32 };

typedef struct book_array {
    int layer, type;
    char name[BOOK_NAME];
    long elems;
    float *data; /* [n][elems] */
} book_array;

struct route_book {
    char source[640];
    long n;
    long *win; /* [n] increasing */
    book_array *arr;
    int n_arr, cap_arr;
};

int build_route_book(route_book **out, const long *win, long n)
{
    *out = NULL;
    route_book *b = calloc(1, sizeof(*b));
    if (!b || !(b->win = malloc((size_t)(n > 0 ? n : 1) * sizeof(long)))) {
        free(b);
        return -ENOMEM;
    }
    for (long i = 0; i < n; i++) {
        if (i && win[i] <= win[i - 1]) {
            free(b->win);
            free(b);
            return -EINVAL;
        }
        b->win[i] = win[i];
    }
    b->n = n;
    *out = b;
    return 0;
}

void free_route_book(route_book **pb)
{
    route_book *b = *pb;
    if (!b)
        return;
    for (int i = 0; i < b->n_arr; i++)
        free(b->arr[i].data);
    free(b->arr);
    free(b->win);
    free(b);
    *pb = NULL;
}

long route_book_windows(const route_book *b, const long **win)
{
    if (win)
        *win = b->win;
    return b->n;
}

static book_array *find(const route_book *b, int layer, const char *name)
{
    for (int i = 0; i < b->n_arr; i++)
        if (b->arr[i].layer == layer && !strcmp(b->arr[i].name, name))
            return &b->arr[i];
    return NULL;
}

float *route_book_array(route_book *b, int layer, const char *name, long elems, int type)
{
    book_array *a = find(b, layer, name);
    if (a)
        return a->elems == elems ? a->data : NULL;
    if (strlen(name) >= BOOK_NAME || elems <= 0)
        return NULL;
    if (b->n_arr == b->cap_arr) {
        int cap = b->cap_arr ? 2 * b->cap_arr : 8;
        book_array *grown = realloc(b->arr, (size_t)cap * sizeof(*grown));
        if (!grown)
            return NULL;
        b->arr = grown;
        b->cap_arr = cap;
    }
    float *data = calloc((size_t)(b->n > 0 ? b->n : 1) * (size_t)elems, sizeof(float));
    if (!data)
        return NULL;
    a = &b->arr[b->n_arr++];
    a->layer = layer;
    a->type = type;
    strcpy(a->name, name);
    a->elems = elems;
    a->data = data;
    return data;
}

bool route_book_entry(const route_book *b, int k, int *layer, const char **name, long *elems,
                      int *type, float **data)
{
    if (k < 0 || k >= b->n_arr)
        return false;
    *layer = b->arr[k].layer;
    *name = b->arr[k].name;
    *elems = b->arr[k].elems;
    *type = b->arr[k].type;
    *data = b->arr[k].data;
    return true;
}

long route_book_row(const route_book *b, long window)
{
    long lo = 0, hi = b->n - 1;
    while (lo <= hi) {
        long mid = lo + (hi - lo) / 2;
        if (b->win[mid] == window)
            return mid;
        if (b->win[mid] < window)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

long route_partner(long k, long n)
{
    long half = n / 2 > 0 ? n / 2 : 1;
    return n > 0 ? (k + half) % n : -1;
}

void route_book_set_source(route_book *b, const char *source)
{
    snprintf(b->source, sizeof(b->source), "%s", source);
}

const char *route_book_source(const route_book *b)
{
    return b->source;
}

void route_note_bad(const route_plan *p, int layer, const char *name, long window, long elems,
                    double value, int lo, int hi, const char *expect)
{
    if (!p->miss || p->miss->any)
        return;
    *p->miss = (route_miss){ .any = true, .bad = true, .layer = layer, .window = window,
                             .elems = elems, .value = value };
    snprintf(p->miss->name, sizeof(p->miss->name), "%s", name);
    if (expect)
        snprintf(p->miss->expect, sizeof(p->miss->expect), "%s", expect);
    else
        snprintf(p->miss->expect, sizeof(p->miss->expect), "an integer in [%d, %d]", lo, hi);
}

const float *route_source(const route_plan *p, int layer, const char *name, long window,
                          long elems, int lo, int hi)
{
    if (!p || !p->book)
        return NULL;
    const book_array *a = find(p->book, layer, name);
    long k = route_book_row(p->book, window);
    if (!a || a->elems != elems || k < 0) {
        if (p->miss && !p->miss->any) {
            *p->miss = (route_miss){ .any = true, .layer = layer, .window = window,
                                     .elems = elems };
            snprintf(p->miss->name, sizeof(p->miss->name), "%s", name);
        }
        return NULL;
    }
    if (p->policy == ROUTE_SHUFFLE)
        k = route_partner(k, p->book->n);
    const float *row = a->data + (size_t)k * (size_t)elems;
    for (long i = 0; lo <= hi && i < elems; i++) {
        float v = row[i];
        if (v >= (float)lo && v <= (float)hi && v == floorf(v))
            continue;
        route_note_bad(p, layer, name, window, elems, (double)v, lo, hi, NULL);
        return NULL;
    }
    return row;
}
