/* mode-analyze isoflop's second approach (isolaw.c): the parametric law of
 * Hoffmann et al. 2022 per kind, and the optima it gives. */
#ifndef MODE_ANALYSIS_ISOLAW_H
#define MODE_ANALYSIS_ISOLAW_H

#include "analysis/isodata.h"

#include <stdio.h>

/* N* of a group: the parabola's vertex, or the best sampled size's count. */
double iso_n_opt(const iso_data *d, const iso_group *g);

/* The parametric laws of every kind. */
void isoflop_laws(iso_data *d);
/* Their section of isoflop.md, and the rows of isoflop_law.csv. */
void isoflop_laws_md(FILE *f, const iso_data *d);
void isoflop_laws_csv(FILE *f, const iso_data *d);
/* isoflop_law_curve.csv: N*(C) and L*(C) with their intervals, per kind,
 * at the curve's budgets (isodata.h: ISO_CURVE of them) */
void isoflop_law_curves_csv(FILE *f, const iso_data *d);

#endif
