#include "analysis/html.h"
#include "core/util/file.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

void html_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

void html_id(FILE *f, const char *s)
{
    for (; *s; s++)
        fputc(isalnum((unsigned char)*s) || *s == '-' || *s == '_' ? *s : '_', f);
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

bool html_image(FILE *f, const char *path, const char *alt)
{
    FILE *in = file_fopen_regular(path, "rb", NULL, 0);
    if (!in)
        return false;
    fputs("<p><img alt=\"", f);
    html_text(f, alt);
    fputs("\" src=\"data:image/png;base64,", f);
    unsigned char buf[3 * 1024];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), in)) > 0) {
        for (size_t i = 0; i < n; i += 3) {
            unsigned v = (unsigned)buf[i] << 16;
            if (i + 1 < n)
                v |= (unsigned)buf[i + 1] << 8;
            if (i + 2 < n)
                v |= buf[i + 2];
            fputc(b64[(v >> 18) & 63], f);
            fputc(b64[(v >> 12) & 63], f);
            fputc(i + 1 < n ? b64[(v >> 6) & 63] : '=', f);
            fputc(i + 2 < n ? b64[v & 63] : '=', f);
        }
        if (n < sizeof(buf))
            break;
    }
    fclose(in);
    fputs("\"></p>\n", f);
    return true;
}

bool html_markdown(FILE *f, const char *path)
{
    FILE *in = file_fopen_regular(path, "r", NULL, 0);
    if (!in)
        return false;
    char line[8192];
    bool table = false, header = false;
    while (fgets(line, sizeof(line), in)) {
        line[strcspn(line, "\n")] = '\0';
        bool row = line[0] == '|';
        if (table && !row) {
            fputs("</table>\n", f);
            table = false;
        }
        if (row) {
            if (!table) {
                fputs("<table>\n", f);
                table = header = true;
            }
            if (strspn(line, "|-: ") == strlen(line))
                continue; /* the alignment row */
            fputs("<tr>", f);
            char *cell = line + 1, *bar;
            while ((bar = strchr(cell, '|'))) {
                *bar = '\0';
                while (*cell == ' ')
                    cell++;
                size_t len = strlen(cell);
                while (len && cell[len - 1] == ' ')
                    cell[--len] = '\0';
                fputs(header ? "<th>" : "<td>", f);
                html_text(f, cell);
                fputs(header ? "</th>" : "</td>", f);
                cell = bar + 1;
            }
            fputs("</tr>\n", f);
            header = false;
        } else if (line[0] == '#') {
            int level = (int)strspn(line, "#");
            fprintf(f, "<h%d>", level + 2 > 6 ? 6 : level + 2);
            html_text(f, line + level + (line[level] == ' '));
            fprintf(f, "</h%d>\n", level + 2 > 6 ? 6 : level + 2);
        } else if (line[0]) {
            fputs("<p>", f);
            html_text(f, line);
            fputs("</p>\n", f);
        }
    }
    if (table)
        fputs("</table>\n", f);
    fclose(in);
    return true;
}

void html_note(FILE *f, const char *what)
{
    fputs("<p class=\"note\">", f);
    html_text(f, what);
    fputs("</p>\n", f);
}

const char html_style[] =
    "body{font-family:sans-serif;color:#222;max-width:1420px;margin:1.5em auto;padding:0 1em}"
    "h1{font-size:1.6em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}"
    "table{border-collapse:collapse;margin:.8em 0;font-size:13px}"
    "th,td{border:1px solid #d0d0d0;padding:3px 8px;text-align:right}"
    "th{background:#f2f2f2}td:first-child,th:first-child{text-align:left}"
    "img{max-width:100%;height:auto;border:1px solid #eee}"
    "pre{background:#f6f6f6;padding:8px;overflow-x:auto;font-size:12px}"
    ".note{color:#777}nav a{margin-right:1em}";

