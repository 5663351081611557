#include "core/util/ctx.h"

#include <stdio.h>
#include <time.h>

double mode_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void mode_format_duration(char *buf, size_t n, double s)
{
    if (s < 60)
        snprintf(buf, n, "%.1fs", s);
    else if (s < 3600)
        snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else
        snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
}
