#include "core/train/trainer_impl.h"

#include "core/io/runfile.h"
#include "core/util/file.h"
#include "core/util/outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void run_paths(const run_config *c, char *dir, char *run_h5, char *ckpt_h5, size_t len)
{
    snprintf(dir, len, "%s/%s", c->out, c->name);
    snprintf(run_h5, len, "%s/%s/run.h5", c->out, c->name);
    snprintf(ckpt_h5, len, "%s/%s/ckpt.h5", c->out, c->name);
}

/* Fail before training when the output folder cannot take our files. */
int check_writable(const char *dir, char *err, int err_len)
{
    int rc = file_make_dirs(dir);
    if (rc) {
        snprintf(err, (size_t)err_len, "%s: cannot create the output folder: %s", dir,
                 strerror(-rc));
        return rc;
    }
    char probe[MODE_PATH_MAX + 128];
    snprintf(probe, sizeof(probe), "%s/.write-probe", dir);
    /* a new file, never one already there nor a link's target (a probe
     * left by a crash is removed first: a link's removal removes the link) */
    unlink(probe);
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f && fd >= 0)
        close(fd);
    if (!f || fputs("ok\n", f) < 0 || fclose(f)) {
        snprintf(err, (size_t)err_len, "%s: output folder is not writable", dir);
        return -EACCES;
    }
    remove(probe);
    return 0;
}

/* Whether the folder may take this run, before anything is created: a run
 * there (run.h5, ckpt.h5 or pieces) is refused unless it is resumed or
 * overwritten, and a resume needs its checkpoint. */
int check_folder(const trainer *t, const trainer_opts *o, char *err, int err_len)
{
    struct stat st;
    char records[MODE_PATH_MAX + 128];
    snprintf(records, sizeof(records), "%s/records", t->dir);
    bool ckpt = !stat(t->ckpt_h5, &st), run = !stat(t->run_h5, &st) || !stat(records, &st);
    /* each way out it names is one the folder takes: --resume only with a
     * checkpoint, a plain start only in a folder without a run */
    if (o->resume && !ckpt) {
        snprintf(err, (size_t)err_len, "%s: no checkpoint to resume (%s is missing): %s",
                 t->dir, t->ckpt_h5, run ? "the run stopped before its first checkpoint; "
                 "--overwrite starts it anew (its records go)" : "start the run without --resume");
        return -ENOENT;
    }
    /* the run's files never replace what it reads: data.source =
     * out/x/run.h5, or --init-from the checkpoint --overwrite would remove
     * (core/util/outfile.h) */
    const run_config *c = t->cfg;
    const char *in[] = { c->source, c->val_source, c->tokenizer, o->init_from };
    char tok[MODE_PATH_MAX + 32];
    snprintf(tok, sizeof(tok), "%s/tokenizer.model", t->dir);
    const char *own[] = { t->ckpt_h5, t->run_h5, tok };
    for (int i = 0; i < 3; i++) {
        /* the run's copy of its tokenizer may be what it reads */
        int rc = out_check_inputs(own[i], in, i == 2 ? 2 : 4, err, err_len);
        if (rc)
            return rc;
    }
    if (!o->resume && !o->overwrite && (ckpt || run)) {
        snprintf(err, (size_t)err_len, "%s holds a run (%s%s%s): %s--overwrite replaces it, "
                 "or choose another run.name or run.out", t->dir, run ? "run.h5" : "",
                 run && ckpt ? ", " : "", ckpt ? "ckpt.h5" : "",
                 ckpt ? "--resume continues it, " : "it has no checkpoint to resume from; ");
        return -EEXIST;
    }
    return 0;
}

/* --overwrite, once every check has passed: the earlier run's files go, so
 * that nothing of it can be resumed into the new one. */
int clear_folder(const trainer *t)
{
    if (remove(t->ckpt_h5) && errno != ENOENT)
        return -errno;
    if (remove(t->run_h5) && errno != ENOENT)
        return -errno;
    int rc = tfevents_remove(t->dir);
    return rc ? rc : run_record_remove_pieces(t->run_h5);
}

/* The next line of *p (which moves past it) into line.  "[section]"
 * updates sec; "key = value" leaves the key in line and returns the value;
 * NULL for every line that is not an entry. */
static const char *next_entry(const char **p, char *line, size_t len, char *sec, size_t sec_len)
{
    const char *e = strchr(*p, '\n');
    size_t l = e ? (size_t)(e - *p) : strlen(*p);
    snprintf(line, len, "%.*s", (int)(l < len - 1 ? l : len - 1), *p);
    *p += l + (e ? 1 : 0);
    if (line[0] == '[') {
        snprintf(sec, sec_len, "%.*s", (int)strcspn(line + 1, "]"), line + 1);
        return NULL;
    }
    char *eq = strstr(line, " = ");
    if (!eq)
        return NULL;
    *eq = '\0';
    return eq + 3;
}

/* The keys whose values differ between two resolved configs (INI text as
 * config_to_ini writes it), as "section.key (a -> b)" in buf. */
void config_differences(const char *a, const char *b, char *buf, size_t len)
{
    size_t w = 0;
    buf[0] = '\0';
    const char *texts[2] = { a, b };
    /* every "key = value" line of a under its section, looked up in b, and
     * the lines of b that a lacks */
    for (int pass = 0; pass < 2; pass++) {
        const char *x = texts[pass], *y = texts[1 - pass];
        char sec[64] = "", line[1200];
        for (const char *p = x; *p;) {
            const char *val = next_entry(&p, line, sizeof(line), sec, sizeof(sec));
            if (!val)
                continue;
            /* the same key's value in y */
            char ysec[64] = "", yl[1200], yval[1200] = "";
            bool found = false;
            for (const char *q = y; *q && !found;) {
                const char *v = next_entry(&q, yl, sizeof(yl), ysec, sizeof(ysec));
                if (v && !strcmp(ysec, sec) && !strcmp(yl, line)) {
                    found = true;
                    snprintf(yval, sizeof(yval), "%s", v);
                }
            }
            if ((found && pass == 1) || (found && !strcmp(val, yval)))
                continue;
            int k = snprintf(buf + w, len - w, "%s%s.%s (%s -> %s)", w ? ", " : "", sec, line,
                             pass == 0 ? val : "unset", pass == 0 ? (found ? yval : "unset") : val);
            if (k < 0 || (size_t)k >= len - w)
                return;
            w += (size_t)k;
        }
    }
}
