/* The HTML of mode-analyze report: escaping, anchors, images inlined as
 * base64 data URIs (the page opens from the disk, with no network), and the
 * Markdown tables and paragraphs the other subcommands write, as HTML. */
#ifndef MODE_ANALYSIS_HTML_H
#define MODE_ANALYSIS_HTML_H

#include <stdbool.h>
#include <stdio.h>

/* s with <, >, & and " escaped. */
void html_text(FILE *f, const char *s);
/* An id for an anchor: letters, digits, '-' and '_'. */
void html_id(FILE *f, const char *s);
/* <img> of a PNG as a data URI; false when the file is missing. */
bool html_image(FILE *f, const char *path, const char *alt);
/* A Markdown file of the analyses (tables, headings, paragraphs, "- " lists
 * as paragraphs) as HTML; false when the file is missing. */
bool html_markdown(FILE *f, const char *path);
/* A grey note. */
void html_note(FILE *f, const char *what);
/* The page's style sheet. */
extern const char html_style[];

#endif
