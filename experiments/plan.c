/* mode-exp plan: the memory a config needs on each rank, counted from the
 * kind table without allocating the model (core/model/model.h,
 * model_plan_memory), so that a job can be sized before it is submitted. */
#include "experiments/cli.h"
#include "experiments/json.h"

#include "core/train/optim.h"
#include "moe/registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_plan[] =
    "usage: mode-exp plan CONFIG.ini [section.key=value ...] [--ranks P] [--json]\n"
    "  The memory each of P ranks (default 1) needs to train the config, counted from\n"
    "  the layer kinds without building the model: the shared tensors' parameters,\n"
    "  gradients and Adam moments (the moments 1/P with [optim] shard); the same for the rank's own experts (E/P of each\n"
    "  expert layer, or one with P > E); the activations and caches of batch/P\n"
    "  sequences (routed buffers as top-k training and balanced routing fill them);\n"
    "  the backward work space.  The program itself (MPI, HDF5, OpenBLAS) adds about\n"
    "  40 MiB a rank.  README, \"Memory\", has the formula and a measured table.\n";

/* The program, its libraries and their buffers before any model: measured
 * as the peak RSS of mode-exp bench of a tiny model (MPI, HDF5, OpenBLAS's
 * buffers, the pool's threads). */
#define PLAN_RUNTIME_MIB 40.0

int cmd_plan(int argc, char **argv)
{
    cli c;
    static const cli_opts opts = { "plan", CLI_RANKS | CLI_JSON };
    if (parse_cli(&c, argc - 2, argv + 2, usage_plan, &opts, 0))
        return 2;
    int P = c.ranks > 0 ? (int)c.ranks : 1;
    run_config cfg;
    char err[1024];
    if (config_load(&cfg, c.config, c.n_over, c.over, &mode_schema, P, err, sizeof(err)) ||
        cli_check_overrides(&cfg, c.n_over, c.over, err, sizeof(err))) {
        fprintf(stderr, "mode-exp plan: %s\n", err);
        free(c.over);
        return 2;
    }
    model_dims dims = config_dims(&cfg);
    dims.ranks = P;
    dims.rank = 0;
    model_memory mm;
    bool shard = optim_of_config(&cfg).shard;
    if (model_plan_memory(&mm, &dims, cfg.layers, mode_kinds, cfg.batch / P, shard, err,
                          sizeof(err))) {
        fprintf(stderr, "mode-exp plan: %s\n", err);
        free(c.over);
        return 2;
    }
    const double MiB = 1024.0 * 1024.0;
    double total = (mm.shared + mm.experts + mm.activations + mm.work) / MiB;
    if (c.json) {
        json_line j = json_begin(stdout, ", ");
        json_str(&j, "config", c.config);
        json_int(&j, "ranks", P);
        json_int(&j, "sequences_per_rank", cfg.batch / P);
        json_fixed(&j, "parameters", 0, mm.params_all);
        json_num(&j, "shared_state_mb", 6, mm.shared / MiB);
        json_num(&j, "shared_optim_mb", 6, mm.shared_optim / MiB);
        json_num(&j, "expert_state_mb", 6, mm.experts / MiB);
        json_num(&j, "activation_mb", 6, mm.activations / MiB);
        json_num(&j, "work_mb", 6, mm.work / MiB);
        json_num(&j, "total_mb", 6, total);
        json_fixed(&j, "runtime_mb", 0, PLAN_RUNTIME_MIB);
        json_end(&j);
    } else {
        printf("%s at %d rank(s), %d sequence(s) of %d tokens a rank; per rank:\n", c.config, P,
               cfg.batch / P, cfg.seq_len);
        printf("  the model: %.4g parameters (every expert)\n", mm.params_all);
        printf("  shared tensors (parameters, gradients, Adam m and v)  %10.1f MiB\n",
               mm.shared / MiB);
        printf("    of which Adam m and v%-30s %10.1f MiB\n",
               shard && P > 1 ? " (1/P of them: [optim] shard)" : "", mm.shared_optim / MiB);
        printf("  this rank's experts (the same four)                   %10.1f MiB\n",
               mm.experts / MiB);
        printf("  activations, caches, routing and expert buffers       %10.1f MiB\n",
               mm.activations / MiB);
        printf("  backward work space, the gradient sums' buffers       %10.1f MiB\n",
               mm.work / MiB);
        printf("  total                                                 %10.1f MiB "
               "(and about %.0f MiB for the program and its libraries)\n", total,
               PLAN_RUNTIME_MIB);
    }
    free(c.over);
    return 0;
}
