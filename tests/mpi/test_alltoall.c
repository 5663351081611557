/* comm_alltoallv and comm_exchange_counts under mpirun (run with 1, 2 and 4
 * ranks): every rank sends every rank (itself included) a number of rows that
 * depends on the source, the destination and the round (0 included), each
 * row's bytes a function of (source, destination, row, byte); it checks the
 * counts and bytes it received (packed by source), sends them back with the
 * counts swapped (the combine direction) and checks it got its own rows back
 * in order.  Rounds cover rows of 1, 3, 12 and 68 bytes, an all-empty
 * round, large counts, and recv_counts NULL (counts exchanged inside).
 * Also the one-rank path without MPI (comm NULL: a copy).
 * Exit 0 on success; a rank that finds a failure prints it (with the ones
 * found so far in that round) and stops every rank with comm_abort, since
 * the others may wait in a collective and what follows a wrong count is
 * undefined. */
#include "core/comm/comm.h"
#include "check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

enum { GUARD = 64 };

/* Rows from src to dst in a round: 0 for some pairs, large in round 5. */
static int rows_of(int round, int src, int dst)
{
    if (round == 4)
        return 0; /* nobody sends anything */
    if (round == 5)
        return 1000 + 37 * src + 11 * dst;
    return (src * 3 + dst * 5 + round * 7) % 6; /* 0..5 */
}

static unsigned char byte_of(int src, int dst, int row, size_t b)
{
    uint32_t h = (uint32_t)src * 2654435761u ^ (uint32_t)dst * 40503u ^ (uint32_t)row * 97u ^
                 (uint32_t)b * 131u;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    return (unsigned char)h;
}

static int round_trip(comm *c, int round, size_t item, int counts_inside)
{
    int rank = comm_rank(c), P = comm_size(c);
    int *sc = calloc((size_t)P, sizeof(int)), *rc = calloc((size_t)P, sizeof(int));
    int *rc_out = calloc((size_t)P, sizeof(int)), *back_counts = calloc((size_t)P, sizeof(int));
    size_t ns = 0, nr = 0;
    for (int p = 0; p < P; p++) {
        sc[p] = rows_of(round, rank, p);
        ns += (size_t)sc[p];
        nr += (size_t)rows_of(round, p, rank);
    }
    /* GUARD bytes after each buffer catch writes past the rows */
    unsigned char *send = malloc(ns * item + GUARD), *recv = malloc(nr * item + GUARD);
    unsigned char *back = malloc(ns * item + GUARD);
    if (!sc || !rc || !rc_out || !back_counts || !send || !recv || !back) {
        fprintf(stderr, "rank %d: out of memory\n", rank);
        return -1;
    }
    /* packed by destination */
    size_t o = 0;
    for (int p = 0; p < P; p++)
        for (int j = 0; j < sc[p]; j++)
            for (size_t b = 0; b < item; b++)
                send[o++] = byte_of(rank, p, j, b);
    memset(recv, 0xAB, nr * item + GUARD);
    memset(back, 0xCD, ns * item + GUARD);
    for (int p = 0; p < P; p++)
        rc_out[p] = -7;

    int err;
    if (counts_inside) {
        err = comm_alltoallv(c, send, sc, recv, NULL, rc_out, item);
        CHECK(err == 0, "round %d: comm_alltoallv (counts inside) returned %d", round, err);
        memcpy(rc, rc_out, (size_t)P * sizeof(int));
    } else {
        err = comm_exchange_counts(c, sc, rc);
        CHECK(err == 0, "round %d: comm_exchange_counts returned %d", round, err);
        err = comm_alltoallv(c, send, sc, recv, rc, NULL, item);
        CHECK(err == 0, "round %d: comm_alltoallv returned %d", round, err);
    }
    for (int p = 0; p < P; p++)
        CHECK(rc[p] == rows_of(round, p, rank), "round %d item %zu: %d rows announced from %d, "
              "expected %d", round, item, rc[p], p, rows_of(round, p, rank));
    if (failures)
        return -1;
    /* packed by source */
    o = 0;
    int bad = 0;
    for (int p = 0; p < P; p++)
        for (int j = 0; j < rows_of(round, p, rank); j++)
            for (size_t b = 0; b < item; b++, o++)
                if (recv[o] != byte_of(p, rank, j, b) && bad++ < 3)
                    CHECK(0, "round %d item %zu: row %d from rank %d byte %zu is %u, expected %u",
                          round, item, j, p, b, recv[o], byte_of(p, rank, j, b));
    CHECK(bad == 0, "round %d item %zu: %d bytes received wrong", round, item, bad);
    for (size_t b = 0; b < GUARD; b++)
        CHECK(recv[nr * item + b] == 0xAB, "round %d item %zu: wrote past the received rows "
              "(guard byte %zu)", round, item, b);
    if (failures)
        return -1;

    /* the combine direction: what came in goes back, counts swapped */
    if (counts_inside) {
        err = comm_alltoallv(c, recv, rc, back, NULL, back_counts, item);
        for (int p = 0; p < P; p++)
            CHECK(back_counts[p] == sc[p], "round %d: %d rows come back from %d, sent %d", round,
                  back_counts[p], p, sc[p]);
    } else {
        err = comm_alltoallv(c, recv, rc, back, sc, NULL, item);
    }
    CHECK(err == 0, "round %d: comm_alltoallv back returned %d", round, err);
    CHECK(memcmp(back, send, ns * item) == 0, "round %d item %zu: rows sent back differ from "
          "those sent (%zu rows)", round, item, ns);
    for (size_t b = 0; b < GUARD; b++)
        CHECK(back[ns * item + b] == 0xCD, "round %d item %zu: wrote past the returned rows "
              "(guard byte %zu)", round, item, b);
    free(sc);
    free(rc);
    free(rc_out);
    free(back_counts);
    free(send);
    free(recv);
    free(back);
    return failures ? -1 : 0;
}

/* comm NULL: one rank, the all-to-all is a copy of send_counts[0] rows. */
static void no_mpi(int rank)
{
    int sc[1] = { 5 }, rc[1] = { -1 };
    float send[15], recv[16];
    for (int i = 0; i < 15; i++)
        send[i] = (float)i * 0.5f + 1.0f;
    recv[15] = -3.0f;
    CHECK(comm_exchange_counts(NULL, sc, rc) == 0 && rc[0] == 5, "comm NULL: exchange counts");
    rc[0] = -1;
    CHECK(comm_alltoallv(NULL, send, sc, recv, NULL, rc, 3 * sizeof(float)) == 0, "comm NULL");
    CHECK(rc[0] == 5, "comm NULL: counts %d, expected 5", rc[0]);
    CHECK(memcmp(send, recv, sizeof(send)) == 0 && recv[15] == -3.0f, "comm NULL: rows");
    CHECK(comm_alltoallv(NULL, send, sc, recv, NULL, NULL, 4) != 0,
          "comm NULL: no counts at all must be refused");
    CHECK(comm_size(NULL) == 1 && comm_rank(NULL) == 0, "comm NULL: size 1, rank 0");
}

int main(int argc, char **argv)
{
    comm *c = NULL;
    if (comm_init(&c, &argc, &argv)) {
        fprintf(stderr, "comm_init failed\n");
        return 1;
    }
    int rank = comm_rank(c), P = comm_size(c);
    const size_t items[] = { 1, 3, 12, 68 };
    int rounds = 0;
    for (int round = 0; round < 6; round++) {
        for (size_t w = 0; w < sizeof(items) / sizeof(items[0]); w++) {
            for (int inside = 0; inside < 2; inside++) {
                if (round_trip(c, round, items[w], inside)) {
                    fprintf(stderr, "rank %d: alltoall FAILED (round %d, %zu-byte rows%s)\n", rank,
                            round, items[w], inside ? ", counts exchanged inside" : "");
                    fflush(stderr);
                    comm_abort(c, 1);
                }
                rounds++;
            }
        }
    }
    no_mpi(rank);
    int total = failures;
    comm_allreduce_max_int(c, &total);
    if (rank == 0) {
        if (total == 0)
            printf("alltoall: %d round trips on %d ranks, all rows and counts as sent\n", rounds,
                   P);
        else
            printf("alltoall: FAILED on %d ranks (see messages above)\n", P);
    }
    comm_finalize(&c);
    return total ? 1 : 0;
}
