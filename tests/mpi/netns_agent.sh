#!/bin/sh
# The rsh agent of tests/mpi/test_hosts.sh (mpirun --mca plm_rsh_agent), in
# place of ssh: netns_agent.sh HOST CMD...: run CMD, joined into one shell
# command line as ssh does, on HOST: in the network namespace
# $MODE_NETNS_PREFIX$HOST, with its own hostname HOST (a UTS namespace:
# Open MPI tells hosts apart by their names).  With --argv first, CMD's
# words are kept as they are (the test's own use).
argv=
[ "$1" = --argv ] && argv=1 && shift
host=$1
shift
if [ -n "$argv" ]; then
	exec ip netns exec "$MODE_NETNS_PREFIX$host" unshare --uts \
		sh -c 'hostname "$0" && exec "$@"' "$host" "$@"
fi
exec ip netns exec "$MODE_NETNS_PREFIX$host" unshare --uts \
	sh -c 'hostname "$0" && exec sh -c "$*"' "$host" "$@"
