/* Whether a stored config is this run's (config_same_as): the reader and
 * the writer together, kept apart from both so that neither reaches the
 * other.  run.out names the folder, not the run: the same folder spelt
 * another way (absolute against relative) is the same run. */
#include "core/config/config.h"

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

bool config_same_as(const run_config *c, const char *ini, const char *stored)
{
    if (!strcmp(stored, ini))
        return true;
    /* read by this build with c's schema (its kinds and sections), then
     * written out as c's own resolved text is */
    const key_group *groups[MODE_MAX_GROUPS + 1] = { 0 };
    for (int g = 0; g < c->n_groups && g < MODE_MAX_GROUPS; g++)
        groups[g] = c->groups[g];
    config_schema schema = { .kinds = c->kinds, .groups = groups };
    run_config *o = malloc(sizeof(*o));
    char err[512], *text = NULL;
    if (o && !config_load_string(o, stored, "stored config", 0, NULL, &schema, 0, err,
                                 (int)sizeof(err))) {
        if (strcmp(o->out, c->out) && same_folder(o->out, c->out))
            memcpy(o->out, c->out, sizeof(o->out));
        text = config_to_ini(o);
    }
    bool same = text && !strcmp(text, ini);
    free(text);
    free(o);
    return same;
}
