/* st_lie GOOD.safetensors LIE OUT.safetensors: OUT is GOOD with a header
 * that lies one way (tests/cli/test_safetensors.sh, "lies"), and the name
 * of the tensor it lies about on stdout.  LIE:
 *   past-end   the last tensor's end 4 bytes past the data
 *   overlap    the second tensor (in the data) 4 bytes earlier
 *   hole       4 bytes before the first tensor
 *   dtype-size the first tensor's dtype F16 (its bytes no longer match)
 *   dtype      tok_emb's dtype I32 (the bytes match, the type does not)
 *   shape      tok_emb's shape [V][d] as [d][V]
 *   missing    the last tensor left out, with its bytes
 *   duplicate  tok_emb named twice
 *   json       a comma before the closing brace (named: the tensor before it)
 * Exit 2 on unreadable input. */
#include "core/io/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int by_begin(const void *a, const void *b)
{
    const st_tensor *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: st_lie GOOD LIE OUT\n");
        return 2;
    }
    const char *lie = argv[2];
    char err[1024];
    st_file *f = NULL;
    if (st_open(&f, argv[1], err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    uint64_t data = f->size - f->data_start;
    char *bytes = malloc(data + 8);
    FILE *in = fopen(argv[1], "rb");
    if (!bytes || !in || fseek(in, (long)f->data_start, SEEK_SET) ||
        fread(bytes, 1, data, in) != data) {
        fprintf(stderr, "%s: cannot be read\n", argv[1]);
        return 2;
    }
    fclose(in);
    qsort(f->t, (size_t)f->n, sizeof(st_tensor), by_begin);
    int n = f->n, pad = 0;
    const char *about = f->t[0].name;
    st_tensor *emb = NULL;
    for (int i = 0; i < n; i++)
        if (!strcmp(f->t[i].name, "tok_emb"))
            emb = &f->t[i];
    if (!strcmp(lie, "past-end")) {
        f->t[n - 1].end += 4;
        about = f->t[n - 1].name;
    } else if (!strcmp(lie, "overlap")) {
        f->t[1].begin -= 4;
        f->t[1].end -= 4;
        about = f->t[1].name;
    } else if (!strcmp(lie, "hole")) {
        for (int i = 0; i < n; i++)
            f->t[i].begin += 4, f->t[i].end += 4;
        pad = 4;
    } else if (!strcmp(lie, "dtype-size")) {
        snprintf(f->t[0].dtype, sizeof(f->t[0].dtype), "F16");
    } else if (!strcmp(lie, "dtype")) {
        snprintf(emb->dtype, sizeof(emb->dtype), "I32");
        about = emb->name;
    } else if (!strcmp(lie, "shape")) {
        int64_t s = emb->shape[0];
        emb->shape[0] = emb->shape[1];
        emb->shape[1] = s;
        about = emb->name;
    } else if (!strcmp(lie, "huge")) { /* 4 x 2^80 bytes: past 64 bits */
        emb->shape[0] = emb->shape[1] = (int64_t)1 << 40;
        about = emb->name;
    } else if (!strcmp(lie, "missing")) {
        data -= f->t[n - 1].end - f->t[n - 1].begin;
        about = f->t[--n].name;
    } else if (!strcmp(lie, "duplicate")) {
        about = emb->name;
    } else if (!strcmp(lie, "json")) {
        about = f->t[n - 1].name; /* the last before the bad byte */
    } else {
        fprintf(stderr, "st_lie: unknown lie %s\n", lie);
        return 2;
    }
    char *json = NULL;
    size_t len = 0;
    FILE *o = open_memstream(&json, &len);
    fputc('{', o);
    for (int i = 0; i < n; i++) {
        const st_tensor *t = &f->t[i];
        for (int twice = 0; twice < (!strcmp(lie, "duplicate") && t == emb ? 2 : 1); twice++) {
            st_json_string(o, t->name);
            fprintf(o, ":{\"dtype\":\"%s\",\"shape\":[", t->dtype);
            for (int k = 0; k < t->ndim; k++)
                fprintf(o, "%s%lld", k ? "," : "", (long long)t->shape[k]);
            fprintf(o, "],\"data_offsets\":[%llu,%llu]},", (unsigned long long)t->begin,
                    (unsigned long long)t->end);
        }
    }
    fputs("\"__metadata__\":{", o);
    for (int i = 0; i < f->n_meta; i++) {
        fputs(i ? "," : "", o);
        st_json_string(o, f->meta_key[i]);
        fputc(':', o);
        st_json_string(o, f->meta_val[i]);
    }
    fputs(strcmp(lie, "json") ? "}}" : "},}", o);
    fclose(o);
    FILE *out = fopen(argv[3], "wb");
    uint64_t n_head = len;
    static const char zeros[8];
    if (!out || fwrite(&n_head, 8, 1, out) != 1 || fwrite(json, 1, len, out) != len ||
        fwrite(zeros, 1, (size_t)pad, out) != (size_t)pad ||
        fwrite(bytes, 1, data, out) != data || fclose(out)) {
        fprintf(stderr, "%s: cannot be written\n", argv[3]);
        return 2;
    }
    printf("%s\n", about);
    free(json);
    free(bytes);
    st_close(&f);
    return 0;
}
