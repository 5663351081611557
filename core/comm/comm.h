/* Every MPI call of the project lives in core/comm/, behind this interface, so
 * the rest reads as serial code and unit tests run without mpirun.  A NULL
 * comm means one rank without MPI: every collective is then the identity. */
#ifndef MODE_CORE_COMM_COMM_H
#define MODE_CORE_COMM_COMM_H

#include <stddef.h>
#include <stdint.h>

typedef struct comm comm;

/* MPI_Init (works without mpirun: a singleton) and the world communicator. */
int comm_init(comm **out, int *argc, char ***argv);
/* MPI_Finalize. */
void comm_finalize(comm **c);
int comm_rank(const comm *c);
/* This rank's rank in the world, for a sub-communicator too (comm_split):
 * the rank MODE_FAULT names.  0 for a NULL comm. */
int comm_world_rank(const comm *c);
int comm_size(const comm *c);
/* Ranks sharing this rank's node (for choosing threads per rank). */
int comm_local_size(const comm *c);

/* In-place sums over all ranks. */
int comm_allreduce_sum_float(comm *c, float *buf, size_t n);
int comm_allreduce_sum_double(comm *c, double *buf, int n);
/* ZeRO's pair (docs/sharding.md).  buf is one run of n floats, cut into
 * P consecutive pieces of counts[p] (summing to n, each rank the same
 * counts).  Reduce-scatter: this rank's piece of buf becomes the sum over
 * ranks of that piece; the rest of buf holds this rank's own contributions
 * or zeros (a non-finite value there is in the element where a sum is).  All-gather:
 * every piece of buf becomes its owner's.  Collective. */
int comm_reduce_scatter_sum_float(comm *c, float *buf, const int *counts);
int comm_allgather_float(comm *c, float *buf, const int *counts);
/* Maximum over ranks of an int (used to agree on errors: a rank that failed
 * says so, every rank learns it, and all stop together instead of hanging). */
int comm_allreduce_max_int(comm *c, int *v);
int comm_allreduce_min_int(comm *c, int *v);
/* Any size: in chunks of at most 2^31 - 1 bytes. */
int comm_bcast(comm *c, void *buf, size_t bytes, int root);
/* Rank 0 receives every rank's bytes, in rank order, into a malloc'd *recv
 * (counts[P] their sizes); other ranks get *recv NULL.  Collective. */
int comm_gather_bytes(comm *c, const void *send, int bytes, void **recv, int *counts);
/* The ranks of c with the same color, as a communicator of their own (ranked
 * as in c); collective over c.  A NULL c gives NULL (one rank). */
int comm_split(comm *c, int color, comm **out);
void comm_free(comm **c);
int comm_barrier(comm *c);

/* A shared counter: any rank of c takes its next value alone, while the
 * others go on with their own work (MPI one-sided: a fetch-and-add on a
 * window at rank 0; a sweep's groups take their runs from one queue so).
 * Create and free are collective over c; next is not.  With a NULL c a
 * local counter. */
typedef struct comm_counter comm_counter;
int comm_counter_create(comm *c, comm_counter **out);
/* The counter's value before this call added 1 to it. */
int comm_counter_next(comm_counter *k, long *value);
void comm_counter_free(comm_counter **k);

/* recv_counts[p] = what rank p will send this rank, given what this rank
 * sends each (send_counts[P]): the count exchange before an all-to-all. */
int comm_exchange_counts(comm *c, const int *send_counts, int *recv_counts);

/* Rows to and from other ranks: rank r sends send_counts[p] items of
 * item_bytes from send (packed by destination) to rank p, and receives
 * recv_counts[p] items from each p into recv (packed by source).  With
 * recv_counts NULL the counts are exchanged first and written into
 * recv_counts_out.  One routine serves dispatch, combine and their
 * gradients. */
int comm_alltoallv(comm *c, const void *send, const int *send_counts, void *recv,
                   const int *recv_counts, int *recv_counts_out, size_t item_bytes);

/* An agreement point (docs/robustness.md): every rank calls it at the same
 * place with its own outcome; all return the code of the lowest failing
 * rank (0 when none failed), and msg becomes that rank's message, prefixed
 * "rank N: " when N is not 0.  Collective. */
int comm_agree(comm *c, int rc, char *msg, int len);

/* Whether every rank holds the bytes rank 0 holds (n may differ between
 * ranks): one all-reduce of a 64-bit digest of each (two more to find
 * the rank when they differ).  *differs is the
 * lowest rank whose bytes differ from rank 0's, or -1 when none do, the
 * same on every rank.  Collective. */
int comm_same_bytes(comm *c, const void *buf, size_t n, int *differs);
/* Inputs every rank must agree on (docs/robustness.md, "Ranks that
 * disagree"): text is this rank's description of what it read, one item
 * a line ("data.source=PATH (bytes N fnv1a64 H ...)").  0 on every rank
 * when every rank's text is rank 0's; else -EINVAL on every rank, and msg
 * names the lowest rank that differs and the first line where it does:
 * "ranks disagree on their inputs: rank 1 read ITEM, rank 0 ITEM".  One
 * all-reduce when they agree (comm_same_bytes), a few more to exchange the
 * two texts when they do not.  Collective. */
int comm_agree_text(comm *c, const char *text, char *msg, int len);

/* Fault injection, a testing aid (docs/robustness.md): with
 * MODE_FAULT=SITE@RANK:STEP in the environment, comm_fault(c, SITE) returns
 * -EIO once, on world rank RANK at step STEP (comm_set_step; SITE@RANK: the
 * first time the site is reached), and 0 always otherwise.  Every
 * collective site calls it just before its collective, so a test can make one rank fail there while the others go on into it.
 * The sites: dispatch, combine, dispatch-grad, combine-grad (the experts'
 * all-to-alls), grad-allreduce, stats, eval, routing, runfile (rank 0's
 * piece of the run file), checkpoint-layout, checkpoint-write,
 * checkpoint-gather, sweep-plan, grad-reduce-scatter and param-allgather
 * (the sharded optimizer's, docs/sharding.md), tfevents (rank 0's event of a
 * step, core/io/tfevents.h). */
void comm_set_step(comm *c, long step);
int comm_fault(comm *c, const char *site);

/* Stop every rank now (after a message has been printed). */
void comm_abort(comm *c, int code);

/* Bytes this rank sent through collectives since the last reset. */
uint64_t comm_bytes_sent(const comm *c);
void comm_reset_bytes(comm *c);

/* Name and version of the MPI library (for provenance). */
void comm_library_version(char *buf, int len);

/* A sum over the ranks in a fixed order (comm_sum.c): element i of the
 * result is ((x0 + x1) + x2) + ... + x(P-1), xr rank r's value, in float,
 * whatever the timing of the messages and whatever algorithm MPI would
 * choose for an all-reduce of that size; so a sum started run by run while
 * other work goes on (overlapped) gives the bits of the same sum made all at
 * once.  The sum covers n runs of one float buffer (offset[i], count[i]),
 * fixed when it is made; each step, runs are started in their order
 * (comm_sum_start: every rank the same runs in the same order), moved on
 * between other work (comm_sum_progress: no rank waits) and finished
 * (comm_sum_finish: starts what is left, waits for all).  Each run is cut
 * into P pieces (piece r: elements [count r/P, count (r+1)/P)); rank r sums
 * piece r of every rank, in rank order, and sends the sum back to all: the
 * bytes of an all-reduce (2 (P-1)/P of the run sent per rank), in two
 * rounds whatever P.  Memory: (P-1)/P of the runs' floats, for the pieces
 * received.  Make and free are collective over c (a communicator of its
 * own, so that no other message matches these); with one rank, or a NULL c,
 * every call does nothing. */
typedef struct comm_sum comm_sum;
int comm_sum_make(comm *c, float *buf, const long *offset, const long *count, int n,
                  comm_sum **out);
void comm_sum_free(comm_sum **s);
/* Start runs [started, upto) (upto clamped to n). */
int comm_sum_start(comm_sum *s, int upto);
int comm_sum_progress(comm_sum *s);
/* Start every run not started, wait for all; ready for the next step. */
int comm_sum_finish(comm_sum *s);
/* Runs started this step (0 after finish). */
int comm_sum_started(const comm_sum *s);

#endif
