/* Sharded expert state and its checkpoints under mpirun (run with 1, 2, 4
 * and 8 ranks).  A model with a moe layer of 8 experts and an integrated
 * layer of 4 (at 8 ranks: two groups of 4, each rank one expert):
 *   - each rank allocates only its experts, and initialisation gives them
 *     the bits of the whole model's (model_init skips the stream ahead);
 *   - the checkpoint written by all ranks into one file holds the whole
 *     tensors, bit for bit those of the unsharded model (moments filled by
 *     a function of each element's place in the whole tensor);
 *   - read back by the same ranks: bit for bit;
 *   - read by every placement of 1, 2, 4 and 8 ranks (rank 0 playing each
 *     rank in turn, one process): each gets its experts bit for bit, so a
 *     file written at any rank count resumes at any other;
 *   - all of it again with the optimizer sharded ([optim] shard,
 *     docs/sharding.md: each rank keeps the moments of its 1/P of every
 *     shared run): the file holds the whole moments, written by their
 *     owners, and every placement, sharded or not, reads its part;
 *   - a byte flipped in the region of the last expert (written by the last
 *     rank) is found by the seal before HDF5 parses anything, by one reader
 *     and by all ranks together.
 * Exit 0 on success; failures are printed with the rank and line. */
#include "core/comm/comm.h"
#include "core/io/checkpoint.h"
#include "core/io/h5util.h"
#include "mod/mod.h"
#include "moe/registry.h"
#include "moe/moe.h"
#include "moe/staged.h"
#include "check.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures, rank;

static const kind_ops *const *const kinds = mode_kind_ops;

static model *make_as(int ranks, int r, bool zero)
{
    model_dims dims = { .vocab = 16, .d_model = 8, .n_heads = 2, .d_head = 4, .d_ff = 12,
                        .n_layers = 3, .seq_len = 4, .ranks = ranks, .rank = r,
                        .shard_optim = zero };
    layer_spec specs[3];
    layer_spec_init(&specs[0], &dense_kind);
    layer_spec_init(&specs[1], &moe_kind);
    layer_spec_init(&specs[2], &integrated_kind);
    char why[128];
    if (layer_spec_set(&specs[1], &moe_kind, "experts", "8", why, sizeof(why)) ||
        layer_spec_set(&specs[2], &integrated_kind, "experts", "4", why, sizeof(why))) {
        fprintf(stderr, "layer_spec_set: %s\n", why);
        exit(1);
    }
    model *m = NULL;
    char err[256];
    if (build_model(&m, &dims, specs, kinds, 1, err, sizeof(err))) {
        fprintf(stderr, "rank %d: build_model: %s\n", rank, err);
        exit(1);
    }
    model_init(m, 5);
    /* moments: a function of the element's place in the whole tensor */
    for (int t = 0; t < m->n_tensors; t++) {
        const model_tensor *mt = &m->tensors[t];
        long first = (long)mt->expert0 * mt->slice + mt->mlo;
        for (long i = 0; i < mt->mcount; i++) {
            double g = (double)(first + i);
            m->adam_m[mt->moff + (size_t)i] = (float)sin(0.37 * g + t);
            m->adam_v[mt->moff + (size_t)i] = (float)(1.0 + cos(0.11 * g * (t + 1)));
        }
    }
    return m;
}

static model *make(int ranks, int r)
{
    return make_as(ranks, r, false);
}

/* Every tensor of a (a placement's share) against the same rows of the
 * whole model w, bit for bit; buffers 0 params, 1 and 2 the moments. */
static void same_as_whole(const model *a, const model *w, const char *what)
{
    const float *ab[3] = { a->params, a->adam_m, a->adam_v };
    const float *wb[3] = { w->params, w->adam_m, w->adam_v };
    for (int t = 0; t < a->n_tensors; t++) {
        const model_tensor *at = &a->tensors[t], *wt = &w->tensors[t];
        size_t skip = (size_t)at->expert0 * (size_t)at->slice;
        for (int b = 0; b < 3; b++) /* the moments: the part the rank keeps */
            CHECK(!memcmp(b ? ab[b] + at->moff : ab[b] + at->offset,
                          wb[b] + wt->offset + skip + (b ? (size_t)at->mlo : 0),
                          (size_t)(b ? at->mcount : at->numel) * sizeof(float)),
                  "%s: %s (buffer %d, experts %d..%d) differs from the whole model's", what,
                  at->path, b, at->expert0, at->expert0 + at->experts - 1);
    }
}

static void zero_state(model *m)
{
    memset(m->params, 0xff, m->n_params * sizeof(float)); /* NaN: a row not read shows */
    memset(m->adam_m, 0xff, m->n_moments * sizeof(float));
    memset(m->adam_v, 0xff, m->n_moments * sizeof(float));
}

/* Steps 2 to 4 with the optimizer sharded: written at P sharded ranks
 * into path, read back by them, and by every placement of 1, 2, 4 and 8
 * ranks, sharded and not (rank 0 playing each rank). */
static void sharded_round_trip(comm *c, int P, const char *path, const model *whole)
{
    char err[1024] = "";
    model *z = make_as(P, rank, true);
    CHECK(P == 1 || (z->optim_shards == P && z->n_moments < z->n_params),
          "sharded at %d ranks: %zu moments of %zu parameters", P, z->n_moments, z->n_params);
    same_as_whole(z, whole, "sharded: initialisation");
    int rc = checkpoint_save(path, z, &(ckpt_header){ "[run]\n", 7, 11, NULL, 0.0 }, c, err,
                             sizeof(err));
    CHECK(rc == 0, "sharded save: %s", err);
    model *b = make_as(P, rank, true);
    zero_state(b);
    rc = checkpoint_load(path, b, true, c, err, sizeof(err));
    CHECK(rc == 0, "sharded load: %s", err);
    same_as_whole(b, whole, "sharded: read back at the same rank count");
    free_model(&b);
    free_model(&z);
    if (rank != 0)
        return;
    for (int zero = 0; zero < 2; zero++)
        for (int Q = 1; Q <= 8; Q *= 2)
            for (int q = 0; q < Q; q++) {
                model *r = make_as(Q, q, zero);
                zero_state(r);
                rc = checkpoint_load(path, r, true, NULL, err, sizeof(err));
                CHECK(rc == 0, "load as rank %d of %d: %s", q, Q, err);
                char what[96];
                snprintf(what, sizeof(what), "written sharded at %d ranks, read as rank %d of %d%s",
                         P, q, Q, zero ? " (sharded)" : "");
                same_as_whole(r, whole, what);
                free_model(&r);
            }
}

int main(int argc, char **argv)
{
    comm *c = NULL;
    if (comm_init(&c, &argc, &argv)) {
        fprintf(stderr, "MPI initialisation failed\n");
        return 1;
    }
    rank = comm_rank(c);
    int P = comm_size(c);
    char dir[64] = "/tmp/mode-shard-XXXXXX", path[128], err[1024] = "";
    if (rank == 0 && !mkdtemp(dir))
        dir[0] = '\0';
    comm_bcast(c, dir, sizeof(dir), 0);
    snprintf(path, sizeof(path), "%s/ckpt.h5", dir);

    model *a = make(P, rank), *whole = make(1, 0);
    /* 1. a rank holds its experts only, initialised as the whole model's */
    const model_tensor *w1 = NULL;
    for (int t = 0; t < a->n_tensors; t++)
        if (!strcmp(a->tensors[t].path, "layers/1/experts_w1"))
            w1 = &a->tensors[t];
    CHECK(w1 && w1->experts == (P <= 8 ? 8 / P : 1) && w1->numel == w1->experts * 8 * 12,
          "layers/1/experts_w1: %d experts, %ld values held", w1 ? w1->experts : -1,
          w1 ? w1->numel : -1);
    same_as_whole(a, whole, "initialisation");

    /* 2. written by all ranks into one file */
    int rc = checkpoint_save(path, a, &(ckpt_header){ "[run]\n", 7, 11, NULL, 0.0 }, c, err, sizeof(err));
    CHECK(rc == 0, "save: %s", err);
    /* 3. read back by the same ranks */
    model *b = make(P, rank);
    zero_state(b);
    ckpt_meta meta;
    rc = checkpoint_read_meta(path, &meta, c, err, sizeof(err));
    CHECK(rc == 0 && meta.step == 7 && meta.seed == 11, "read_meta: %s", err);
    ckpt_meta_clear(&meta);
    rc = checkpoint_load(path, b, true, c, err, sizeof(err));
    CHECK(rc == 0, "load: %s", err);
    same_as_whole(b, whole, "read back at the same rank count");
    free_model(&b);

    if (rank == 0) {
        /* 4. every placement of 1, 2, 4 and 8 ranks reads its share */
        for (int Q = 1; Q <= 8; Q *= 2) {
            for (int q = 0; q < Q; q++) {
                model *r = make(Q, q);
                zero_state(r);
                rc = checkpoint_read_meta(path, &meta, NULL, err, sizeof(err));
                ckpt_meta_clear(&meta);
                if (!rc)
                    rc = checkpoint_load(path, r, true, NULL, err, sizeof(err));
                CHECK(rc == 0, "load as rank %d of %d: %s", q, Q, err);
                char what[64];
                snprintf(what, sizeof(what), "written at %d ranks, read as rank %d of %d", P, q, Q);
                same_as_whole(r, whole, what);
                free_model(&r);
            }
        }
    }
    {
        char zpath[160];
        snprintf(zpath, sizeof(zpath), "%s/zero.h5", dir);
        sharded_round_trip(c, P, zpath, whole);
    }
    if (rank == 0) {
        /* 5. a flipped byte in the last expert's rows, found by the seal */
        hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
        hid_t ds = H5Dopen2(f, "layers/1/experts_w2", H5P_DEFAULT);
        haddr_t at = H5Dget_offset(ds) + (haddr_t)(7 * 12 * 8 + 5) * sizeof(float);
        H5Dclose(ds);
        H5Fclose(f);
        FILE *fp = fopen(path, "r+b");
        CHECK(fp && !fseek(fp, (long)at, SEEK_SET), "open %s", path);
        int ch = fp ? fgetc(fp) : EOF;
        if (fp && ch != EOF && !fseek(fp, (long)at, SEEK_SET))
            fputc(ch ^ 0x10, fp);
        if (fp)
            fclose(fp);
        err[0] = '\0';
        rc = checkpoint_read_meta(path, &meta, NULL, err, sizeof(err));
        CHECK(rc != 0 && strstr(err, "corrupted"), "a flipped byte not found: %s", err);
        printf("a byte flipped in expert 7's rows (written by rank %d): %s\n", P - 1, err);
    }
    /* 6. ... and by all ranks together (after rank 0 flipped it) */
    comm_barrier(c);
    err[0] = '\0';
    rc = checkpoint_read_meta(path, &meta, c, err, sizeof(err));
    ckpt_meta_clear(&meta);
    CHECK(rc != 0 && strstr(err, "corrupted"), "all ranks: a flipped byte not found: %s", err);

    free_model(&a);
    free_model(&whole);
    int bad = failures;
    comm_allreduce_max_int(c, &bad);
    if (rank == 0) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        if (system(cmd))
            bad = 1;
        printf("%s: %d rank(s): sharded checkpoint round trips %s\n", argv[0], P,
               bad ? "FAILED" : "ok");
    }
    comm_finalize(&c);
    return bad ? 1 : 0;
}
