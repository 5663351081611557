/* The fixed-order sum of comm.h (comm_sum_*): a reduce-scatter by direct
 * messages, each rank summing its piece of every run in rank order, then
 * an all-gather of the sums.  Round one of run i sends tag 0, round two
 * tag 1; a rank posts round one of runs in their order and round two in
 * their order too (run i's round two only after run i - 1's), so on one
 * communicator of its own the messages between two ranks match their
 * receives by MPI's order of messages alone, whatever the timing. */
#include "core/comm/comm.h"
#include "core/comm/comm_impl.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

enum { ROUND_ONE = 0, ROUND_TWO = 1 };

struct comm_sum {
    comm *c;
    MPI_Comm w;
    int P, me, n;
    float *buf;
    long *offset, *count;
    size_t *scratch_at; /* [n]: where run i's received pieces start in scratch */
    float *scratch;
    MPI_Request *req;   /* [n][2][2 (P - 1)]: round one's, round two's */
    const float **src;  /* [P]: the pieces being summed */
    int started, summed; /* runs whose round one / round two is posted */
};

static long piece_lo(long count, int P, int r)
{
    return (long)((__int128)count * r / P);
}

static long piece_len(long count, int P, int r)
{
    return piece_lo(count, P, r + 1) - piece_lo(count, P, r);
}

static MPI_Request *reqs(comm_sum *s, int i, int round)
{
    return s->req + ((size_t)i * 2 + (size_t)round) * 2 * (size_t)(s->P - 1);
}

void comm_sum_free(comm_sum **ps)
{
    comm_sum *s = *ps;
    if (!s)
        return;
    if (s->w != MPI_COMM_NULL)
        MPI_Comm_free(&s->w);
    free(s->offset);
    free(s->count);
    free(s->scratch_at);
    free(s->scratch);
    free(s->req);
    free(s->src);
    free(s);
    *ps = NULL;
}

int comm_sum_make(comm *c, float *buf, const long *offset, const long *count, int n,
                  comm_sum **out)
{
    *out = NULL;
    comm_sum *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->w = MPI_COMM_NULL;
    s->c = c;
    s->P = c ? c->size : 1;
    s->me = c ? c->rank : 0;
    s->n = n;
    s->buf = buf;
    if (s->P == 1) { /* nothing to sum */
        *out = s;
        return 0;
    }
    s->offset = malloc((size_t)n * sizeof(long));
    s->count = malloc((size_t)n * sizeof(long));
    s->scratch_at = malloc(((size_t)n + 1) * sizeof(size_t));
    s->req = malloc((size_t)n * 4 * (size_t)(s->P - 1) * sizeof(MPI_Request));
    s->src = malloc((size_t)s->P * sizeof(*s->src));
    if (!s->offset || !s->count || !s->scratch_at || !s->req || !s->src) {
        comm_sum_free(&s);
        return -ENOMEM;
    }
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        /* a piece goes in one message: its length an int */
        if (count[i] < 0 || count[i] / s->P >= INT_MAX) {
            comm_sum_free(&s);
            return -EOVERFLOW;
        }
        s->offset[i] = offset[i];
        s->count[i] = count[i];
        s->scratch_at[i] = at;
        at += (size_t)piece_len(count[i], s->P, s->me) * (size_t)(s->P - 1);
    }
    s->scratch_at[n] = at;
    s->scratch = malloc((at ? at : 1) * sizeof(float));
    if (!s->scratch) {
        comm_sum_free(&s);
        return -ENOMEM;
    }
    for (size_t k = 0; k < (size_t)n * 4 * (size_t)(s->P - 1); k++)
        s->req[k] = MPI_REQUEST_NULL;
    if (MPI_Comm_dup(c->world, &s->w)) {
        s->w = MPI_COMM_NULL;
        comm_sum_free(&s);
        return -EIO;
    }
    MPI_Comm_set_errhandler(s->w, MPI_ERRORS_RETURN);
    *out = s;
    return 0;
}

/* The slot of rank q's piece among the P - 1 received. */
static float *received(comm_sum *s, int i, int q)
{
    long len = piece_len(s->count[i], s->P, s->me);
    return s->scratch + s->scratch_at[i] + (size_t)(q < s->me ? q : q - 1) * (size_t)len;
}

/* Round one of run i: each piece to its rank, this rank's piece from all. */
static int post_one(comm_sum *s, int i)
{
    MPI_Request *r = reqs(s, i, ROUND_ONE);
    float *run = s->buf + s->offset[i];
    long mine = piece_len(s->count[i], s->P, s->me);
    int k = 0;
    for (int q = 0; q < s->P; q++) {
        if (q == s->me)
            continue;
        long len = piece_len(s->count[i], s->P, q);
        if (len > 0 && MPI_Isend(run + piece_lo(s->count[i], s->P, q), (int)len, MPI_FLOAT, q,
                                 ROUND_ONE, s->w, &r[k]))
            return -EIO;
        if (mine > 0 &&
            MPI_Irecv(received(s, i, q), (int)mine, MPI_FLOAT, q, ROUND_ONE, s->w, &r[k + 1]))
            return -EIO;
        comm_count_sent(s->c, (uint64_t)len * sizeof(float));
        k += 2;
    }
    return 0;
}

/* Run i's piece summed in rank order, then sent to all and theirs taken. */
static int post_two(comm_sum *s, int i)
{
    long lo = piece_lo(s->count[i], s->P, s->me), len = piece_len(s->count[i], s->P, s->me);
    float *run = s->buf + s->offset[i], *mine = run + lo;
    const float **src = s->src;
    for (int q = 0; q < s->P; q++)
        src[q] = q == s->me ? mine : received(s, i, q);
    for (long j = 0; j < len; j++) {
        float acc = src[0][j];
        for (int q = 1; q < s->P; q++)
            acc += src[q][j];
        mine[j] = acc;
    }
    MPI_Request *r = reqs(s, i, ROUND_TWO);
    int k = 0;
    for (int q = 0; q < s->P; q++) {
        if (q == s->me)
            continue;
        long qlen = piece_len(s->count[i], s->P, q);
        if (len > 0 && MPI_Isend(mine, (int)len, MPI_FLOAT, q, ROUND_TWO, s->w, &r[k]))
            return -EIO;
        if (qlen > 0 && MPI_Irecv(run + piece_lo(s->count[i], s->P, q), (int)qlen, MPI_FLOAT, q,
                                  ROUND_TWO, s->w, &r[k + 1]))
            return -EIO;
        comm_count_sent(s->c, (uint64_t)len * sizeof(float));
        k += 2;
    }
    return 0;
}

int comm_sum_start(comm_sum *s, int upto)
{
    if (!s || s->P == 1)
        return 0;
    upto = upto < s->n ? upto : s->n;
    for (; s->started < upto; s->started++) {
        int rc = post_one(s, s->started);
        if (rc)
            return rc;
    }
    return 0;
}

int comm_sum_progress(comm_sum *s)
{
    if (!s || s->P == 1)
        return 0;
    int n2 = 2 * (s->P - 1);
    /* round two in run order: a run's only after the one before it */
    while (s->summed < s->started) {
        int done = 0;
        if (MPI_Testall(n2, reqs(s, s->summed, ROUND_ONE), &done, MPI_STATUSES_IGNORE))
            return -EIO;
        if (!done)
            return 0;
        int rc = post_two(s, s->summed++);
        if (rc)
            return rc;
    }
    return 0;
}

int comm_sum_finish(comm_sum *s)
{
    if (!s || s->P == 1)
        return 0;
    int rc = comm_sum_start(s, s->n), n2 = 2 * (s->P - 1);
    for (; !rc && s->summed < s->n; s->summed++) {
        if (MPI_Waitall(n2, reqs(s, s->summed, ROUND_ONE), MPI_STATUSES_IGNORE))
            return -EIO;
        rc = post_two(s, s->summed);
    }
    if (!rc && MPI_Waitall(s->n * 4 * (s->P - 1), s->req, MPI_STATUSES_IGNORE))
        rc = -EIO;
    s->started = s->summed = 0;
    return rc;
}

int comm_sum_started(const comm_sum *s)
{
    return s ? s->started : 0;
}
