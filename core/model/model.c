#include "core/model/model.h"
#include "core/model/lanes.h"
#include "core/util/finite.h"
#include "core/util/heap.h"

#include "core/kernels/matmul.h"
#include "core/kernels/parallel.h"
#include "core/rng/pcg32.h"

#include <errno.h>
#include <pthread.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first layer of the stack of layer l's kind (the one that holds what
 * the kind's layers share, layer.shared). */
static int first_of_kind(const model *m, int l)
{
    int k = 0;
    while (m->layers[k].kind != m->layers[l].kind)
        k++;
    return k;
}

/* Every layer's stack op (kind.h) at one point of a pass, in layer order:
 * the rows they say have left the stack, or the first error. */
static int stack_at(model *m, const fwd_args *a, const stack_call *c)
{
    int left = 0;
    for (int l = 0; l < m->dims.n_layers; l++) {
        layer *ly = &m->layers[l];
        int rc = ly->ops->stack ? ly->ops->stack(ly, a, c) : 0;
        if (rc < 0)
            return rc;
        left += rc;
    }
    return left;
}

void free_model(model **pm)
{
    model *m = *pm;
    if (!m)
        return;
    if (m->layers) {
        for (int l = 0; l < m->dims.n_layers; l++) {
            layer *ly = &m->layers[l];
            if (ly->ops && ly->state)
                ly->ops->free(ly);
            free(ly->w);
            free(ly->dw);
            if (ly->shared && first_of_kind(m, l) == l)
                free(ly->shared);
        }
    }
    free(m->layers);
    free(m->tensors);
    free(m->params);
    free(m->grads);
    free(m->adam_m);
    free(m->adam_v);
    free(m->resid);
    free(m->dresid[0]);
    free(m->dresid[1]);
    free(m->final_u);
    free(m->final_rstd);
    free(m->logits);
    free(m->inputs);
    free(m->targets);
    free(m->ws);
    free_rope_table(&m->rope);
    free(m->dec_x[0]);
    free(m->dec_x[1]);
    free(m->dec_u);
    free(m->lane_x[0]); /* lane_x[1], lane_u, lane_rstd: the same block */
    free(m);
    *pm = NULL;
}

static int add_tensor(model *m, int cap, const char *path, const tensor_desc *d, int layer_index)
{
    if (m->n_tensors >= cap)
        return -EINVAL;
    model_tensor *t = &m->tensors[m->n_tensors++];
    snprintf(t->path, sizeof(t->path), "%s", path);
    t->desc = *d;
    t->layer = layer_index;
    t->offset = m->n_params;
    t->numel = tensor_numel(d);
    t->expert0 = 0;
    t->experts = d->expert_dim ? d->shape[0] : 0;
    t->slice = d->expert_dim && d->shape[0] > 0 ? t->numel / d->shape[0] : 0;
    if (d->expert_dim) { /* this rank's experts only */
        int E = d->shape[0], P = m->dims.ranks;
        if (P > 1 && E % P && P % E)
            return -EDOM; /* E neither a multiple nor a divisor of P */
        t->expert0 = experts_first(E, P, m->dims.rank);
        t->experts = experts_local(E, P);
        t->numel = t->slice * t->experts;
    }
    t->moff = t->offset;
    t->mlo = 0;
    t->mcount = t->numel;
    /* keep every tensor 16-float aligned for the vector loops */
    m->n_params += ((size_t)t->numel + 15) & ~(size_t)15;
    m->n_moments = m->n_params;
    return 0;
}

static bool is_shared(const model *m, const model_tensor *t)
{
    return !t->desc.expert_dim || m->dims.ranks <= 1;
}

int model_shared_spans(const model *m, long cap, span *out)
{
    int n = 0;
    span last = { -1, 0 };
    for (int i = 0; i < m->n_tensors; i++) {
        const model_tensor *t = &m->tensors[i];
        if (!is_shared(m, t))
            continue;
        long off = (long)t->offset, left = t->numel;
        while (left > 0) {
            long take;
            if (n > 0 && last.offset + last.count == off && last.count < cap) {
                take = left < cap - last.count ? left : cap - last.count;
                last.count += take; /* adjacent: merged, up to cap */
            } else {
                take = left < cap ? left : cap;
                last = (span){ off, take };
                n++;
            }
            if (out)
                out[n - 1] = last;
            off += take;
            left -= take;
        }
    }
    return n;
}

span span_piece(span s, int P, int r)
{
    long lo = (long)((__int128)s.count * r / P), hi = (long)((__int128)s.count * (r + 1) / P);
    return (span){ s.offset + lo, hi - lo };
}

/* The moments' layout of a sharded optimizer (build_model): each tensor's
 * moff, mlo and mcount, n_moments and optim_shards. */
static int shard_moments(model *m)
{
    int P = m->dims.ranks, rank = m->dims.rank;
    if (P <= 1)
        return 0;
    int most = m->n_tensors * 2 + (int)(m->n_params / MODEL_SPAN_CAP) + 2;
    span *spans = malloc((size_t)most * sizeof(span));
    if (!spans)
        return -ENOMEM;
    int ns = model_shared_spans(m, MODEL_SPAN_CAP, spans), s = 0;
    size_t at = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        model_tensor *t = &m->tensors[i];
        t->mlo = 0;
        t->mcount = t->numel;
        if (is_shared(m, t)) { /* the part of it in this rank's pieces */
            long lo = (long)t->offset, hi = lo + t->numel, a = hi, b = hi;
            for (; s < ns && spans[s].offset + spans[s].count <= lo && t->numel > 0; s++)
                ;
            for (int k = s; k < ns && spans[k].offset < hi; k++) {
                span pc = span_piece(spans[k], P, rank);
                long plo = pc.offset > lo ? pc.offset : lo;
                long phi = pc.offset + pc.count < hi ? pc.offset + pc.count : hi;
                if (plo < phi && a < b && plo != b) {
                    free(spans); /* a tensor over MODEL_SPAN_CAP: pieces apart */
                    return -EOVERFLOW;
                }
                if (plo < phi) {
                    a = plo < a ? plo : a;
                    b = phi;
                }
            }
            t->mlo = a < b ? a - lo : 0;
            t->mcount = a < b ? b - a : 0;
        }
        t->moff = at;
        at += ((size_t)t->mcount + 15) & ~(size_t)15;
    }
    free(spans);
    m->n_moments = at;
    m->optim_shards = P;
    return 0;
}

static float *alloc_floats(size_t n)
{
    /* 64-byte alignment: one cache line, an AVX-512 vector */
    size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
    float *p = aligned_alloc(64, bytes ? bytes : 64);
    if (p)
        memset(p, 0, bytes);
    return p;
}

int build_model(model **out, const model_dims *dims, const layer_spec *specs,
                const kind_ops *const *table, int max_seq, char *err, int err_len)
{
    int rc = -EINVAL;
    model *m = calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    m->dims = *dims;
    if (m->dims.ranks < 1) { /* unset: one rank holds everything */
        m->dims.ranks = 1;
        m->dims.rank = 0;
    }
    dims = &m->dims;
    m->max_seq = max_seq;
    int L = dims->n_layers;
    if (L < 1 || L > MODE_MAX_LAYERS) {
        snprintf(err, (size_t)err_len, "n_layers %d must be in [1, %d]", L, MODE_MAX_LAYERS);
        goto fail;
    }
    if (dims->d_model % dims->n_heads || dims->d_head * dims->n_heads != dims->d_model ||
        dims->d_head % 2) {
        snprintf(err, (size_t)err_len, "d_model %d must be n_heads %d times an even head width",
                 dims->d_model, dims->n_heads);
        goto fail;
    }
    m->layers = calloc((size_t)L, sizeof(layer));
    if (!m->layers)
        goto fail_nomem;

    /* Count tensors, then lay them out: tok_emb, layer 0..L-1, final_norm. */
    int cap = 2;
    for (int l = 0; l < L; l++) {
        const kind_ops *ops = kind_ops_lookup(table, specs[l].kind);
        if (!ops) {
            snprintf(err, (size_t)err_len, "layer %d: unknown kind '%s'", l, specs[l].kind);
            goto fail;
        }
        const layer_kind *k = ops->kind;
        if (k->validate && k->validate(&specs[l], dims, err, err_len))
            goto fail;
        m->layers[l].kind = k;
        m->layers[l].ops = ops;
        m->layers[l].spec = specs[l];
        m->layers[l].index = l;
        m->layers[l].n_tensors = k->tensors(&specs[l], dims, NULL, 0);
        cap += m->layers[l].n_tensors;
    }
    m->tensors = calloc((size_t)cap, sizeof(model_tensor));
    tensor_desc *descs = calloc((size_t)cap, sizeof(tensor_desc));
    if (!m->tensors || !descs) {
        free(descs);
        goto fail_nomem;
    }
    tensor_desc emb = { .name = "tok_emb", .ndim = 2, .shape = { dims->vocab, dims->d_model },
                        .init = INIT_NORMAL, .init_std = 0.02f, .decay = true };
    tensor_desc fnorm = { .name = "final_norm", .ndim = 1, .shape = { dims->d_model },
                          .init = INIT_ONES };
    add_tensor(m, cap, "tok_emb", &emb, -1);
    int first[MODE_MAX_LAYERS + 1];
    for (int l = 0; l < L; l++) {
        layer *ly = &m->layers[l];
        int n = ly->kind->tensors(&ly->spec, dims, descs, cap);
        first[l] = m->n_tensors;
        for (int t = 0; t < n; t++) {
            char path[MODE_TENSOR_PATH];
            snprintf(path, sizeof(path), "layers/%d/%s", l, descs[t].name);
            if (add_tensor(m, cap, path, &descs[t], l) == -EDOM) {
                snprintf(err, (size_t)err_len, "layer %d (%s): %d experts cannot be spread "
                         "over %d ranks: expected a multiple or a divisor of the rank count",
                         l, ly->kind->name, descs[t].shape[0], dims->ranks);
                free(descs);
                goto fail;
            }
        }
    }
    add_tensor(m, cap, "final_norm", &fnorm, -1);
    free(descs);

    m->params = alloc_floats(m->n_params);
    m->grads = alloc_floats(m->n_params);
    m->optim_shards = 1;
    if (dims->shard_optim && (rc = shard_moments(m))) {
        snprintf(err, (size_t)err_len, "[optim] shard: %s", rc == -EOVERFLOW
                 ? "a shared tensor over 2^30 elements cannot be sharded" : "out of memory");
        goto fail;
    }
    m->adam_m = alloc_floats(m->n_moments);
    m->adam_v = alloc_floats(m->n_moments);
    if (!m->params || !m->grads || !m->adam_m || !m->adam_v)
        goto fail_nomem;
    m->tok_emb = m->params + m->tensors[0].offset;
    m->dtok_emb = m->grads + m->tensors[0].offset;
    m->final_norm = m->params + m->tensors[m->n_tensors - 1].offset;
    m->dfinal_norm = m->grads + m->tensors[m->n_tensors - 1].offset;

    size_t rows = (size_t)max_seq * dims->seq_len, rd = rows * dims->d_model;
    m->ws_floats = 0;
    for (int l = 0; l < L; l++) {
        layer *ly = &m->layers[l];
        ly->w = calloc((size_t)ly->n_tensors, sizeof(float *));
        ly->dw = calloc((size_t)ly->n_tensors, sizeof(float *));
        if (!ly->w || !ly->dw)
            goto fail_nomem;
        for (int t = 0; t < ly->n_tensors; t++) {
            ly->w[t] = m->params + m->tensors[first[l] + t].offset;
            ly->dw[t] = m->grads + m->tensors[first[l] + t].offset;
        }
        const layer_kind *k = ly->kind;
        if (k->shared_bytes && first_of_kind(m, l) == l) {
            double bytes = k->shared_bytes(&ly->spec, dims, max_seq);
            if (!(ly->shared = alloc_floats((size_t)(bytes + 3.0) / sizeof(float))))
                goto fail_nomem;
        } else if (k->shared_bytes) {
            ly->shared = m->layers[first_of_kind(m, l)].shared;
        }
        if ((rc = ly->ops->build(ly, dims, max_seq))) {
            snprintf(err, (size_t)err_len, "layer %d (%s): cannot allocate its buffers", l,
                     ly->kind->name);
            goto fail;
        }
        long w = ly->kind->ws_floats(&ly->spec, dims, max_seq);
        if (w > m->ws_floats)
            m->ws_floats = w;
    }
    m->resid = alloc_floats((size_t)(L + 1) * rd);
    m->dresid[0] = alloc_floats(rd);
    m->dresid[1] = alloc_floats(rd);
    m->final_u = alloc_floats(rd);
    m->final_rstd = alloc_floats(rows);
    m->logits = alloc_floats(rows * (size_t)dims->vocab);
    m->inputs = calloc(rows, sizeof(token_t));
    m->targets = calloc(rows, sizeof(token_t));
    m->ws = alloc_floats((size_t)m->ws_floats);
    if (!m->resid || !m->dresid[0] || !m->dresid[1] || !m->final_u || !m->final_rstd ||
        !m->logits || !m->inputs || !m->targets || !m->ws)
        goto fail_nomem;
    if (build_rope_table(&m->rope, dims->seq_len, dims->d_head))
        goto fail_nomem;
    stack_call built = { .event = STACK_BUILT, .layers = m->layers, .n_layers = L,
                         .tok_emb = m->tok_emb, .dtok_emb = m->dtok_emb, .targets = m->targets,
                         .err = err, .err_len = err_len };
    if (err_len > 0)
        err[0] = '\0';
    if ((rc = stack_at(m, NULL, &built)) < 0) {
        if (err_len > 0 && !err[0])
            snprintf(err, (size_t)err_len, "the stack's layers cannot be joined (error %d)", rc);
        goto fail;
    }
    *out = m;
    return 0;

fail_nomem:
    snprintf(err, (size_t)err_len, "out of memory building the model");
    rc = -ENOMEM;
fail:
    free_model(&m);
    return rc ? rc : -EINVAL;
}

void model_init(model *m, uint64_t seed)
{
    for (int t = 0; t < m->n_tensors; t++) {
        const model_tensor *mt = &m->tensors[t];
        float *p = m->params + mt->offset;
        pcg32 rng;
        pcg32_keyed(&rng, seed, MODEL_INIT_KEY, (uint64_t)t, 0);
        if (mt->desc.expert_dim) /* two outputs a normal draw */
            pcg32_advance(&rng, 2u * (uint64_t)mt->expert0 * (uint64_t)mt->slice);
        for (long i = 0; i < mt->numel; i++) {
            switch (mt->desc.init) {
            case INIT_NORMAL: p[i] = mt->desc.init_std * pcg32_normal(&rng); break;
            case INIT_ONES: p[i] = 1.0f; break;
            case INIT_ZEROS: p[i] = 0.0f; break;
            }
        }
    }
    memset(m->adam_m, 0, m->n_moments * sizeof(float));
    memset(m->adam_v, 0, m->n_moments * sizeof(float));
    model_zero_grad(m);
}

void model_step_end(model *m, bool updated)
{
    for (int l = 0; l < m->dims.n_layers; l++) {
        layer *ly = &m->layers[l];
        if (ly->ops->step_end)
            ly->ops->step_end(ly, updated);
    }
}

void model_zero_grad(model *m)
{
    memset(m->grads, 0, m->n_params * sizeof(float));
}

const model_tensor *model_find_tensor(const model *m, const char *path)
{
    for (int t = 0; t < m->n_tensors; t++)
        if (strcmp(m->tensors[t].path, path) == 0)
            return &m->tensors[t];
    return NULL;
}

static fwd_args make_args(model *m, mode_ctx *ctx, const batch *b, fwd_mode mode, fwd_result *r)
{
    fwd_args a = {
        .ctx = ctx, .mm = { .pool = ctx ? ctx->pool : NULL, .bf16 = m->bf16 },
        .dims = &m->dims, .rope = m->rope, .mode = mode, .nseq = b->nseq,
        .seq_len = m->dims.seq_len, .step = b->step, .seq0 = b->seq0, .window = b->window,
        .tokens = m->inputs, .route = b->route, .seq_scale = 1.0f / (float)b->global_seqs, .ws = m->ws,
        .aux_loss = r ? &r->aux_loss : NULL, .side_loss = r ? &r->side_loss : NULL,
        .flops_executed = r ? &r->flops_executed : NULL,
    };
    return a;
}

int model_forward(model *m, mode_ctx *ctx, const batch *b, fwd_mode mode, fwd_result *r)
{
    const model_dims *dm = &m->dims;
    int S = dm->seq_len, d = dm->d_model, V = dm->vocab;
    if (b->nseq > m->max_seq || b->nseq <= 0)
        return -EINVAL;
    int n = b->nseq * S;
    size_t rd = (size_t)n * d;
    memset(r, 0, sizeof(*r));
    for (int s = 0; s < b->nseq; s++) {
        const token_t *tok = b->tokens + (size_t)s * (S + 1);
        for (int j = 0; j < S; j++) {
            if (tok[j] >= (token_t)V || tok[j + 1] >= (token_t)V)
                return -ERANGE;
            m->inputs[s * S + j] = tok[j];
            m->targets[s * S + j] = tok[j + 1];
        }
    }
    fwd_args a = make_args(m, ctx, b, mode, r);
    int rc = stack_at(m, &a, &(stack_call){ .event = STACK_BEGIN, .rows = n });
    if (rc < 0)
        return rc;
    double t0 = mode_now();
    embedding_forward(m->resid, m->tok_emb, m->inputs, n, d);
    mode_time_add(ctx, PHASE_OTHER, t0);
    for (int l = 0; l < dm->n_layers; l++) {
        layer *ly = &m->layers[l];
        float *out = m->resid + (size_t)(l + 1) * rd, *in = m->resid + (size_t)l * rd;
        if ((rc = ly->ops->forward(ly, &a, out, in)))
            return rc;
        stack_call c = { .event = STACK_LAYER, .rows = n, .at = l, .y = out, .x = in };
        if ((rc = stack_at(m, &a, &c)) < 0)
            return rc;
    }
    t0 = mode_now();
    rmsnorm_forward_pool(a.mm.pool, m->final_u, m->final_rstd, m->resid + (size_t)dm->n_layers * rd,
                         m->final_norm, n, d);
    if ((rc = stack_at(m, &a, &(stack_call){ .event = STACK_HEAD, .rows = n, .y = m->final_u })) < 0)
        return rc;
    /* tied head: logits = u tok_emb^T */
    matmul_pool(&a.mm, m->logits, V, m->final_u, d, false, m->tok_emb, d, true, n, V, d, 0.0f);
    float scale = 1.0f / ((float)b->global_seqs * (float)S);
    int counted = b->n_counted > 0 && b->n_counted < b->nseq ? b->n_counted * S : n;
    if (b->seq_ce) { /* evaluation: each sequence's loss, for their spread */
        r->ce_sum = 0.0;
        for (int s = 0; s < counted / S; s++) {
            size_t o = (size_t)s * S;
            if (b->tok_ce) { /* the same terms summed in the same order: the same bits */
                double sum = 0.0;
                for (int j = 0; j < S; j++) {
                    double v = cross_entropy(NULL, m->logits + (o + j) * V, m->targets + o + j,
                                             1, V, scale);
                    b->tok_ce[o + j] = (float)v;
                    sum += v;
                }
                b->seq_ce[s] = sum;
            } else {
                b->seq_ce[s] = cross_entropy(NULL, m->logits + o * V, m->targets + o, S, V,
                                             scale);
            }
            r->ce_sum += b->seq_ce[s];
        }
    } else {
        r->ce_sum = cross_entropy(mode == FWD_TRAIN ? m->logits : NULL, m->logits, m->targets,
                                  counted, V, scale);
    }
    r->n_positions = counted;
    r->flops_executed += b->nseq * model_head_flops_per_seq(dm);
    mode_time_add(ctx, PHASE_MATMUL, t0);
    return 0;
}

int model_backward(model *m, mode_ctx *ctx, const batch *b)
{
    return model_backward_hooked(m, ctx, b, NULL);
}

int model_backward_hooked(model *m, mode_ctx *ctx, const batch *b, const backward_hook *h)
{
    const model_dims *dm = &m->dims;
    int S = dm->seq_len, d = dm->d_model, V = dm->vocab, L = dm->n_layers;
    int n = b->nseq * S;
    size_t rd = (size_t)n * d;
    fwd_args a = make_args(m, ctx, b, FWD_TRAIN, NULL);
    double t0 = mode_now();
    /* logits holds d loss / d logits.  d u = dlogits tok_emb; d tok_emb += dlogits^T u */
    float *du = m->dresid[1];
    matmul_pool(&a.mm, du, d, m->logits, V, false, m->tok_emb, d, false, n, d, V, 0.0f);
    matmul_pool(&a.mm, m->dtok_emb, d, m->logits, V, true, m->final_u, d, false, V, d, n, 1.0f);
    float *dx = m->dresid[0];
    memset(dx, 0, rd * sizeof(float));
    rmsnorm_backward_pool(a.mm.pool, dx, m->dfinal_norm, du, m->resid + (size_t)L * rd,
                          m->final_norm, m->final_rstd, n, d);
    mode_time_add(ctx, PHASE_MATMUL, t0);
    for (int l = L - 1; l >= 0; l--) {
        layer *ly = &m->layers[l];
        float *dy = m->dresid[(L - 1 - l) & 1];
        float *dxl = m->dresid[(L - l) & 1];
        memset(dxl, 0, rd * sizeof(float));
        int rc = ly->ops->backward(ly, &a, dxl, dy, m->resid + (size_t)l * rd);
        if (!rc && h && h->layer_done)
            rc = h->layer_done(h->user, l);
        if (rc)
            return rc;
    }
    t0 = mode_now();
    embedding_backward(m->dtok_emb, m->dresid[L & 1], m->inputs, n, d);
    mode_time_add(ctx, PHASE_OTHER, t0);
    return 0;
}

double model_flops_per_seq(const model *m, double *per_layer)
{
    const layer_kind *kinds[MODE_MAX_LAYERS];
    layer_spec *specs = malloc((size_t)m->dims.n_layers * sizeof(layer_spec));
    if (!specs)
        return (double)NAN;
    for (int l = 0; l < m->dims.n_layers; l++) {
        kinds[l] = m->layers[l].kind;
        specs[l] = m->layers[l].spec;
    }
    double f = stack_flops_per_seq(&m->dims, m->dims.n_layers, specs, kinds, per_layer);
    free(specs);
    return f;
}

int model_decode_begin(model *m, int max_len)
{
    const model_dims *dm = &m->dims;
    if (max_len < 1)
        return -EINVAL;
    /* past the training length: RoPE's table for every position (the
     * first S rows are the same numbers), the caches a window of S */
    if (max_len > m->rope->max_pos) {
        rope_table *t = NULL;
        if (build_rope_table(&t, max_len, dm->d_head))
            return -ENOMEM;
        free_rope_table(&m->rope);
        m->rope = t;
    }
    m->dec_len = max_len;
    max_len = max_len < dm->seq_len ? max_len : dm->seq_len;
    if (!m->dec_x[0]) {
        m->dec_x[0] = alloc_floats((size_t)dm->d_model);
        m->dec_x[1] = alloc_floats((size_t)dm->d_model);
        m->dec_u = alloc_floats((size_t)dm->d_model);
        if (!m->dec_x[0] || !m->dec_x[1] || !m->dec_u)
            return -ENOMEM;
    }
    for (int l = 0; l < dm->n_layers; l++) {
        layer *ly = &m->layers[l];
        if (!ly->ops->decode_begin)
            return -ENOTSUP;
        int rc = ly->ops->decode_begin(ly, dm, max_len);
        if (rc)
            return rc;
    }
    return 0;
}

/* One model_decode_begin on a thread of its own: glibc hands the blocks the
 * thread freed into its cache (tcache) back to the arena when the thread
 * ends, so that the reading after it does not count them as in use. */
typedef struct decode_begin_call {
    model *m;
    int len, rc;
} decode_begin_call;

static void *decode_begin_thread(void *p)
{
    decode_begin_call *c = p;
    c->rc = model_decode_begin(c->m, c->len);
    return NULL;
}

static int decode_begin_apart(model *m, int len)
{
    decode_begin_call c = { .m = m, .len = len };
    pthread_t t;
    if (pthread_create(&t, NULL, decode_begin_thread, &c))
        return -EAGAIN;
    pthread_join(t, NULL);
    return c.rc;
}

int model_decode_cache_bytes(model *m, double *bytes)
{
    int S = m->dims.seq_len, half = S / 2;
    if (m->dec_len > 0 || half < 1)
        return -EINVAL; /* the caches only grow: measured before their first use */
    int rc = decode_begin_apart(m, half);
    double at_half = heap_bytes_in_use();
    if (!rc)
        rc = decode_begin_apart(m, S);
    if (rc)
        return rc;
    /* growing to S allocates every cache (and the fixed buffers) again:
     * what is left over is the S - S/2 positions' */
    *bytes = (heap_bytes_in_use() - at_half) / (double)(S - half);
    return 0;
}

int model_decode_step(model *m, mode_ctx *ctx, token_t token, int32_t pos, float *logits,
                      unsigned char *taken)
{
    const model_dims *dm = &m->dims;
    int d = dm->d_model;
    if (token >= (token_t)dm->vocab || pos < 0 || pos >= m->dec_len)
        return -ERANGE;
    batch b = { .nseq = 1, .global_seqs = 1, .route = m->route };
    fwd_args a = make_args(m, ctx, &b, FWD_EVAL_CAUSAL, NULL);
    a.tokens = &token;
    int rc = stack_at(m, &a, &(stack_call){ .event = STACK_BEGIN, .rows = 1 });
    if (rc < 0)
        return rc;
    bool left = false; /* the token has left the stack: keys and values only */
    embedding_forward(m->dec_x[0], m->tok_emb, &token, 1, d);
    for (int l = 0; l < dm->n_layers; l++) {
        layer *ly = &m->layers[l];
        float *out = m->dec_x[(l + 1) & 1], *in = m->dec_x[l & 1];
        if (left) {
            rc = ly->ops->decode_kv ? ly->ops->decode_kv(ly, &a, in, pos)
                                    : ly->ops->decode(ly, &a, out, in, pos);
            if (rc < 0)
                return rc;
            rc = 0;
        } else if ((rc = ly->ops->decode(ly, &a, out, in, pos)) < 0) {
            return rc;
        }
        if (taken)
            taken[l] = (unsigned char)rc;
        stack_call c = { .event = STACK_LAYER, .rows = 1, .at = l, .y = out, .x = in };
        if ((rc = stack_at(m, &a, &c)) < 0)
            return rc;
        left = rc > 0;
    }
    float rstd;
    rmsnorm_forward(m->dec_u, &rstd, m->dec_x[dm->n_layers & 1], m->final_norm, 1, d);
    if ((rc = stack_at(m, &a, &(stack_call){ .event = STACK_HEAD, .rows = 1, .y = m->dec_u })) < 0)
        return rc;
    matmul(logits, dm->vocab, m->dec_u, d, false, m->tok_emb, d, true, 1, dm->vocab, d, 0.0f);
    return 0;
}

int model_decode_lanes(model *m, int max_len, int lanes, int *bad)
{
    const model_dims *dm = &m->dims;
    if (max_len < 1 || lanes < 1 || lanes > MODE_MAX_LANES)
        return -EINVAL;
    for (int l = 0; l < dm->n_layers; l++) {
        const kind_ops *o = m->layers[l].ops;
        if (!o->decode_lanes || !o->decode_rows) {
            if (bad)
                *bad = l;
            return -ENOTSUP;
        }
    }
    if (max_len > m->rope->max_pos) { /* as model_decode_begin */
        rope_table *t = NULL;
        if (build_rope_table(&t, max_len, dm->d_head))
            return -ENOMEM;
        free_rope_table(&m->rope);
        m->rope = t;
    }
    if (lanes > m->lanes) {
        size_t rd = (size_t)lanes * dm->d_model;
        free(m->lane_x[0]);
        m->lanes = 0;
        m->lane_x[0] = alloc_floats(3 * rd + (size_t)lanes);
        if (!m->lane_x[0])
            return -ENOMEM;
        m->lane_x[1] = m->lane_x[0] + rd;
        m->lane_u = m->lane_x[0] + 2 * rd;
        m->lane_rstd = m->lane_x[0] + 3 * rd;
        m->lanes = lanes;
    }
    m->lane_len = max_len;
    int cap = max_len < dm->seq_len ? max_len : dm->seq_len;
    for (int l = 0; l < dm->n_layers; l++) {
        layer *ly = &m->layers[l];
        int rc = ly->ops->decode_lanes(ly, dm, cap, lanes);
        if (rc) {
            if (bad)
                *bad = l;
            return rc;
        }
    }
    m->lanes = lanes; /* the rows the next decode_rows steps */
    return 0;
}

int model_decode_rows(model *m, mode_ctx *ctx, const token_t *tokens, int32_t pos, float *logits,
                      unsigned char *taken)
{
    const model_dims *dm = &m->dims;
    int d = dm->d_model, n = m->lanes, L = dm->n_layers;
    if (n < 1 || pos < 0 || pos >= m->lane_len)
        return -ERANGE;
    for (int i = 0; i < n; i++)
        if (tokens[i] >= (token_t)dm->vocab)
            return -ERANGE;
    batch b = { .nseq = 1, .global_seqs = 1, .route = m->route };
    fwd_args a = make_args(m, ctx, &b, FWD_EVAL_CAUSAL, NULL);
    a.tokens = tokens;
    int rc = stack_at(m, &a, &(stack_call){ .event = STACK_BEGIN, .rows = n });
    if (rc < 0)
        return rc;
    embedding_forward(m->lane_x[0], m->tok_emb, tokens, n, d);
    unsigned char took[MODE_MAX_LANES], left[MODE_MAX_LANES];
    memset(left, 0, (size_t)n);
    for (int l = 0; l < L; l++) {
        layer *ly = &m->layers[l];
        float *out = m->lane_x[(l + 1) & 1], *in = m->lane_x[l & 1];
        /* every row runs the layer: a row whose token has left the stack
         * (an exit point's) adds its keys and values from its frozen state,
         * as model_decode_step's, and takes nothing (taken 0); the stack
         * then puts its state back */
        if ((rc = ly->ops->decode_rows(ly, &a, out, in, n, pos, took)) < 0)
            return rc;
        for (int i = 0; taken && i < n; i++)
            taken[(size_t)i * L + l] = left[i] ? 0 : took[i];
        stack_call c = { .event = STACK_LAYER, .rows = n, .at = l, .y = out, .x = in,
                         .left = left };
        if ((rc = stack_at(m, &a, &c)) < 0)
            return rc;
    }
    rmsnorm_forward(m->lane_u, m->lane_rstd, m->lane_x[L & 1], m->final_norm, n, d);
    rc = stack_at(m, &a, &(stack_call){ .event = STACK_HEAD, .rows = n, .y = m->lane_u });
    if (rc < 0)
        return rc;
    matmul_exec ex = { .pool = a.mm.pool, .bf16 = false };
    matmul_pool(&ex, logits, dm->vocab, m->lane_u, d, false, m->tok_emb, d, true, n, dm->vocab, d,
                0.0f);
    return 0;
}

int model_decode_part(model *m, mode_ctx *ctx, token_t token, float *x, int from, int to,
                      int32_t pos)
{
    const model_dims *dm = &m->dims;
    size_t d = (size_t)dm->d_model;
    if (from < 0 || to > dm->n_layers || from > to || pos < 0 || pos >= m->dec_len ||
        (from == 0 && token >= (token_t)dm->vocab))
        return -ERANGE;
    batch b = { .nseq = 1, .global_seqs = 1, .route = m->route };
    fwd_args a = make_args(m, ctx, &b, FWD_EVAL_CAUSAL, NULL);
    a.tokens = &token;
    if (from == 0)
        embedding_forward(x, m->tok_emb, &token, 1, (int)d);
    for (int l = from; l < to; l++) {
        layer *ly = &m->layers[l];
        if (ly->kind->exit_point)
            continue; /* y = x: the whole model, no token leaves */
        int rc = ly->ops->decode(ly, &a, m->dec_x[0], x, pos);
        if (rc < 0)
            return rc;
        memcpy(x, m->dec_x[0], d * sizeof(float));
    }
    return 0;
}

int model_decode_head(model *m, const float *x, int at, float *logits)
{
    const model_dims *dm = &m->dims;
    int d = dm->d_model;
    const float *norm = m->final_norm;
    if (at >= 0) {
        char path[MODE_TENSOR_PATH];
        snprintf(path, sizeof(path), "layers/%d/exit_norm", at);
        const model_tensor *t = at < dm->n_layers && m->layers[at].kind->exit_point
                                    ? model_find_tensor(m, path) : NULL;
        if (!t)
            return -ENOTSUP;
        norm = m->params + t->offset;
    }
    float rstd;
    rmsnorm_forward(m->dec_u, &rstd, x, norm, 1, d);
    matmul(logits, dm->vocab, m->dec_u, d, false, m->tok_emb, d, true, 1, dm->vocab, d, 0.0f);
    return 0;
}

int model_decode_truncate(model *m, int from, int to, int32_t pos)
{
    for (int l = from; l < to; l++) {
        layer *ly = &m->layers[l];
        if (ly->kind->exit_point)
            continue; /* caches nothing */
        if (!ly->ops->decode_truncate)
            return -ENOTSUP;
        int rc = ly->ops->decode_truncate(ly, pos);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static bool all_finite(const float *p, size_t n)
{
    return first_nonfinite(p, n) < 0;
}

int model_first_nonfinite_activation(const model *m, int nseq)
{
    const model_dims *dm = &m->dims;
    size_t rd = (size_t)nseq * dm->seq_len * dm->d_model;
    for (int l = 1; l <= dm->n_layers; l++)
        if (!all_finite(m->resid + (size_t)l * rd, rd))
            return l;
    if (!all_finite(m->logits, (size_t)nseq * dm->seq_len * dm->vocab))
        return dm->n_layers + 1;
    return 0;
}

const model_tensor *model_first_nonfinite_grad(const model *m)
{
    for (int t = 0; t < m->n_tensors; t++)
        if (!all_finite(m->grads + m->tensors[t].offset, (size_t)m->tensors[t].numel))
            return &m->tensors[t];
    return NULL;
}
