#include "core/comm/comm.h"

#include <errno.h>
#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

struct comm {
    MPI_Comm world;
    int rank, size, local_size;
    uint64_t bytes_sent;
    int *displs_send, *displs_recv, *counts_tmp, *bytes_send, *bytes_recv; /* [size] each */
};

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

void comm_finalize(comm **pc)
{
    comm *c = *pc;
    if (!c)
        return;
    free(c->displs_send);
    free(c->displs_recv);
    free(c->counts_tmp);
    free(c->bytes_send);
    free(c->bytes_recv);
    MPI_Comm_free(&c->world);
    free(c);
    *pc = NULL;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin)
        MPI_Finalize();
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
        c->bytes_sent += (uint64_t)chunk * sizeof(float);
        off += (size_t)chunk;
    }
    return 0;
}

int comm_allreduce_sum_double(comm *c, double *buf, int n)
{
    if (!c || c->size == 1)
        return 0;
    c->bytes_sent += (uint64_t)n * sizeof(double);
    return MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_DOUBLE, MPI_SUM, c->world) ? -EIO : 0;
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
    if (bytes > (size_t)INT_MAX)
        return -EINVAL;
    return MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, c->world) ? -EIO : 0;
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
    c->bytes_sent += (uint64_t)(c->size - 1) * sizeof(int);
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
    /* Counts in bytes so that one routine serves rows of any width. */
    long sd = 0, rd = 0;
    for (int p = 0; p < size; p++) {
        long sb = (long)send_counts[p] * (long)item_bytes;
        long rb = (long)recv_counts[p] * (long)item_bytes;
        if (sb > INT_MAX || rb > INT_MAX || sd > INT_MAX || rd > INT_MAX)
            return -EOVERFLOW;
        c->bytes_send[p] = (int)sb;
        c->bytes_recv[p] = (int)rb;
        c->displs_send[p] = (int)sd;
        c->displs_recv[p] = (int)rd;
        if (p != c->rank)
            c->bytes_sent += (uint64_t)sb;
        sd += sb;
        rd += rb;
    }
    if (MPI_Alltoallv(send, c->bytes_send, c->displs_send, MPI_BYTE, recv, c->bytes_recv,
                      c->displs_recv, MPI_BYTE, c->world))
        return -EIO;
    return 0;
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
