#include "core/util/signals.h"

#include <signal.h>
#include <stddef.h>

static volatile sig_atomic_t stop_signal;

static const int stop_signals[] = { SIGINT, SIGTERM, SIGHUP };
#define N_STOP ((int)(sizeof(stop_signals) / sizeof(stop_signals[0])))

static struct sigaction saved[N_STOP];
static int depth;

static void on_stop_signal(int sig)
{
    stop_signal = sig;
}

void stop_signals_install(void)
{
    if (depth++ > 0)
        return;
    stop_signal = 0;
    struct sigaction sa = { .sa_handler = on_stop_signal };
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < N_STOP; i++)
        sigaction(stop_signals[i], &sa, &saved[i]);
}

void stop_signals_restore(void)
{
    if (depth <= 0 || --depth > 0)
        return;
    for (int i = 0; i < N_STOP; i++)
        sigaction(stop_signals[i], &saved[i], NULL);
}

int stop_signal_pending(void)
{
    return stop_signal;
}

void stop_signal_set(int sig)
{
    stop_signal = sig;
}
