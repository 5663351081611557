/* Benchmark of one training step of a dense model (forward, backward, AdamW)
 * beside cblas_sgemm at the model's own shapes, measured in the same run so
 * the ratio is meaningful on a noisy machine.
 *   bench_step [threads] [steps] [layers]     (defaults: 2, 10, 8)
 * Shape: V 256, d 256, 4 heads, S 256, d_ff 704, 16 sequences. */
#include "core/kernels/matmul.h"
#include "core/model/model.h"
#include "core/rng/pcg32.h"
#include "core/train/optim.h"
#include "core/util/pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const kind_ops *const kinds[] = { &dense_ops, NULL };

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    int steps = argc > 2 ? atoi(argv[2]) : 10;
    int layers = argc > 3 ? atoi(argv[3]) : 8;
    model_dims dims = { .vocab = 256, .d_model = 256, .n_heads = 4, .d_head = 64, .d_ff = 704,
                        .n_layers = layers, .seq_len = 256 };
    int nseq = 16;
    layer_spec specs[MODE_MAX_LAYERS];
    for (int l = 0; l < layers; l++)
        layer_spec_init(&specs[l], &dense_kind);
    model *m = NULL;
    char err[256];
    if (build_model(&m, &dims, specs, kinds, nseq, err, sizeof(err))) {
        fprintf(stderr, "bench_step: %s\n", err);
        return 1;
    }
    model_init(m, 1);
    token_t *tok = malloc((size_t)nseq * (dims.seq_len + 1) * sizeof(token_t));
    pcg32 r;
    pcg32_seed(&r, 1, 1);
    for (int i = 0; i < nseq * (dims.seq_len + 1); i++)
        tok[i] = (token_t)pcg32_bounded(&r, 256);
    batch b = { .tokens = tok, .nseq = nseq, .global_seqs = nseq };
    optim_cfg oc;
    key_group_defaults(&optim_group, &oc);
    mode_ctx ctx = { .rank = 0, .size = 1, .seed = 1 };
    /* the yardstick: OpenBLAS with all the threads; the step: the threads as
     * a pool, BLAS on one (mode-exp's thread model) */
    matmul_set_threads(threads);
    double gemm_before = matmul_measure_gflops(NULL, nseq * dims.seq_len, dims.d_model, dims.d_ff, 3);
    if (threads > 1 && build_thread_pool(&ctx.pool, threads) == 0)
        matmul_set_threads(1);
    double t = 0.0, flops = 0.0;
    for (int s = 0; s < steps + 2; s++) {
        if (s == 2) /* two warm-up steps */
            memset(ctx.timers, 0, sizeof(ctx.timers));
        double t0 = mode_now();
        fwd_result fr;
        model_zero_grad(m);
        model_forward(m, &ctx, &b, FWD_TRAIN, &fr);
        model_backward(m, &ctx, &b);
        double n = grad_global_norm(m->grads, m->n_params);
        clip_grad_norm(m->grads, m->n_params, n, oc.clip);
        double t1 = mode_now();
        adamw_update(ctx.pool, m, &oc, s + 1, lr_at(&oc, s));
        ctx.timers[PHASE_OPTIMIZER] += mode_now() - t1;
        if (s >= 2) {
            t += mode_now() - t0;
            flops += 3.0 * fr.flops_executed;
        }
    }
    matmul_set_threads(threads);
    double gemm_after = matmul_measure_gflops(NULL, nseq * dims.seq_len, dims.d_model, dims.d_ff, 3);
    double gemm = 0.5 * (gemm_before + gemm_after);
    double step_s = t / steps, gf = flops / t * 1e-9;
    printf("dense L%d d256 S256 B16, %d thread(s): %.1f ms/step, %.0f tokens/s, "
           "%.1f GFLOP/s training; sgemm %.1f GFLOP/s (before %.1f, after %.1f): %.0f%%\n",
           layers, threads, step_s * 1e3, nseq * dims.seq_len / step_s, gf, gemm, gemm_before,
           gemm_after, 100.0 * gf / gemm);
    const char *names[PHASE_COUNT] = { "matmul", "attention", "routing", "experts", "comm",
                                       "optimizer", "other" };
    printf("phases per step:");
    for (int p = 0; p < PHASE_COUNT; p++)
        printf(" %s %.1f ms", names[p], ctx.timers[p] / steps * 1e3);
    printf(" (untimed %.1f ms)\n", (t - (ctx.timers[0] + ctx.timers[1] + ctx.timers[2] +
                                         ctx.timers[3] + ctx.timers[4] + ctx.timers[5] +
                                         ctx.timers[6])) / steps * 1e3);
    free(tok);
    free_model(&m);
    free_thread_pool(&ctx.pool);
    return 0;
}
