/* mode-analyze tokens' figure: take rates by class and by position bucket,
 * one panel row per routed layer, with their 95% intervals. */
#ifndef MODE_ANALYSIS_TOKENS_FIG_H
#define MODE_ANALYSIS_TOKENS_FIG_H

#include "analysis/token_counts.h"

int tokens_figure(const an_args *a, const tokens_report *t, const char *path);

#endif
