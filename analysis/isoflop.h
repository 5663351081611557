/* mode-analyze isoflop: the numbers (isoflop.c) behind the tables and the
 * figure (isoflop_fig.c). */
#ifndef MODE_ANALYSIS_ISOFLOP_H
#define MODE_ANALYSIS_ISOFLOP_H

#include "analysis/isodata.h"

/* isoflop.png */
int isoflop_figure(const an_args *a, iso_data *d, const char *path);
/* isoflop_law.png: N*(C) and L*(C) of both approaches (with two budgets or
 * more) */
int isoflop_law_figure(const an_args *a, iso_data *d, const char *path);

#endif
