/* A module with thread-local storage, loaded with dlopen by dtls_probe.c:
 * its TLS block is dynamic (allocated by ld.so with malloc for each thread
 * that touches it), as Open MPI's and hwloc's components are. */
char *dtls_touch(void);

__thread char dtls_block[100];

char *dtls_touch(void)
{
    dtls_block[0] = 1;
    return dtls_block;
}
