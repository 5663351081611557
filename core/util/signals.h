/* Signals that ask a run to stop: SIGINT, SIGTERM and SIGHUP (a closed
 * terminal) set a flag that the training loop, and the evaluation between
 * its chunks, read at their agreement points, so that every rank stops
 * together with a checkpoint (docs/robustness.md).  A handler can only set
 * a flag, so the flag is a static of signals.c (with the kernels' FLOP
 * counter, matmul.c, the library's only ones). */
#ifndef MODE_CORE_UTIL_SIGNALS_H
#define MODE_CORE_UTIL_SIGNALS_H

/* Catch the stop signals until the matching restore; nested calls (a sweep
 * around its runs' training) keep the outermost's handlers and its flag. */
void stop_signals_install(void);
void stop_signals_restore(void);
/* The signal that asked to stop, or 0. */
int stop_signal_pending(void);
/* Record sig as the one that asked to stop (a rank that learnt of another
 * rank's signal at an agreement point, for its exit status). */
void stop_signal_set(int sig);

#endif
