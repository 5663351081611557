/* Whether a stored config is this run's (config_same_as): the reader and
 * the writer together, kept apart from both so that neither reaches the
 * other.  run.out names the folder, not the run: the same folder spelt
 * another way (absolute against relative) is the same run. */
#include "core/config/config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Whether paths a and b name one existing folder (the stored run.out may
 * be absolute where this run's is relative to where it was started). */
static bool same_folder(const char *a, const char *b)
{
    struct stat sa, sb;
    return !stat(a, &sa) && !stat(b, &sb) && S_ISDIR(sa.st_mode) && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

/* stored read by this build with c's schema (its kinds and sections) */
static int load_stored(run_config *o, const run_config *c, const char *stored, const char *label,
                       char *err, int err_len)
{
    const key_group *groups[MODE_MAX_GROUPS + 1] = { 0 };
    for (int g = 0; g < c->n_groups && g < MODE_MAX_GROUPS; g++)
        groups[g] = c->groups[g];
    config_schema schema = { .kinds = c->kinds, .groups = groups };
    return config_load_string(o, stored, label, 0, NULL, &schema, 0, err, err_len);
}

int config_same_widths(const run_config *c, const char *stored, const char *label, char *err,
                       int err_len)
{
    run_config *o = malloc(sizeof(*o));
    if (!o)
        return -ENOMEM;
    int rc = load_stored(o, c, stored, label, err, err_len);
    /* what no tensor's shape shows: the head split of the attention
     * weights, the layers a file lacks (they would start fresh), the
     * positions; and the vocabulary, named before a tensor's shape is */
    const struct {
        const char *key;
        int here, there;
    } k[] = { { "model.n_heads", c->n_heads, o->n_heads },
              { "the layer count (model.layers)", c->n_layers, o->n_layers },
              { "data.vocab", c->vocab, o->vocab },
              { "data.seq_len", c->seq_len, o->seq_len } };
    for (size_t i = 0; !rc && i < sizeof(k) / sizeof(k[0]); i++)
        if (k[i].here != k[i].there) {
            snprintf(err, (size_t)err_len, "%s: %s is %d there, %d here: the model's widths, "
                     "head count, layer count, vocabulary and sequence length must be the "
                     "checkpoint's (docs/upcycling.md)", label, k[i].key, k[i].there, k[i].here);
            rc = -EINVAL;
        }
    free(o);
    return rc;
}

char *config_stored_as(const run_config *c, const char *stored)
{
    /* read by this build with c's schema, then written out as c's own
     * resolved text is: a key an older build did not know takes its
     * default, as it did there */
    run_config *o = malloc(sizeof(*o));
    char err[512], *text = NULL;
    if (o && !load_stored(o, c, stored, "stored config", err, (int)sizeof(err))) {
        if (strcmp(o->out, c->out) && same_folder(o->out, c->out))
            memcpy(o->out, c->out, sizeof(o->out));
        text = config_to_ini(o);
    }
    free(o);
    return text;
}

bool config_same_as(const run_config *c, const char *ini, const char *stored)
{
    if (!strcmp(stored, ini))
        return true;
    char *text = config_stored_as(c, stored);
    bool same = text && !strcmp(text, ini);
    free(text);
    return same;
}
