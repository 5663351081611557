#include "analysis/plot.h"

#include "core/util/file.h"
#include "core/util/outfile.h"
#include "analysis/stats.h"

#include <cairo-svg.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define PLOT_PI 3.14159265358979323846

rgb rgb_hex(unsigned hex)
{
    return (rgb){ ((hex >> 16) & 0xff) / 255.0, ((hex >> 8) & 0xff) / 255.0, (hex & 0xff) / 255.0 };
}

/* Okabe & Ito's colour-blind-safe set (less black), then Tableau hues. */
static const unsigned palette_hex[PALETTE_HUES] = {
    0x0072b2, 0xe69f00, 0x009e73, 0xcc79a7, 0x56b4e9,
    0xd55e00, 0xf0e442, 0x9467bd, 0x8c564b, 0x17becf,
};

rgb palette_color(int i)
{
    if (i < 0)
        i = -i;
    rgb c = rgb_hex(palette_hex[i % PALETTE_HUES]);
    double shade = 1.0 / (1.0 + 0.45 * (i / PALETTE_HUES)); /* darker on each repeat */
    return (rgb){ c.r * shade, c.g * shade, c.b * shade };
}

void plot_color(cairo_t *cr, rgb c, double alpha)
{
    cairo_set_source_rgba(cr, c.r, c.g, c.b, alpha);
}

void plot_font(cairo_t *cr, double size, bool bold, bool mono)
{
    cairo_select_font_face(cr, mono ? "monospace" : "sans-serif", CAIRO_FONT_SLANT_NORMAL,
                           bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, size);
}

static double plot_text_width(cairo_t *cr, const char *text)
{
    cairo_text_extents_t e;
    cairo_text_extents(cr, text, &e);
    return e.x_advance;
}

double plot_text(cairo_t *cr, double x, double y, double ax, double ay, const char *text)
{
    cairo_font_extents_t f;
    cairo_font_extents(cr, &f);
    double w = plot_text_width(cr, text);
    /* the box runs from the ascent above the baseline to the descent below */
    cairo_move_to(cr, x - ax * w, y - ay * (f.ascent + f.descent) + f.ascent);
    cairo_show_text(cr, text);
    return w;
}

void plot_text_up(cairo_t *cr, double x, double y, const char *text)
{
    cairo_save(cr);
    cairo_translate(cr, x, y);
    cairo_rotate(cr, -PLOT_PI / 2);
    plot_text(cr, 0, 0, 0.5, 0.5, text);
    cairo_restore(cr);
}

void plot_hatch_box(cairo_t *cr, double x, double y, double w, double h)
{
    cairo_save(cr);
    cairo_rectangle(cr, x, y, w, h);
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_fill_preserve(cr);
    cairo_clip_preserve(cr);
    plot_color(cr, rgb_hex(0x8a8a8a), 1.0);
    cairo_set_line_width(cr, 1.0);
    cairo_stroke(cr);
    for (double t = -h; t < w; t += 4.0) {
        cairo_move_to(cr, x + t, y + h);
        cairo_line_to(cr, x + t + h, y);
    }
    cairo_set_line_width(cr, 0.8);
    cairo_stroke(cr);
    cairo_restore(cr);
}

void plot_dot(cairo_t *cr, double x, double y, double rad)
{
    cairo_new_sub_path(cr);
    cairo_arc(cr, x, y, rad + 1.0, 0, 2 * PLOT_PI);
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_fill(cr);
    cairo_arc(cr, x, y, rad, 0, 2 * PLOT_PI);
    plot_color(cr, rgb_hex(COLOR_TEXT), 1.0);
    cairo_fill(cr);
}

void plot_dot_at(cairo_t *cr, double x, double y, double rad, rgb c)
{
    cairo_new_sub_path(cr);
    cairo_arc(cr, x, y, rad + 1.2, 0, 2 * PLOT_PI);
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_fill(cr);
    cairo_arc(cr, x, y, rad, 0, 2 * PLOT_PI);
    plot_color(cr, c, 1.0);
    cairo_fill(cr);
}

double axes_px(const plot_axes *a, double v)
{
    if (a->logx)
        return a->x + a->w * (log10(v) - log10(a->x0)) / (log10(a->x1) - log10(a->x0));
    return a->x + a->w * (v - a->x0) / (a->x1 - a->x0);
}

double axes_py(const plot_axes *a, double v)
{
    return a->y + a->h - a->h * (v - a->y0) / (a->y1 - a->y0);
}

void plot_axes_draw(cairo_t *cr, const plot_axes *a, const char *title, const char *xlabel,
                    const char *ylabel)
{
    double xt[32], yt[32];
    int nx = a->xcats ? 0
             : a->logx ? log_ticks(xt, 32, a->x0, a->x1)
                       : nice_ticks(xt, 32, a->x0, a->x1, 7);
    int ny = nice_ticks(yt, 32, a->y0, a->y1, 6);
    char buf[48];
    cairo_set_line_width(cr, 1.0);
    plot_color(cr, rgb_hex(COLOR_GRID), 1.0);
    for (int i = 0; i < nx; i++) {
        double px = round(axes_px(a, xt[i])) + 0.5;
        cairo_move_to(cr, px, a->y);
        cairo_line_to(cr, px, a->y + a->h);
    }
    for (int i = 0; i < ny; i++) {
        double py = round(axes_py(a, yt[i])) + 0.5;
        cairo_move_to(cr, a->x, py);
        cairo_line_to(cr, a->x + a->w, py);
    }
    cairo_stroke(cr);
    plot_color(cr, rgb_hex(COLOR_AXIS), 1.0);
    cairo_rectangle(cr, round(a->x) + 0.5, round(a->y) + 0.5, round(a->w), round(a->h));
    cairo_stroke(cr);
    plot_font(cr, 10.5, false, false);
    for (int i = 0; i < nx; i++) {
        double px = round(axes_px(a, xt[i])) + 0.5;
        cairo_move_to(cr, px, a->y + a->h);
        cairo_line_to(cr, px, a->y + a->h + 4);
        cairo_stroke(cr);
        tick_label(buf, sizeof(buf), xt[i]);
        plot_text(cr, px, a->y + a->h + 6, 0.5, 0.0, buf);
    }
    for (int i = 0; i < ny; i++) {
        double py = round(axes_py(a, yt[i])) + 0.5;
        cairo_move_to(cr, a->x - 4, py);
        cairo_line_to(cr, a->x, py);
        cairo_stroke(cr);
        tick_label(buf, sizeof(buf), yt[i]);
        plot_text(cr, a->x - 6, py, 1.0, 0.5, buf);
    }
    /* category labels: the font shrinks until the widest fits its slot */
    for (double size = 10.5; a->xcats && size > 7.0; size -= 0.5) {
        double widest = 0.0;
        plot_font(cr, size, false, false);
        for (int i = 0; i < a->n_xcats; i++)
            widest = fmax(widest, plot_text_width(cr, a->xcats[i]));
        if (widest <= a->w / a->n_xcats - 4)
            break;
    }
    for (int i = 0; a->xcats && i < a->n_xcats; i++)
        plot_text(cr, axes_px(a, i + 0.5), a->y + a->h + 6, 0.5, 0.0, a->xcats[i]);
    plot_color(cr, rgb_hex(COLOR_TEXT), 1.0);
    plot_font(cr, 12, false, false);
    if (xlabel)
        plot_text(cr, a->x + a->w / 2, a->y + a->h + 24, 0.5, 0.0, xlabel);
    if (ylabel)
        plot_text_up(cr, a->x - 46, a->y + a->h / 2, ylabel);
    if (title) {
        plot_font(cr, 13, true, false);
        plot_text(cr, a->x + a->w / 2, a->y - 8, 0.5, 1.0, title);
    }
}

void plot_polyline(cairo_t *cr, const plot_axes *a, const double *x, const double *y, int n,
                   rgb c, double width, bool dashed, bool markers)
{
    cairo_save(cr);
    cairo_rectangle(cr, a->x, a->y, a->w, a->h);
    cairo_clip(cr);
    bool pen = false;
    for (int i = 0; i < n; i++) {
        if (!isfinite(x[i]) || !isfinite(y[i]) || (a->logx && x[i] <= 0)) {
            pen = false;
            continue;
        }
        double px = axes_px(a, x[i]), py = axes_py(a, y[i]);
        if (pen)
            cairo_line_to(cr, px, py);
        else
            cairo_move_to(cr, px, py);
        pen = true;
    }
    static const double dash[] = { 6.0, 4.0 };
    cairo_set_dash(cr, dash, dashed ? 2 : 0, 0);
    cairo_set_line_width(cr, width);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    plot_color(cr, c, 1.0);
    cairo_stroke(cr);
    cairo_set_dash(cr, NULL, 0, 0);
    for (int i = 0; markers && i < n; i++) {
        if (!isfinite(x[i]) || !isfinite(y[i]) || (a->logx && x[i] <= 0))
            continue;
        cairo_new_sub_path(cr);
        cairo_arc(cr, axes_px(a, x[i]), axes_py(a, y[i]), width + 1.2, 0, 2 * PLOT_PI);
        cairo_fill(cr);
    }
    cairo_restore(cr);
}

void plot_band(cairo_t *cr, const plot_axes *a, const double *x, const double *lo,
               const double *hi, int n, rgb c, double alpha)
{
    cairo_save(cr);
    cairo_rectangle(cr, a->x, a->y, a->w, a->h);
    cairo_clip(cr);
    plot_color(cr, c, alpha);
    for (int i = 0; i < n;) {
        int j = i; /* the run [i, j) of usable points */
        while (j < n && isfinite(x[j]) && isfinite(lo[j]) && isfinite(hi[j]) &&
               (!a->logx || x[j] > 0))
            j++;
        if (j - i >= 2) {
            cairo_new_path(cr);
            for (int k = i; k < j; k++)
                cairo_line_to(cr, axes_px(a, x[k]), axes_py(a, hi[k]));
            for (int k = j - 1; k >= i; k--)
                cairo_line_to(cr, axes_px(a, x[k]), axes_py(a, lo[k]));
            cairo_close_path(cr);
            cairo_fill(cr);
        }
        i = j > i ? j : i + 1;
    }
    cairo_restore(cr);
}

void plot_error_bar(cairo_t *cr, const plot_axes *a, double x, double dx, double lo, double hi,
                    rgb c, double cap)
{
    if (!isfinite(x) || !isfinite(lo) || !isfinite(hi) || (a->logx && x <= 0))
        return;
    double px = axes_px(a, x) + dx, y0 = axes_py(a, lo), y1 = axes_py(a, hi);
    cairo_save(cr);
    cairo_rectangle(cr, a->x, a->y, a->w, a->h);
    cairo_clip(cr);
    plot_color(cr, c, 1.0);
    cairo_set_line_width(cr, 1.3);
    cairo_move_to(cr, px, y0);
    cairo_line_to(cr, px, y1);
    cairo_move_to(cr, px - cap / 2, y0);
    cairo_line_to(cr, px + cap / 2, y0);
    cairo_move_to(cr, px - cap / 2, y1);
    cairo_line_to(cr, px + cap / 2, y1);
    cairo_stroke(cr);
    cairo_restore(cr);
}

void plot_hband(cairo_t *cr, const plot_axes *a, double lo, double mid, double hi, rgb c,
                bool dashed)
{
    cairo_save(cr);
    cairo_rectangle(cr, a->x, a->y, a->w, a->h);
    cairo_clip(cr);
    if (isfinite(lo) && isfinite(hi)) {
        double y0 = axes_py(a, hi), y1 = axes_py(a, lo);
        cairo_rectangle(cr, a->x, y0, a->w, y1 - y0);
        plot_color(cr, c, 0.16);
        cairo_fill(cr);
    }
    if (isfinite(mid)) {
        static const double dash[] = { 6.0, 4.0 };
        cairo_set_dash(cr, dash, dashed ? 2 : 0, 0);
        plot_color(cr, c, 1.0);
        cairo_set_line_width(cr, 1.8);
        cairo_move_to(cr, a->x, axes_py(a, mid));
        cairo_line_to(cr, a->x + a->w, axes_py(a, mid));
        cairo_stroke(cr);
    }
    cairo_restore(cr);
}

void plot_bar(cairo_t *cr, const plot_axes *a, double xa, double xb, double y, rgb c,
              double alpha)
{
    double px0 = axes_px(a, xa), px1 = axes_px(a, xb);
    double py = axes_py(a, y), base = axes_py(a, a->y0);
    cairo_rectangle(cr, px0, py, px1 - px0, base - py);
    plot_color(cr, c, alpha);
    cairo_fill(cr);
}

int legend_rows(int n, int cols)
{
    return cols > 0 ? (n + cols - 1) / cols : n;
}

static void legend_mark_draw(cairo_t *cr, double x, double y, const legend_item *it)
{
    switch (it->mark) {
    case MARK_LINE:
    case MARK_DASH: {
        static const double dash[] = { 5.0, 3.0 };
        cairo_set_dash(cr, dash, it->mark == MARK_DASH ? 2 : 0, 0);
        cairo_move_to(cr, x, y + 7);
        cairo_line_to(cr, x + 22, y + 7);
        cairo_set_line_width(cr, 2.0);
        plot_color(cr, it->color, 1.0);
        cairo_stroke(cr);
        cairo_set_dash(cr, NULL, 0, 0);
        break;
    }
    case MARK_HATCH: plot_hatch_box(cr, x + 4, y, 14, 14); break;
    case MARK_DOT:
        cairo_rectangle(cr, x + 4, y, 14, 14);
        plot_color(cr, it->color, 1.0);
        cairo_fill(cr);
        plot_dot(cr, x + 11, y + 7, 2.2);
        break;
    default:
        cairo_rectangle(cr, x + 4, y, 14, 14);
        plot_color(cr, it->color, 1.0);
        cairo_fill(cr);
        break;
    }
}

void plot_legend(cairo_t *cr, double x, double y, double col_w, int cols,
                 const legend_item *items, int n)
{
    plot_font(cr, 11, false, false);
    for (int i = 0; i < n; i++) {
        double ix = x + (cols > 0 ? i % cols : 0) * col_w;
        double iy = y + (cols > 0 ? i / cols : i) * LEGEND_ROW_H;
        legend_mark_draw(cr, ix, iy, &items[i]);
        plot_color(cr, rgb_hex(COLOR_TEXT), 1.0);
        plot_text(cr, ix + 28, iy + 7, 0.0, 0.5, items[i].label);
    }
}

static cairo_status_t write_stream(void *closure, const unsigned char *data, unsigned int len)
{
    return fwrite(data, 1, len, closure) == len ? CAIRO_STATUS_SUCCESS : CAIRO_STATUS_WRITE_ERROR;
}

/* Finish the surface into file, through a temporary beside it renamed into
 * place (core/util/outfile.h); 0 or -EIO. */
static int write_one(const char *file, int w, int h, plot_draw_fn draw, void *user, bool svg,
                     char *err, int err_len)
{
    out_file o;
    int rc = out_open(&o, file, err, err_len);
    if (rc)
        return rc;
    cairo_surface_t *s = svg ? cairo_svg_surface_create_for_stream(write_stream, o.f, w, h)
                             : cairo_image_surface_create(CAIRO_FORMAT_RGB24, w, h);
    cairo_t *cr = cairo_create(s);
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    draw(cr, user);
    cairo_status_t st = cairo_status(cr);
    cairo_destroy(cr);
    if (st == CAIRO_STATUS_SUCCESS && !svg)
        st = cairo_surface_write_to_png_stream(s, write_stream, o.f);
    cairo_surface_finish(s);
    if (st == CAIRO_STATUS_SUCCESS)
        st = cairo_surface_status(s);
    cairo_surface_destroy(s);
    if (st != CAIRO_STATUS_SUCCESS) {
        out_abort(&o);
        snprintf(err, (size_t)err_len, "%s: cannot write the image (%s)", file,
                 cairo_status_to_string(st));
        return -EIO;
    }
    return out_commit(&o, err, err_len) ? -EIO : 0;
}

int plot_save(const char *path, int w, int h, plot_draw_fn draw, void *user, bool svg, char *err,
              int err_len)
{
    int rc = write_one(path, w, h, draw, user, false, err, err_len);
    if (rc || !svg)
        return rc;
    char file[MODE_PATH_MAX + 128];
    size_t n = strlen(path);
    if (n > 4 && !strcmp(path + n - 4, ".png"))
        n -= 4;
    snprintf(file, sizeof(file), "%.*s.svg", (int)n, path);
    rc = write_one(file, w, h, draw, user, true, err, err_len);
    if (rc)
        remove(path);
    return rc;
}
