/* Run files with known numbers, written through the run-file API
 * (core/io/runfile.h) without training and without a model, for the tests
 * of mode-analyze's grouping and statistics (test_analysis_runs.c, and
 * through write_runs the shell test test_analysis.sh).
 *
 * The study, under DIR/known/ (small models, 20 steps, synthetic labels):
 *   a-s1, a-s2, a-s3   (dense, mod) x 2 at capacity 0.25, seeds 1, 2, 3
 *                      (a-s2 writes its layers as "dense, mod, dense, mod",
 *                      a-s3 sets init_seed 33 and data_seed 3 apart):
 *                      final loss top-k 1.6507, 1.6476, 1.6439
 *   b-s1, b-s2, b-s3   the same at capacity 0.5 (a real key):
 *                      1.6501, 1.6568, 1.6538
 *   dense-s1, dense-s2 dense x 4 (mod.capacity does not apply): 1.6400, 1.6420
 *   c                  capacity 0.25, random router, one run: 1.7000
 * loss causal = loss top-k + 0.0001 * seed; se_topk = 0.002, se_causal =
 * 0.003, windows 2048; steps/s 5 (20 steps in 4 s); layer 1 records its
 * routing at step 20 for 4 windows of 8 positions with the label of
 * position i being i % 4: class 0 always taken, class 1 taken in the
 * first k windows of each run (k = 1, 2, 3 for seeds 1, 2, 3; c: 2),
 * classes 2 and 3 never.
 *
 * Under DIR/huge/: iso-1e21-d8192x64-moe-s1, d_model 8192, 64 heads, d_ff
 * 22016, (dense, moe) x 32 with 64 experts, run.flops_budget 1e21, no
 * /model records (so mode-analyze must count them from the kind table),
 * complete; and iso-1e21-d8192x64-moe-s2, the same with /model records
 * written as the trainer writes them. */
#ifndef MODE_TESTS_ANALYSIS_RUNFILES_H
#define MODE_TESTS_ANALYSIS_RUNFILES_H

#include <stdbool.h>

/* Returns 0, or non-zero with a message in err. */
int write_known_runs(const char *dir, char *err, int err_len);
int write_huge_runs(const char *dir, char *err, int err_len);
/* Under DIR/iso/: an isoFLOP study at budget 1e9 with known optima: sizes
 * d_model 16, 24, 32 (d_ff twice that, 2 layers, S 8, batch 4), kinds dense
 * (dense x 2) and mod ("dense, mod" at capacity 0.25), seeds 1, 2, 3, runs
 * iso-1e9-d<d>x2-<kind>-s<seed>.  Seed s of kind k has the final loss
 * 0.5 (ln N - ln N*_s)^2 + L*_{k,s} with ln N*_s = the middle of the dense
 * sizes' ln N + 0.1 (s - 2) and L*_{dense,s} = 1.50 + 0.01 s, L*_{mod,s} =
 * that + 0.02: each seed's own fit recovers its optimum exactly. */
int write_iso_runs(const char *dir, char *err, int err_len);
/* Under DIR/ladder/dense/: dense x 2 (d_model 16, S 8, batch 4) at budgets
 * 1e9, 2e9, 4e9, seeds 1 and 2, each with the final loss 3 (C / 1e9)^-0.1
 * of its training FLOPs C (a ladder on an exact line in log-log); under
 * DIR/ladder/mod/: "dense, mod" at 2e9, seeds 1 and 2, with the loss that
 * line gives at twice its FLOPs: a dense-equivalent multiplier of 2; under
 * DIR/ladder/far/ and DIR/ladder/short/ the same at 8 and a quarter times
 * its FLOPs: below and above every rung. */
int write_ladder_runs(const char *dir, char *err, int err_len);

/* DIR/law/: dense runs at 3 budgets (1e9, 2e9, 4e9) x 4 sizes (d_model 16,
 * 24, 32, 48) x seeds 1, 2, each evaluated at the loss of a known
 * parametric law L = E + A N^-alpha + B D^-beta (N its parameters, D the
 * tokens of its planned steps), for isoflop's approach-3 fit. */
#define LAW_E 1.2
#define LAW_A 40.0
#define LAW_ALPHA 0.35
#define LAW_B 20.0
#define LAW_BETA 0.3
/* partial: the 4e9 runs stopped half-way (under DIR/lawp/), a budget with
 * no finished run */
int write_law_runs(const char *dir, bool partial, char *err, int err_len);

/* DIR/started/mod-started/run.h5: a run as a trainer leaves it before its
 * first records piece (its header only: configuration and model, no step),
 * "dense, mod" as write_ladder_runs's mod runs, seed 3. */
int write_started_run(const char *dir, char *err, int err_len);

/* DIR/cluster/: dense x 2 (d_model 32, S 8, batch 4), 5 steps of 1e9 training
 * FLOPs, run as if at 1, 2 and 4 ranks (c-p1, c-p2, c-p4: provenance/ranks),
 * and o-p2, the same at d_model 48 on 2 ranks.  Per step after the first
 * (which takes 9 times as long), compute_s, comm_s, comm_bytes:
 *   c-p1 0.8, 0, 0; c-p2 and o-p2 0.5, 0.1, 1e6; c-p4 0.35, 0.2, 1.5e6.
 * e-p1, e-p2: "dense, moe" with 2 experts at 1 and 2 ranks, as c-p1 and c-p2
 * but for the bytes at 2 ranks: the all-reduce of 4 bytes a parameter
 * outside the experts (2 (P-1)/P of it), plus 5e5 (the all-to-alls). */
int write_cluster_runs(const char *dir, char *err, int err_len);

#endif
