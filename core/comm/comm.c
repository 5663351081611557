#include "core/comm/comm.h"
#include "core/comm/comm_impl.h"

#include "core/util/fault.h"
#include "core/util/hash.h"

#include <errno.h>
#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

int comm_init(comm **out, int *argc, char ***argv)
{
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited && MPI_Init(argc, argv) != MPI_SUCCESS)
        return -EIO;
    comm *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    /* Errors come back as codes: we turn them into one message and a
     * collective stop instead of MPI's default abort without context. */
    c->item_type = MPI_DATATYPE_NULL;
    c->step = c->fault_step = -1;
    fault_spec f = fault_from_env();
    if (f.set && strcmp(f.site, "nan") && strcmp(f.site, "error")) {
        snprintf(c->fault_site, sizeof(c->fault_site), "%s", f.site);
        c->fault_rank = f.rank;
        c->fault_step = f.step < 0 ? LONG_MIN : f.step; /* no step: the first time */
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &c->world);
    MPI_Comm_set_errhandler(c->world, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c->world, &c->rank);
    MPI_Comm_size(c->world, &c->size);
    MPI_Comm node;
    MPI_Comm_split_type(c->world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &c->local_size);
    MPI_Comm_free(&node);
    size_t n = (size_t)c->size;
    c->displs_send = calloc(n, sizeof(int));
    c->displs_recv = calloc(n, sizeof(int));
    c->counts_tmp = calloc(n, sizeof(int));
    c->bytes_send = calloc(n, sizeof(int));
    c->bytes_recv = calloc(n, sizeof(int));
    if (!c->displs_send || !c->displs_recv || !c->counts_tmp || !c->bytes_send || !c->bytes_recv) {
        comm_finalize(&c);
        return -ENOMEM;
    }
    *out = c;
    return 0;
}

static void comm_release(comm *c)
{
    free(c->displs_send);
    free(c->displs_recv);
    free(c->counts_tmp);
    free(c->bytes_send);
    free(c->bytes_recv);
    if (c->item_type != MPI_DATATYPE_NULL)
        MPI_Type_free(&c->item_type);
    MPI_Comm_free(&c->world);
    free(c);
}

void comm_finalize(comm **pc)
{
    comm *c = *pc;
    if (!c)
        return;
    comm_release(c);
    *pc = NULL;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin)
        MPI_Finalize();
}

int comm_world_rank(const comm *c)
{
    while (c && c->parent)
        c = c->parent;
    return c ? c->rank : 0;
}

int comm_split(comm *c, int color, comm **out)
{
    *out = NULL;
    if (!c)
        return 0;
    comm *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->item_type = MPI_DATATYPE_NULL;
    s->parent = c;
    /* the injected fault, still armed, fires in the sub-communicator too
     * (a sweep's group trains on one): it names a world rank */
    memcpy(s->fault_site, c->fault_site, sizeof(s->fault_site));
    s->fault_rank = c->fault_rank;
    s->fault_step = c->fault_step;
    s->step = c->step;
    if (MPI_Comm_split(c->world, color, c->rank, &s->world)) {
        free(s);
        return -EIO;
    }
    MPI_Comm_set_errhandler(s->world, MPI_ERRORS_RETURN);
    MPI_Comm_rank(s->world, &s->rank);
    MPI_Comm_size(s->world, &s->size);
    s->local_size = c->local_size;
    size_t n = (size_t)s->size;
    s->displs_send = calloc(n, sizeof(int));
    s->displs_recv = calloc(n, sizeof(int));
    s->counts_tmp = calloc(n, sizeof(int));
    s->bytes_send = calloc(n, sizeof(int));
    s->bytes_recv = calloc(n, sizeof(int));
    if (!s->displs_send || !s->displs_recv || !s->counts_tmp || !s->bytes_send ||
        !s->bytes_recv) {
        comm_release(s);
        return -ENOMEM;
    }
    *out = s;
    return 0;
}

void comm_free(comm **pc)
{
    if (*pc)
        comm_release(*pc);
    *pc = NULL;
}

/* Bytes sent count towards the world's total, whatever communicator. */
void comm_count_sent(comm *c, uint64_t bytes)
{
    while (c->parent)
        c = c->parent;
    c->bytes_sent += bytes;
}

int comm_rank(const comm *c)
{
    return c ? c->rank : 0;
}

int comm_size(const comm *c)
{
    return c ? c->size : 1;
}

int comm_local_size(const comm *c)
{
    return c ? c->local_size : 1;
}

int comm_allreduce_sum_float(comm *c, float *buf, size_t n)
{
    if (!c || c->size == 1)
        return 0;
    /* MPI counts are int: go in chunks. */
    for (size_t off = 0; off < n;) {
        int chunk = n - off > (size_t)INT_MAX ? INT_MAX : (int)(n - off);
        if (MPI_Allreduce(MPI_IN_PLACE, buf + off, chunk, MPI_FLOAT, MPI_SUM, c->world))
            return -EIO;
        comm_count_sent(c, (uint64_t)chunk * sizeof(float));
        off += (size_t)chunk;
    }
    return 0;
}

int comm_allreduce_sum_double(comm *c, double *buf, int n)
{
    if (!c || c->size == 1)
        return 0;
    comm_count_sent(c, (uint64_t)n * sizeof(double));
    return MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_DOUBLE, MPI_SUM, c->world) ? -EIO : 0;
}

/* The pieces' displacements into c->displs_send; the run's length, or -1
 * past an int. */
static long piece_displs(comm *c, const int *counts)
{
    long at = 0;
    for (int p = 0; p < c->size; p++) {
        if (at > INT_MAX)
            return -1;
        c->displs_send[p] = (int)at;
        at += counts[p];
    }
    return at > INT_MAX ? -1 : at;
}

int comm_reduce_scatter_sum_float(comm *c, float *buf, const int *counts)
{
    if (!c || c->size == 1)
        return 0;
    long n = piece_displs(c, counts);
    if (n < 0)
        return -EOVERFLOW;
    /* in place: the input is the whole of buf, this rank's sum lands at
     * its start; then moved to the piece's own place */
    if (MPI_Reduce_scatter(MPI_IN_PLACE, buf, counts, MPI_FLOAT, MPI_SUM, c->world))
        return -EIO;
    size_t at = (size_t)c->displs_send[c->rank], k = (size_t)counts[c->rank];
    if (at > 0) { /* and what it leaves behind zeroed: no stale copy of a sum */
        memmove(buf + at, buf, k * sizeof(float));
        memset(buf, 0, (at < k ? at : k) * sizeof(float));
    }
    comm_count_sent(c, (uint64_t)(n - counts[c->rank]) * sizeof(float));
    return 0;
}

int comm_allgather_float(comm *c, float *buf, const int *counts)
{
    if (!c || c->size == 1)
        return 0;
    if (piece_displs(c, counts) < 0)
        return -EOVERFLOW;
    if (MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, c->displs_send,
                       MPI_FLOAT, c->world))
        return -EIO;
    comm_count_sent(c, (uint64_t)counts[c->rank] * (uint64_t)(c->size - 1) * sizeof(float));
    return 0;
}

int comm_allreduce_max_int(comm *c, int *v)
{
    if (!c || c->size == 1)
        return 0;
    return MPI_Allreduce(MPI_IN_PLACE, v, 1, MPI_INT, MPI_MAX, c->world) ? -EIO : 0;
}

int comm_allreduce_min_int(comm *c, int *v)
{
    if (!c || c->size == 1)
        return 0;
    return MPI_Allreduce(MPI_IN_PLACE, v, 1, MPI_INT, MPI_MIN, c->world) ? -EIO : 0;
}

int comm_bcast(comm *c, void *buf, size_t bytes, int root)
{
    if (!c || c->size == 1)
        return 0;
    /* MPI counts are int: in chunks, as the all-reduce (every rank has the
     * same byte count, so the same chunks) */
    for (size_t off = 0; off < bytes;) {
        int chunk = bytes - off > (size_t)INT_MAX ? INT_MAX : (int)(bytes - off);
        if (MPI_Bcast((char *)buf + off, chunk, MPI_BYTE, root, c->world))
            return -EIO;
        if (c->rank == root)
            comm_count_sent(c, (uint64_t)chunk * (uint64_t)(c->size - 1));
        off += (size_t)chunk;
    }
    return 0;
}

int comm_gather_bytes(comm *c, const void *send, int bytes, void **recv, int *counts)
{
    int P = comm_size(c);
    *recv = NULL;
    if (!c || P == 1) {
        counts[0] = bytes;
        *recv = malloc((size_t)bytes + 1);
        if (!*recv)
            return -ENOMEM;
        memcpy(*recv, send, (size_t)bytes);
        return 0;
    }
    if (MPI_Gather(&bytes, 1, MPI_INT, counts, 1, MPI_INT, 0, c->world))
        return -EIO;
    int *displs = NULL, rc = 0;
    if (c->rank == 0) {
        long total = 0;
        displs = malloc((size_t)P * sizeof(int));
        for (int p = 0; displs && p < P; p++) {
            displs[p] = (int)total;
            total += counts[p];
        }
        /* the root cannot refuse alone: it still takes part, with nothing */
        *recv = displs && total <= INT_MAX ? malloc((size_t)total + 1) : NULL;
        if (!*recv)
            rc = -ENOMEM;
    }
    if (MPI_Gatherv(send, bytes, MPI_BYTE, rc ? NULL : *recv, counts, displs, MPI_BYTE, 0,
                    c->world) && !rc)
        rc = -EIO;
    comm_count_sent(c, (uint64_t)bytes);
    free(displs);
    if (rc) {
        free(*recv);
        *recv = NULL;
    }
    return rc;
}

int comm_barrier(comm *c)
{
    if (!c || c->size == 1)
        return 0;
    return MPI_Barrier(c->world) ? -EIO : 0;
}

int comm_exchange_counts(comm *c, const int *send_counts, int *recv_counts)
{
    if (!c || c->size == 1) {
        recv_counts[0] = send_counts[0];
        return 0;
    }
    comm_count_sent(c, (uint64_t)(c->size - 1) * sizeof(int));
    return MPI_Alltoall(send_counts, 1, MPI_INT, recv_counts, 1, MPI_INT, c->world) ? -EIO : 0;
}

int comm_alltoallv(comm *c, const void *send, const int *send_counts, void *recv,
                   const int *recv_counts, int *recv_counts_out, size_t item_bytes)
{
    int size = comm_size(c);
    if (!recv_counts) {
        if (!recv_counts_out)
            return -EINVAL;
        if (comm_exchange_counts(c, send_counts, recv_counts_out))
            return -EIO;
        recv_counts = recv_counts_out;
    }
    if (!c || size == 1) {
        if (send_counts[0] > 0) /* buffers may be NULL when nothing moves */
            memcpy(recv, send, (size_t)send_counts[0] * item_bytes);
        return 0;
    }
    /* Counts in items of a contiguous type of item_bytes, so that one
     * routine serves rows of any width and a rank pair may move 2^31 rows,
     * not 2 GiB.  Only the displacements (sums of a rank's counts, in rows)
     * could overflow: more than 2^31 rows to or from one rank, which no
     * batch that fits in memory reaches; the caller then ends the job
     * (docs/robustness.md), as the other ranks may already be waiting. */
    if (c->item_bytes != item_bytes || c->item_type == MPI_DATATYPE_NULL) {
        if (c->item_type != MPI_DATATYPE_NULL)
            MPI_Type_free(&c->item_type);
        if (item_bytes > (size_t)INT_MAX ||
            MPI_Type_contiguous((int)item_bytes, MPI_BYTE, &c->item_type) ||
            MPI_Type_commit(&c->item_type)) {
            c->item_type = MPI_DATATYPE_NULL;
            return -EIO;
        }
        c->item_bytes = item_bytes;
    }
    long sd = 0, rd = 0;
    for (int p = 0; p < size; p++) {
        if (sd > INT_MAX || rd > INT_MAX)
            return -EOVERFLOW;
        c->displs_send[p] = (int)sd;
        c->displs_recv[p] = (int)rd;
        if (p != c->rank)
            comm_count_sent(c, (uint64_t)send_counts[p] * item_bytes);
        sd += send_counts[p];
        rd += recv_counts[p];
    }
    if (MPI_Alltoallv(send, send_counts, c->displs_send, c->item_type, recv, recv_counts,
                      c->displs_recv, c->item_type, c->world))
        return -EIO;
    return 0;
}

void comm_set_step(comm *c, long step)
{
    if (c)
        c->step = step;
}

int comm_fault(comm *c, const char *site)
{
    if (!c || !c->fault_site[0] || comm_world_rank(c) != c->fault_rank ||
        (c->fault_step != LONG_MIN && c->step != c->fault_step) || strcmp(c->fault_site, site))
        return 0;
    for (comm *a = c; a; a = a->parent)
        a->fault_site[0] = '\0'; /* once, in the world and the groups made from it */
    return -EIO;
}

int comm_agree(comm *c, int rc, char *msg, int len)
{
    if (!c || c->size == 1)
        return rc;
    int first = rc ? c->rank : c->size;
    if (MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, c->world))
        return -EIO;
    if (first == c->size)
        return 0;
    struct {
        int rc;
        char text[1024];
    } m = { rc, "" };
    if (c->rank == first && first)
        snprintf(m.text, sizeof(m.text), "rank %d: %.1000s", first, msg ? msg : "");
    else if (c->rank == first)
        snprintf(m.text, sizeof(m.text), "%.1000s", msg ? msg : "");
    if (MPI_Bcast(&m, (int)sizeof(m), MPI_BYTE, first, c->world))
        return -EIO;
    if (msg && len > 0)
        snprintf(msg, (size_t)len, "%s", m.text);
    return m.rc ? m.rc : -ECANCELED;
}

int comm_same_bytes(comm *c, const void *buf, size_t n, int *differs)
{
    *differs = -1;
    if (!c || c->size == 1)
        return 0;
    uint64_t mine = hash_fnv1a64(HASH_FNV1A64_OFFSET, buf, n) ^ (uint64_t)n;
    /* the largest digest and the largest complement (the smallest digest):
     * all equal when they meet */
    uint64_t d[2] = { mine, ~mine };
    if (MPI_Allreduce(MPI_IN_PLACE, d, 2, MPI_UINT64_T, MPI_MAX, c->world))
        return -EIO;
    if (d[0] == ~d[1])
        return 0;
    uint64_t d0 = mine; /* which rank: the lowest whose digest is not rank 0's */
    if (MPI_Bcast(&d0, 1, MPI_UINT64_T, 0, c->world))
        return -EIO;
    int r = mine != d0 ? c->rank : c->size;
    if (MPI_Allreduce(MPI_IN_PLACE, &r, 1, MPI_INT, MPI_MIN, c->world))
        return -EIO;
    *differs = r < c->size ? r : -1;
    return 0;
}

/* Rank root's text on every rank (malloc'd; NULL on every rank when one
 * has no room for it).  Collective. */
static char *text_of(comm *c, const char *mine, int root)
{
    long n = c->rank == root ? (long)strlen(mine) : 0;
    if (MPI_Bcast(&n, 1, MPI_LONG, root, c->world))
        return NULL;
    char *t = malloc((size_t)n + 1);
    int ok = t != NULL; /* every rank has room, or none receives */
    if (MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, c->world) || !ok) {
        free(t);
        return NULL;
    }
    if (c->rank == root)
        memcpy(t, mine, (size_t)n + 1);
    if (comm_bcast(c, t, (size_t)n, root)) {
        free(t);
        return NULL;
    }
    t[n] = '\0';
    return t;
}

/* The line at *at, without its newline, into out; *at moves past it. */
static void next_line(const char **at, char *out, int len)
{
    const char *s = *at, *e = strchr(s, '\n');
    size_t n = e ? (size_t)(e - s) : strlen(s);
    snprintf(out, (size_t)len, "%.*s", (int)n, s);
    *at = e ? e + 1 : s + n;
}

int comm_agree_text(comm *c, const char *text, char *msg, int len)
{
    int differs = -1;
    if (!c || c->size == 1)
        return 0;
    if (comm_same_bytes(c, text, strlen(text), &differs)) {
        snprintf(msg, (size_t)len, "comparing the ranks' inputs failed (an all-reduce)");
        return -EIO;
    }
    if (differs < 0)
        return 0;
    char *a = text_of(c, text, 0), *b = text_of(c, text, differs);
    if (!a || !b) {
        snprintf(msg, (size_t)len, "ranks disagree on their inputs: rank %d's differ from rank "
                 "0's", differs);
    } else {
        /* the first line where they differ */
        const char *pa = a, *pb = b;
        char la[1024], lb[1024];
        do {
            next_line(&pa, la, sizeof(la));
            next_line(&pb, lb, sizeof(lb));
        } while (!strcmp(la, lb) && (*pa || *pb));
        snprintf(msg, (size_t)len, "ranks disagree on their inputs: rank %d read %s, rank 0 %s "
                 "(every rank must be started on the same config and files)", differs,
                 lb[0] ? lb : "(nothing)", la[0] ? la : "(nothing)");
    }
    free(a);
    free(b);
    return -EINVAL;
}

struct comm_counter {
    MPI_Win win; /* MPI_WIN_NULL without MPI */
    long *base;  /* rank 0's value (MPI_Win_allocate's memory), or the local one */
    long local;
};

int comm_counter_create(comm *c, comm_counter **out)
{
    comm_counter *k = calloc(1, sizeof(*k));
    *out = NULL;
    if (!k)
        return -ENOMEM;
    k->win = MPI_WIN_NULL;
    k->base = &k->local;
    if (c) {
        MPI_Aint bytes = c->rank == 0 ? (MPI_Aint)sizeof(long) : 0;
        long *mem = NULL;
        if (MPI_Win_allocate(bytes, (int)sizeof(long), MPI_INFO_NULL, c->world, &mem,
                             &k->win)) {
            free(k);
            return -EIO;
        }
        MPI_Win_set_errhandler(k->win, MPI_ERRORS_RETURN);
        if (c->rank == 0) {
            MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, k->win);
            *mem = 0;
            MPI_Win_unlock(0, k->win);
        }
        /* nobody takes a value before rank 0 has set it */
        if (MPI_Barrier(c->world)) {
            MPI_Win_free(&k->win);
            free(k);
            return -EIO;
        }
    }
    *out = k;
    return 0;
}

int comm_counter_next(comm_counter *k, long *value)
{
    if (k->win == MPI_WIN_NULL) {
        *value = (*k->base)++;
        return 0;
    }
    long one = 1;
    if (MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, k->win))
        return -EIO;
    int rc = MPI_Fetch_and_op(&one, value, MPI_LONG, 0, 0, MPI_SUM, k->win);
    if (MPI_Win_unlock(0, k->win) || rc)
        return -EIO;
    return 0;
}

void comm_counter_free(comm_counter **pk)
{
    comm_counter *k = *pk;
    if (!k)
        return;
    if (k->win != MPI_WIN_NULL)
        MPI_Win_free(&k->win);
    free(k);
    *pk = NULL;
}

void comm_abort(comm *c, int code)
{
    MPI_Abort(c ? c->world : MPI_COMM_WORLD, code);
    exit(code); /* not reached */
}

uint64_t comm_bytes_sent(const comm *c)
{
    return c ? c->bytes_sent : 0;
}

void comm_reset_bytes(comm *c)
{
    if (c)
        c->bytes_sent = 0;
}

void comm_library_version(char *buf, int len)
{
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int n = 0;
    MPI_Get_library_version(v, &n);
    /* keep the first line: "Open MPI v4.1.4, package: ..." */
    char *nl = strchr(v, '\n');
    if (nl)
        *nl = '\0';
    char *comma = strchr(v, ',');
    if (comma)
        *comma = '\0';
    strncpy(buf, v, (size_t)len - 1);
    buf[len - 1] = '\0';
}
