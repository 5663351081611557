/* The communicator's insides, shared by the files of core/comm/ only. */
#ifndef MODE_CORE_COMM_COMM_IMPL_H
#define MODE_CORE_COMM_COMM_IMPL_H

#include <mpi.h>
#include <stdint.h>

struct comm {
    MPI_Comm world;
    int rank, size, local_size;
    uint64_t bytes_sent;
    int *displs_send, *displs_recv, *counts_tmp, *bytes_send, *bytes_recv; /* [size] each */
    /* the item type of the last all-to-all: counts go in items, not bytes,
     * so that a rank pair is not limited to 2 GiB */
    MPI_Datatype item_type;
    size_t item_bytes;
    comm *parent; /* a sub-communicator (comm_split) shares the parent's byte count */
    /* fault injection (comm_fault): the site, world rank and step it fires at */
    long step, fault_step;
    int fault_rank;
    char fault_site[32];
};

/* Bytes sent count towards the world's total, whatever communicator. */
void comm_count_sent(comm *c, uint64_t bytes);

#endif
