/* Drawing helpers for mode-analyze on cairo: colours and the qualitative
 * palette, text through cairo's toy API ("sans-serif"), axes with nice
 * ticks, lines, bars, legends, and saving a figure as PNG (and SVG)
 * through a temporary file renamed into place, so a failure leaves no
 * partial image. */
#ifndef MODE_ANALYSIS_PLOT_H
#define MODE_ANALYSIS_PLOT_H

#include <cairo.h>
#include <stdbool.h>

typedef struct rgb {
    double r, g, b;
} rgb;

rgb rgb_hex(unsigned hex);
/* Colour i of a fixed qualitative palette (Okabe-Ito, then Tableau): ten
 * distinct hues, repeated darker beyond. */
rgb palette_color(int i);
enum { PALETTE_HUES = 10 };

/* Fixed colours of the figures. */
#define COLOR_TEXT 0x222222u
#define COLOR_AXIS 0x555555u
#define COLOR_GRID 0xe3e3e3u
#define COLOR_DENSE 0xb4b4b4u   /* a layer that computes every token */
#define COLOR_TAKEN 0x3a5ba0u   /* took the routed block (mod) */
#define COLOR_SKIPPED 0xeef0f4u /* went around the block */
#define COLOR_DROPPED 0x111111u /* over an expert's capacity */

void plot_color(cairo_t *cr, rgb c, double alpha);
void plot_font(cairo_t *cr, double size, bool bold, bool mono);
/* Text anchored at (x, y): ax, ay in [0, 1] place the anchor from the left
 * and from the top of the text's box.  Returns the text's width. */
double plot_text(cairo_t *cr, double x, double y, double ax, double ay, const char *text);
/* The same turned a quarter counter-clockwise (for a y axis label). */
void plot_text_up(cairo_t *cr, double x, double y, const char *text);

/* A box filled white with grey diagonal hatching and an outline (no-op). */
void plot_hatch_box(cairo_t *cr, double x, double y, double w, double h);
/* A dot of radius rad with a white ring, visible on any fill. */
void plot_dot(cairo_t *cr, double x, double y, double rad);
/* The same in colour c (a data point). */
void plot_dot_at(cairo_t *cr, double x, double y, double rad, rgb c);

typedef struct plot_axes {
    double x, y, w, h;       /* the frame on the canvas */
    double x0, x1, y0, y1;   /* the data range it shows */
    bool logx;
    const char *const *xcats; /* when set: a category axis, category i over [i, i+1] */
    int n_xcats;
} plot_axes;

double axes_px(const plot_axes *a, double v);
double axes_py(const plot_axes *a, double v);
/* Grid, frame, ticks with labels, axis labels and a title above. */
void plot_axes_draw(cairo_t *cr, const plot_axes *a, const char *title, const char *xlabel,
                    const char *ylabel);
/* A line through n points (NaN points are skipped), dashed or solid, with
 * small round markers when markers is set. */
void plot_polyline(cairo_t *cr, const plot_axes *a, const double *x, const double *y, int n,
                   rgb c, double width, bool dashed, bool markers);
/* A shaded band between lo[i] and hi[i] over x[i] (a replicates' range;
 * runs of finite points each make one polygon). */
void plot_band(cairo_t *cr, const plot_axes *a, const double *x, const double *lo,
               const double *hi, int n, rgb c, double alpha);
/* A vertical error bar from lo to hi at x with caps cap px wide (shifted
 * dx px, so that series sharing an x do not hide each other). */
void plot_error_bar(cairo_t *cr, const plot_axes *a, double x, double dx, double lo, double hi,
                    rgb c, double cap);
/* A band across the whole axes from y lo to y hi, with a line at y mid
 * (dashed when dashed): a reference that does not depend on x. */
void plot_hband(cairo_t *cr, const plot_axes *a, double lo, double mid, double hi, rgb c,
                bool dashed);
/* A bar over [xa, xb] from the axis bottom to y. */
void plot_bar(cairo_t *cr, const plot_axes *a, double xa, double xb, double y, rgb c,
              double alpha);

typedef enum legend_mark { MARK_BOX, MARK_LINE, MARK_DASH, MARK_HATCH, MARK_DOT } legend_mark;
typedef struct legend_item {
    char label[80];
    rgb color;
    legend_mark mark;
} legend_item;

/* Rows a legend of n items in cols columns takes. */
int legend_rows(int n, int cols);
enum { LEGEND_ROW_H = 20 };
/* Items in a grid of cols columns col_w wide from (x, y), row by row. */
void plot_legend(cairo_t *cr, double x, double y, double col_w, int cols,
                 const legend_item *items, int n);

/* Draw a w x h figure with draw(cr, user) on a white canvas and write it to
 * path (a .png), and to path with .svg in place of .png when svg is set.
 * Each file goes through a temporary beside it renamed into place
 * (core/util/outfile.h).  On failure nothing is left and err says why. */
typedef void (*plot_draw_fn)(cairo_t *cr, void *user);
int plot_save(const char *path, int w, int h, plot_draw_fn draw, void *user, bool svg, char *err,
              int err_len);

#endif
