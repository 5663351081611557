#include "core/io/checkpoint.h"

#include "core/util/file.h"
#include "core/config/config.h"
#include "core/util/num.h"
#include "core/io/h5util.h"
#include "core/io/checkpoint_st.h"

#include "core/comm/comm.h"
#include "core/rng/pcg32.h"
#include "core/rng/streams.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int checkpoint_layer_attrs(const layer *ly, ckpt_attr_fn fn, void *user)
{
    int rc = 0;
    /* every key of the kind, named like the config key: a choice as its
     * name, a boolean as true or false, numbers as doubles */
    for (const kind_group *kg = ly->kind->groups; !rc && kg && kg->group; kg++) {
        const void *values = layer_group_cvalues(&ly->spec, kg);
        for (const kind_key *k = kg->group->keys; !rc && k->name; k++) {
            char text[64], an[96];
            key_format(k, values, text, sizeof(text));
            layer_key_name(ly->kind, kg, k, an, sizeof(an));
            bool is_text = k->type == KEY_CHOICE || k->type == KEY_BOOL;
            rc = fn(user, an, text, is_text ? 0.0 : key_number(k, values), is_text);
        }
    }
    return rc;
}

static int h5_layer_attr(void *user, const char *name, const char *text, double number,
                         bool is_text)
{
    hid_t g = *(hid_t *)user;
    return is_text ? h5_attr_string(g, name, text) : h5_attr_double(g, name, number);
}

static int write_layer_attrs(hid_t f, const model *m)
{
    for (int l = 0; l < m->dims.n_layers; l++) {
        const layer *ly = &m->layers[l];
        char name[32];
        snprintf(name, sizeof(name), "layers/%d", l);
        hid_t g = H5Gopen2(f, name, H5P_DEFAULT);
        if (g < 0)
            return -EIO;
        int rc = h5_attr_string(g, "kind", ly->kind->name);
        if (!rc)
            rc = checkpoint_layer_attrs(ly, h5_layer_attr, &g);
        H5Gclose(g);
        if (rc)
            return rc;
    }
    return 0;
}

static int write_root_attrs(hid_t f, const model *m, const ckpt_header *h)
{
    const model_dims *d = &m->dims;
    int rc = 0;
    rc |= h5_attr_string(f, "config", h->config);
    if (h->data)
        rc |= h5_attr_string(f, "data", h->data);
    rc |= h5_attr_long(f, "d_model", d->d_model);
    rc |= h5_attr_long(f, "n_heads", d->n_heads);
    rc |= h5_attr_long(f, "d_ff", d->d_ff);
    rc |= h5_attr_long(f, "vocab", d->vocab);
    rc |= h5_attr_long(f, "seq_len", d->seq_len);
    rc |= h5_attr_long(f, "n_layers", d->n_layers);
    rc |= h5_attr_long(f, "step", h->step);
    rc |= h5_attr_double(f, "train_flops_executed", h->train_flops_executed);
    rc |= h5_attr_string(f, "rng", "pcg32 keyed by (seed, step, ...): seed and step are the state");
    char seed_s[32];
    snprintf(seed_s, sizeof(seed_s), "%llu", (unsigned long long)h->seed);
    rc |= h5_attr_string(f, "seed", seed_s);
    return rc ? -EIO : 0;
}

/* The parameters, then the Adam moments under optim/m/ and optim/v/, each
 * tensor under its MODEL.md path. */
static const char *const ckpt_prefix[3] = { "", "optim/m/", "optim/v/" };

/* Who writes what: rank r writes shared tensor t when t mod P = r, and the
 * slices of its own experts (with P > E only the first group of E ranks:
 * the others hold replicas of the same experts).  A sharded optimizer's
 * moments of a shared tensor (b > 0): every rank its piece
 * (docs/sharding.md). */
static bool writes_tensor(const model *m, const model_tensor *t, int ti, int b, int P, int rank)
{
    if (!t->desc.expert_dim || P == 1)
        return b > 0 && m->optim_shards > 1 ? t->mcount > 0 : ti % P == rank;
    return P <= t->desc.shape[0] || rank < t->desc.shape[0];
}

/* Phase messages of the collective save (a fixed layout, so every rank
 * takes part in the same collectives whatever failed). */
enum { MSG_LEN = 512 };
typedef struct save_status {
    int64_t rc;
    char msg[MSG_LEN];
} save_status;

/* Rank 0: create and lay out the file; offsets[3 n_tensors] of the
 * datasets.  Every rank: nothing. */
static int lay_out(h5_out **o, const char *path, const model *m, const ckpt_header *h,
                   uint64_t *offsets, char *err, int err_len)
{
    int n = m->n_tensors;
    uint64_t bytes = 0;
    for (int t = 0; t < n; t++)
        bytes += 3u * (uint64_t)tensor_numel(&m->tensors[t].desc) * sizeof(float);
    long *ds = malloc((size_t)(3 * n + 1) * sizeof(long));
    if (!ds)
        return -ENOMEM;
    int rc = h5_out_create(o, path, bytes, err, err_len);
    if (!rc)
        rc = write_root_attrs(h5_out_file(*o), m, h);
    for (int b = 0; !rc && b < 3; b++) {
        for (int t = 0; !rc && t < n; t++) {
            const model_tensor *mt = &m->tensors[t];
            hsize_t dims[3];
            for (int i = 0; i < mt->desc.ndim; i++)
                dims[i] = (hsize_t)mt->desc.shape[i];
            char name[MODE_TENSOR_PATH + 16];
            snprintf(name, sizeof(name), "%s%s", ckpt_prefix[b], mt->path);
            ds[b * n + t] = h5_out_dataset(*o, name, H5T_IEEE_F32LE, mt->desc.ndim, dims);
            if (ds[b * n + t] < 0)
                rc = -EIO;
        }
        if (!rc && b == 0)
            rc = write_layer_attrs(h5_out_file(*o), m);
    }
    if (rc && *o)
        snprintf(err, (size_t)err_len, "%s: writing the checkpoint failed", path);
    if (!rc)
        rc = h5_out_layout(*o, err, err_len);
    for (int i = 0; !rc && i < 3 * n; i++)
        offsets[i] = h5_out_offset(*o, ds[i]);
    free(ds);
    return rc;
}

/* This rank's pieces into the laid-out file: pwrite at the offsets, each
 * piece's CRC into pieces (at most 3 n_tensors). */
static int write_share(const char *tmp, const model *m, const uint64_t *offsets, int P, int rank,
                       h5_piece *pieces, int *n_pieces)
{
    const float *bufs[3] = { m->params, m->adam_m, m->adam_v };
    int n = m->n_tensors, rc = 0;
    *n_pieces = 0;
    int fd = open(tmp, O_WRONLY);
    if (fd < 0)
        return -errno;
    for (int b = 0; !rc && b < 3; b++) {
        for (int t = 0; !rc && t < n; t++) {
            const model_tensor *mt = &m->tensors[t];
            if (!writes_tensor(m, mt, t, b, P, rank) || mt->numel == 0)
                continue;
            /* parameters: what the rank holds; moments: what it keeps */
            long lo = b ? mt->mlo : 0, count = b ? mt->mcount : mt->numel;
            uint64_t at = offsets[b * n + t] +
                          ((uint64_t)mt->expert0 * (uint64_t)mt->slice + (uint64_t)lo) *
                              sizeof(float);
            rc = h5_write_piece(fd, at, b ? bufs[b] + mt->moff : bufs[b] + mt->offset,
                                (uint64_t)count * sizeof(float), &pieces[(*n_pieces)++]);
        }
    }
    if (!rc && fsync(fd))
        rc = -errno;
    if (close(fd) && !rc)
        rc = -EIO;
    return rc;
}

/* One save in flight: what the three phases hand each other. */
typedef struct save_job {
    const char *path;
    const model *m;
    comm *cm;
    int P, rank, n;
    save_status *st;    /* phase 1's outcome, broadcast with ... */
    uint64_t *offsets;  /* ... the datasets' offsets [3 n] */
    h5_out *o;          /* rank 0: the file being written */
    h5_piece *pieces;   /* this rank's pieces [3 n + 1] */
    int n_pieces;
    char *mine;         /* phase 2's message: status, piece count, pieces */
    size_t mine_bytes;
} save_job;

/* Phase 1, rank 0: the layout; then its status and the offsets to all. */
static int save_layout(save_job *j, const ckpt_header *h)
{
    save_status *st = j->st;
    if (j->rank == 0 && (st->rc = comm_fault(j->cm, "checkpoint-layout")))
        snprintf(st->msg, MSG_LEN, "%s: laying the checkpoint out failed (injected)", j->path);
    else if (j->rank == 0)
        st->rc = lay_out(&j->o, j->path, j->m, h, j->offsets, st->msg, MSG_LEN);
    int rc = comm_bcast(j->cm, st, sizeof(save_status) + (size_t)3 * j->n * sizeof(uint64_t), 0);
    if (rc)
        st->rc = rc;
    return rc;
}

/* Phase 2, every rank: its share into the temporary file; its status and
 * pieces into j->mine (NULL when out of memory: the status alone goes). */
static void save_share(save_job *j)
{
    char tmp[MODE_PATH_MAX + 128];
    snprintf(tmp, sizeof(tmp), "%s.tmp", j->path);
    j->mine_bytes = sizeof(save_status) + sizeof(int64_t) + (size_t)(3 * j->n) * sizeof(h5_piece);
    j->mine = calloc(1, j->mine_bytes);
    save_status *ms = (save_status *)j->mine;
    if (!j->mine)
        return;
    if (j->st->rc) {
        ms->rc = j->st->rc; /* nothing to write into */
    } else if ((ms->rc = comm_fault(j->cm, "checkpoint-write")) ||
               (ms->rc = write_share(tmp, j->m, j->offsets, j->P, j->rank, j->pieces,
                                     &j->n_pieces))) {
        snprintf(ms->msg, MSG_LEN, "%s: writing the checkpoint's data failed: %s", j->path,
                 strerror((int)-ms->rc));
    } else if ((ms->rc = comm_fault(j->cm, "checkpoint-gather"))) {
        snprintf(ms->msg, MSG_LEN, "%s: sending the checkpoint's pieces failed (injected)",
                 j->path);
    }
    memcpy(j->mine + sizeof(save_status), &(int64_t){ j->n_pieces }, sizeof(int64_t));
    memcpy(j->mine + sizeof(save_status) + sizeof(int64_t), j->pieces,
           (size_t)j->n_pieces * sizeof(h5_piece));
}

/* Phase 3, rank 0: every rank's status from the gathered messages (all,
 * counts[P]); all good, their pieces and its own seal the file. */
static save_status save_seal(save_job *j, int grc, const char *all, const int *counts)
{
    save_status fin = { 0 };
    if (grc || !all) {
        fin.rc = grc ? grc : -ENOMEM;
        snprintf(fin.msg, MSG_LEN, "%s: gathering the checkpoint's pieces failed", j->path);
    }
    h5_piece *more = NULL;
    int n_more = 0;
    const char *at = all;
    for (int p = 0; !fin.rc && p < j->P; p++, at += counts[p - 1]) {
        const save_status *ps = (const save_status *)at;
        if (ps->rc) {
            fin.rc = ps->rc;
            if (p && j->st->rc == 0)
                snprintf(fin.msg, MSG_LEN, "rank %d: %.480s", p, ps->msg);
            else
                snprintf(fin.msg, MSG_LEN, "%s", p ? ps->msg : j->st->rc ? j->st->msg : ps->msg);
            break;
        }
        if (p == 0)
            continue; /* rank 0's own pieces are the writer's */
        int64_t np;
        memcpy(&np, at + sizeof(save_status), sizeof(np));
        h5_piece *grown = realloc(more, (size_t)(n_more + np + 1) * sizeof(h5_piece));
        if (!grown) {
            fin.rc = -ENOMEM;
            break;
        }
        more = grown;
        memcpy(more + n_more, at + sizeof(save_status) + sizeof(int64_t),
               (size_t)np * sizeof(h5_piece));
        n_more += (int)np;
    }
    if (!fin.rc && j->o) {
        /* rank 0's pieces were written through its own descriptor, not
         * the h5_out: pass them with the others */
        h5_piece *both = realloc(more, (size_t)(n_more + j->n_pieces + 1) * sizeof(h5_piece));
        if (!both) {
            fin.rc = -ENOMEM;
        } else {
            more = both;
            memcpy(more + n_more, j->pieces, (size_t)j->n_pieces * sizeof(h5_piece));
            n_more += j->n_pieces;
            fin.rc = h5_out_finish(&j->o, more, n_more, fin.msg, MSG_LEN);
        }
    }
    free(more);
    h5_out_abandon(&j->o); /* a failure: the temporary goes, the old file stays */
    return fin;
}

/* Three phases with a fixed sequence of collectives whatever fails: the
 * layout broadcast, the shares gathered, the outcome broadcast. */
int checkpoint_save(const char *path, const model *m, const ckpt_header *h, comm *cm, char *err,
                    int err_len)
{
    save_job j = { .path = path, .m = m, .cm = cm, .P = comm_size(cm), .rank = comm_rank(cm),
                   .n = m->n_tensors };
    size_t off_bytes = (size_t)3 * j.n * sizeof(uint64_t);
    char *a = calloc(1, sizeof(save_status) + off_bytes);
    j.pieces = malloc((size_t)(3 * j.n + 1) * sizeof(h5_piece));
    int *counts = malloc((size_t)j.P * sizeof(int));
    if (!a || !j.pieces || !counts) {
        free(a);
        free(j.pieces);
        free(counts);
        snprintf(err, (size_t)err_len, "%s: out of memory", path);
        return -ENOMEM; /* before any collective: the caller ends the job */
    }
    j.st = (save_status *)a;
    j.offsets = (uint64_t *)(a + sizeof(save_status));
    save_layout(&j, h);
    save_share(&j);
    void *all = NULL;
    int grc = comm_gather_bytes(cm, j.mine ? j.mine : (char *)j.st,
                                j.mine ? (int)j.mine_bytes : (int)sizeof(save_status), &all,
                                counts);
    save_status fin = { 0 };
    if (j.rank == 0)
        fin = save_seal(&j, grc, all, counts);
    int rc = comm_bcast(cm, &fin, sizeof(fin), 0);
    if (!rc)
        rc = (int)fin.rc;
    if (rc)
        snprintf(err, (size_t)err_len, "%s", fin.msg[0] ? fin.msg : "writing the checkpoint failed");
    free(counts);
    free(all);
    free(j.mine);
    free(j.pieces);
    free(a);
    return rc;
}

/* ---- reading: one open per rank, one version for all ------------------ */

struct ckpt_file {
    h5_in in;   /* the one open: the seal is checked and HDF5 reads through it */
    hid_t h5;
    st_file *st; /* or a safetensors file (checkpoint_st.h): in and h5 unused */
};

/* Opens before the ranks give up on holding one version of a file that is
 * being replaced (a live run's checkpoint, every step at most). */
#define CKPT_OPEN_TRIES 20

/* The seal, checked by every rank on a 1/P slice of the body through its
 * own open: each CRCs its slice, rank 0 combines them in order and compares
 * with the user block.  The outcome to all.  Collective. */
static int check_seal(const h5_in *in, comm *cm, char *err, int err_len)
{
    int P = comm_size(cm), rank = comm_rank(cm);
    if (P == 1)
        return h5_in_check(in, err, err_len);
    struct part {
        int64_t rc;
        uint64_t len;
        uint32_t crc;
    } mine = { 0, 0, 0 };
    mine.rc = h5_in_part_crc(in, rank, P, &mine.crc, &mine.len);
    void *all = NULL;
    int *counts = malloc((size_t)P * sizeof(int));
    int rc = counts ? comm_gather_bytes(cm, &mine, (int)sizeof(mine), &all, counts) : -ENOMEM;
    save_status fin = { 0 };
    if (rank == 0) {
        const struct part *parts = all;
        uint32_t crc = 0;
        fin.rc = rc ? rc : all ? 0 : -ENOMEM;
        for (int p = 0; !fin.rc && p < P; p++) {
            if (parts[p].rc)
                fin.rc = parts[p].rc;
            else
                crc = h5_crc32_combine(crc, parts[p].crc, parts[p].len);
        }
        if (fin.rc) /* unreadable, not ours: the one-process check says which */
            h5_in_check(in, fin.msg, MSG_LEN);
        else
            fin.rc = h5_in_seal_matches(in, crc, fin.msg, MSG_LEN);
        if (fin.rc && !fin.msg[0])
            snprintf(fin.msg, MSG_LEN, "%.400s: cannot be read", in->path);
    }
    if (comm_bcast(cm, &fin, sizeof(fin), 0) && !fin.rc)
        fin.rc = -EIO;
    if (fin.rc)
        snprintf(err, (size_t)err_len, "%s", fin.msg);
    free(counts);
    free(all);
    return (int)fin.rc;
}

static int read_meta(hid_t f, const char *path, ckpt_meta *meta, char *err, int err_len)
{
    char *seed = h5_attr_read_string(f, "seed");
    meta->config = h5_attr_read_string(f, "config");
    int rc = 0;
    if (!meta->config || !seed || h5_attr_read_long(f, "step", &meta->step)) {
        snprintf(err, (size_t)err_len,
                 "%s: not a mode checkpoint (missing attribute config, seed or step)", path);
        rc = -EINVAL;
        ckpt_meta_clear(meta);
    } else if (meta->step < 0 || meta->step > MODE_MAX_STEPS) {
        /* numbers read from a file are checked as the config's are */
        snprintf(err, (size_t)err_len, "%s: attribute step = %ld: expected a step in [0, "
                 "10^12]", path, meta->step);
        rc = -EINVAL;
        ckpt_meta_clear(meta);
    } else if (!num_parse_u64(seed, &meta->seed)) {
        snprintf(err, (size_t)err_len, "%s: attribute seed = %.40s: expected an integer in "
                 "[0, 2^64 - 1]", path, seed);
        rc = -EINVAL;
        ckpt_meta_clear(meta);
    } else {
        meta->data = H5Aexists(f, "data") > 0 ? h5_attr_read_string(f, "data") : NULL;
        if (H5Aexists(f, "train_flops_executed") > 0 &&
            (h5_attr_read_double(f, "train_flops_executed", &meta->train_flops_executed) ||
             !(meta->train_flops_executed >= 0.0 && meta->train_flops_executed < HUGE_VAL))) {
            snprintf(err, (size_t)err_len, "%s: attribute train_flops_executed = %g: expected "
                     "a finite count >= 0", path, meta->train_flops_executed);
            rc = -EINVAL;
            ckpt_meta_clear(meta);
        }
    }
    free(seed);
    return rc;
}

/* One try at checkpoint_open: every rank opens path once and the ranks
 * compare the seals they opened (a rename between two ranks' opens gives
 * them two versions: *again; ranks that read different files, a checkpoint
 * of another run on one node, are told apart by name), check the seal
 * through their opens, and HDF5 opens the same files (*again when a rename
 * came between).  Collective: every rank returns the same. */
static int open_once(ckpt_file *f, const char *path, ckpt_meta *meta, comm *cm, bool *again,
                     char *err, int err_len)
{
    *again = false;
    int rc = h5_in_open(&f->in, path, err, err_len);
    if (!(rc = comm_agree(cm, rc, err, err_len))) {
        char text[MODE_PATH_MAX + 96];
        h5_in_seal_text(&f->in, text, sizeof(text));
        rc = comm_agree_text(cm, text, err, err_len);
        *again = rc == -EINVAL;
    }
    if (rc)
        return rc;
    if ((rc = check_seal(&f->in, cm, err, err_len)))
        return rc < 0 ? rc : -EIO;
    bool replaced = false;
    f->h5 = h5_in_hdf5(&f->in, &replaced, err, err_len);
    rc = f->h5 < 0 ? (replaced ? -EAGAIN : -EIO) : read_meta(f->h5, path, meta, err, err_len);
    rc = comm_agree(cm, rc, err, err_len);
    *again = rc == -EAGAIN;
    return rc;
}

int checkpoint_open(ckpt_file **out, const char *path, ckpt_meta *meta, comm *cm, char *err,
                    int err_len)
{
    *out = NULL;
    memset(meta, 0, sizeof(*meta));
    /* the format by the name or the first bytes; every rank the same, or
     * they would go into different collectives */
    int is_st = st_is_safetensors(path), differs = -1;
    int rc0 = comm_same_bytes(cm, &is_st, sizeof(is_st), &differs);
    if (rc0 || differs >= 0) {
        snprintf(err, (size_t)err_len, "%s: ranks disagree on its format (rank %d reads %s)",
                 path, differs, is_st ? "HDF5" : "safetensors");
        return rc0 ? rc0 : -EINVAL;
    }
    if (is_st) {
        ckpt_file *kept = calloc(1, sizeof(*kept));
        if (!kept) {
            snprintf(err, (size_t)err_len, "%s: out of memory", path);
            return comm_agree(cm, -ENOMEM, err, err_len);
        }
        kept->h5 = -1;
        kept->in.fd = -1;
        int rc = comm_agree(cm, 0, err, err_len);
        if (!rc)
            rc = ckpt_st_open(&kept->st, path, meta, cm, err, err_len);
        if (rc)
            free(kept);
        else
            *out = kept;
        return rc;
    }
    h5_quiet();
    for (int attempt = 1;; attempt++) {
        ckpt_file f = { .h5 = -1 };
        bool again = false;
        int rc = open_once(&f, path, meta, cm, &again, err, err_len);
        ckpt_file *kept = NULL;
        if (!rc) { /* open_once agreed: every rank is here */
            if (!(kept = malloc(sizeof(*kept)))) {
                snprintf(err, (size_t)err_len, "%s: out of memory", path);
                rc = -ENOMEM;
            }
            if (!(rc = comm_agree(cm, rc, err, err_len))) {
                *kept = f;
                *out = kept;
                return 0;
            }
        }
        free(kept);
        if (f.h5 >= 0)
            H5Fclose(f.h5);
        h5_in_close(&f.in);
        ckpt_meta_clear(meta);
        if (!again || attempt == CKPT_OPEN_TRIES) {
            size_t at = strlen(err);
            if (again)
                snprintf(err + at, (size_t)err_len - at, "; opened %d times over a second: if "
                         "a run is rewriting it, read it again", attempt);
            return rc;
        }
        nanosleep(&(struct timespec){ .tv_nsec = 50000000 }, NULL);
    }
}

void checkpoint_close(ckpt_file **pf)
{
    ckpt_file *f = *pf;
    if (!f)
        return;
    if (f->st) {
        st_close(&f->st);
        free(f);
        *pf = NULL;
        return;
    }
    if (f->h5 >= 0)
        H5Fclose(f->h5);
    h5_in_close(&f->in);
    free(f);
    *pf = NULL;
}

int checkpoint_read_meta(const char *path, ckpt_meta *meta, comm *cm, char *err, int err_len)
{
    ckpt_file *f = NULL;
    int rc = checkpoint_open(&f, path, meta, cm, err, err_len);
    checkpoint_close(&f);
    return rc;
}

/* The tensors into buf: shared ones whole, an expert tensor's rows of the
 * experts this model holds. */
/* Into buf at each tensor's offset, or for the moments (moments) at moff
 * the part the rank keeps: a sharded optimizer's piece of a shared tensor
 * is read whole into the gradient buffer (scratch until the next step's
 * backward, which zeroes it first) and its piece copied. */
static const char *ckpt_path(const ckpt_file *f)
{
    return f->st ? f->st->path : f->in.path;
}

/* Tensor name of shape d (whole) into to: all of it, or with expert_rows
 * the rows [row0, row0 + rows) of its first dimension; from either format.
 * why says what failed. */
static int read_floats(const ckpt_file *f, const char *name, float *to, const tensor_desc *d,
                       bool expert_rows, long row0, long rows, char *why, int why_len)
{
    hsize_t dims[3];
    int64_t shape[3];
    for (int i = 0; i < d->ndim; i++)
        dims[i] = (hsize_t)(shape[i] = d->shape[i]);
    if (f->st)
        return st_read_f32(f->st, name, to, d->ndim, shape, expert_rows ? row0 : 0,
                           expert_rows ? rows : d->shape[0], why, why_len);
    return expert_rows ? h5_read_floats_rows(f->h5, name, to, d->ndim, dims, (hsize_t)row0,
                                             (hsize_t)rows, why, why_len)
                       : h5_read_floats(f->h5, name, to, d->ndim, dims, why, why_len);
}

static int read_tensors(const ckpt_file *f, model *m, const char *prefix, float *buf,
                        bool moments, char *err, int err_len)
{
    for (int t = 0; t < m->n_tensors; t++) {
        const model_tensor *mt = &m->tensors[t];
        bool piece = moments && (mt->mlo != 0 || mt->mcount != mt->numel);
        float *to = piece ? m->grads + mt->offset : moments ? buf + mt->moff : buf + mt->offset;
        char name[MODE_TENSOR_PATH + 16], why[256];
        snprintf(name, sizeof(name), "%s%s", prefix, mt->path);
        int rc = read_floats(f, name, to, &mt->desc, mt->desc.expert_dim, mt->expert0,
                             mt->experts, why, sizeof(why));
        if (rc) {
            snprintf(err, (size_t)err_len, "%s: %s", ckpt_path(f), why);
            return rc;
        }
        if (piece)
            memcpy(buf + mt->moff, to + mt->mlo, (size_t)mt->mcount * sizeof(float));
    }
    return 0;
}

bool checkpoint_has_moments(const ckpt_file *f)
{
    return f->st ? ckpt_st_has_optim(f->st) : true;
}

int checkpoint_read(ckpt_file *f, model *m, bool with_optim, comm *cm, char *err, int err_len)
{
    const char *path = ckpt_path(f);
    int rc = read_tensors(f, m, "", m->params, false, err, err_len);
    if (!rc && with_optim)
        rc = read_tensors(f, m, "optim/m/", m->adam_m, true, err, err_len);
    if (!rc && with_optim)
        rc = read_tensors(f, m, "optim/v/", m->adam_v, true, err, err_len);
    for (int t = 0; !rc && with_optim && t < m->n_tensors; t++) { /* a second moment: >= 0 */
        const model_tensor *mt = &m->tensors[t];
        for (long i = 0; i < mt->mcount; i++)
            if (m->adam_v[mt->moff + (size_t)i] < 0.0f) {
                snprintf(err, (size_t)err_len, "%s: dataset 'optim/v/%s' holds %g at element %ld "
                         "of this rank's part: a second moment is never negative", path, mt->path,
                         (double)m->adam_v[mt->moff + (size_t)i], i);
                rc = -EINVAL;
                break;
            }
    }
    return comm_agree(cm, rc, err, err_len);
}

int checkpoint_load(const char *path, model *m, bool with_optim, comm *cm, char *err,
                    int err_len)
{
    ckpt_file *f = NULL;
    ckpt_meta meta;
    int rc = checkpoint_open(&f, path, &meta, cm, err, err_len);
    ckpt_meta_clear(&meta);
    if (!rc)
        rc = checkpoint_read(f, m, with_optim, cm, err, err_len);
    checkpoint_close(&f);
    return rc;
}

/* ---- upcycling (checkpoint_init_from) ------------------------------------ */

/* The shape of dataset name in f: its dimensions (at most 3), or -ENOENT. */
static int dataset_shape(const ckpt_file *cf, const char *name, int *nd, hsize_t dims[3])
{
    if (cf->st) {
        long d[3];
        int rc = ckpt_st_shape(cf->st, name, nd, d);
        for (int i = 0; !rc && i < *nd; i++)
            dims[i] = (hsize_t)d[i];
        return rc;
    }
    hid_t f = cf->h5;
    if (H5Lexists(f, "layers", H5P_DEFAULT) <= 0 && strncmp(name, "layers/", 7) == 0)
        return -ENOENT;
    htri_t there = H5Oexists_by_name(f, name, H5P_DEFAULT);
    if (there <= 0)
        return -ENOENT;
    hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
    if (ds < 0)
        return -ENOENT;
    hid_t sp = H5Dget_space(ds);
    *nd = H5Sget_simple_extent_ndims(sp);
    int rc = *nd >= 1 && *nd <= 3 ? 0 : -EINVAL;
    if (!rc)
        H5Sget_simple_extent_dims(sp, dims, NULL);
    H5Sclose(sp);
    H5Dclose(ds);
    return rc;
}

/* The layer index of "layers/<l>/...", or -1. */
static int path_layer(const char *path)
{
    int l = -1;
    return sscanf(path, "layers/%d/", &l) == 1 ? l : -1;
}

/* Expert e's hidden units [0, h) re-drawn: `reinit` of them, the same for
 * the expert's three tensors (keyed by layer and expert). */
static void reinit_units(unsigned char *pick, int h, double reinit, uint64_t seed, int li, int e)
{
    memset(pick, 0, (size_t)h);
    int n = (int)lround(reinit * h);
    pcg32 g;
    pcg32_keyed(&g, seed, PCG_KEY_UPCYCLE, (uint64_t)li, (uint64_t)e);
    for (int k = 0; k < n;) { /* n distinct units */
        int u = (int)pcg32_bounded(&g, (uint32_t)h);
        if (!pick[u])
            pick[u] = 1, k++;
    }
}

/* Tensor mt of m from the 2-D source src [r0][c0]: each held expert (or
 * the one tensor) a slice of the hidden units, re-drawn in part, noised. */
static int upcycle_tensor(const model_tensor *mt, float *dst, const float *src, const hsize_t *sd,
                          const ckpt_upcycle *u, int t, char *err, int err_len)
{
    const tensor_desc *d = &mt->desc;
    bool ex = d->expert_dim;
    long r = ex ? d->shape[1] : d->shape[0], c = ex ? d->shape[2] : d->shape[1];
    long r0 = (long)sd[0], c0 = (long)sd[1];
    /* hidden along the columns ([d][h] from [d][f0]) or the rows ([h][d]) */
    bool cols = r == r0 && c > 0 && c0 % c == 0;
    bool rows = !cols && c == c0 && r > 0 && r0 % r == 0;
    if ((d->ndim != (ex ? 3 : 2)) || (!cols && !rows)) {
        snprintf(err, (size_t)err_len,
                 "%s [%ld][%ld] cannot start from %s [%ld][%ld]: expected the same width and a "
                 "hidden width dividing the source's", mt->path, r, c, d->upcycle_from, r0, c0);
        return -EINVAL;
    }
    long h = cols ? c : r, pieces = (cols ? c0 : r0) / h;
    int n = ex ? mt->experts : 1, li = path_layer(mt->path);
    unsigned char *pick = malloc((size_t)h);
    if (!pick)
        return -ENOMEM;
    for (int l = 0; l < n; l++) {
        int e = ex ? mt->expert0 + l : 0;
        long s = e % pieces;
        float *out = dst + (size_t)l * r * c;
        for (long i = 0; i < r; i++)
            for (long j = 0; j < c; j++)
                out[i * c + j] = cols ? src[i * c0 + s * h + j] : src[(s * h + i) * c0 + j];
        reinit_units(pick, (int)h, u->reinit, u->seed, li, e);
        pcg32 g;
        pcg32_keyed(&g, u->seed, PCG_KEY_UPCYCLE + 1, (uint64_t)t, (uint64_t)e);
        for (long i = 0; i < r; i++)
            for (long j = 0; j < c; j++) {
                float *w = &out[i * c + j];
                if (pick[cols ? j : i])
                    *w = d->init_std * pcg32_normal(&g);
                else if (u->noise > 0.0)
                    *w += (float)u->noise * d->init_std * pcg32_normal(&g);
            }
    }
    free(pick);
    return 0;
}

static void add_name(char *list, int len, const char *name)
{
    size_t at = strlen(list);
    if (at + strlen(name) + 3 < (size_t)len)
        snprintf(list + at, (size_t)len - at, "%s%s", at ? ", " : "", name);
}

int checkpoint_upcycle(ckpt_file *file, model *m, const ckpt_upcycle *u, comm *cm,
                       char *summary, int summary_len, char *err, int err_len)
{
    char up[1024] = "", fresh[1024] = "";
    int n_up = 0, n_fresh = 0, n_read = 0, rc = 0;
    const char *path = ckpt_path(file);
    for (int t = 0; !rc && t < m->n_tensors; t++) {
        const model_tensor *mt = &m->tensors[t];
        int nd;
        hsize_t sd[3];
        char why[512];
        if (dataset_shape(file, mt->path, &nd, sd) == 0) { /* the file has it: as it is */
            rc = read_floats(file, mt->path, m->params + mt->offset, &mt->desc,
                             mt->desc.expert_dim, mt->expert0, mt->experts, why, sizeof(why));
            if (rc)
                snprintf(err, (size_t)err_len, "%s: %s", path, why);
            n_read++;
            continue;
        }
        char src[MODE_TENSOR_PATH + MODE_NAME_LEN];
        const char *slash = strrchr(mt->path, '/');
        snprintf(src, sizeof(src), "%.*s%s", slash ? (int)(slash - mt->path + 1) : 0, mt->path,
                 mt->desc.upcycle_from);
        if (!mt->desc.upcycle_from[0] || dataset_shape(file, src, &nd, sd) || nd != 2) {
            add_name(fresh, sizeof(fresh), mt->path);
            n_fresh++;
            continue;
        }
        float *buf = malloc((size_t)sd[0] * sd[1] * sizeof(float));
        if (!buf) {
            rc = -ENOMEM;
            break;
        }
        tensor_desc sdesc = { .ndim = 2, .shape = { (int)sd[0], (int)sd[1] } };
        rc = read_floats(file, src, buf, &sdesc, false, 0, 0, why, sizeof(why));
        if (rc)
            snprintf(err, (size_t)err_len, "%s: %s", path, why);
        else
            rc = upcycle_tensor(mt, m->params + mt->offset, buf, sd, u, t, why, sizeof(why));
        if (rc && !err[0])
            snprintf(err, (size_t)err_len, "%s: %s", path, why);
        free(buf);
        char pair[MODE_TENSOR_PATH + MODE_NAME_LEN + 8];
        snprintf(pair, sizeof(pair), "%s <- %s", mt->path, mt->desc.upcycle_from);
        add_name(up, sizeof(up), pair);
        n_up++;
    }
    if (!rc && n_read == 0) {
        snprintf(err, (size_t)err_len, "%s: none of the model's tensors is there", path);
        rc = -EINVAL;
    }
    if (summary)
        snprintf(summary, (size_t)summary_len, "%d tensors read; %d upcycled%s%s%s; %d fresh%s%s%s",
                 n_read, n_up, n_up ? " (" : "", up, n_up ? ")" : "", n_fresh,
                 n_fresh ? " (" : "", fresh, n_fresh ? ")" : "");
    return comm_agree(cm, rc, err, err_len);
}

int checkpoint_init_from(const char *path, model *m, const ckpt_upcycle *u, comm *cm,
                         char *summary, int summary_len, char *err, int err_len)
{
    ckpt_file *f = NULL;
    ckpt_meta meta;
    int rc = checkpoint_open(&f, path, &meta, cm, err, err_len);
    ckpt_meta_clear(&meta);
    if (!rc)
        rc = checkpoint_upcycle(f, m, u, cm, summary, summary_len, err, err_len);
    checkpoint_close(&f);
    return rc;
}
