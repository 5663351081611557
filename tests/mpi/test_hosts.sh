#!/bin/sh
# One Open MPI job across hosts: each host a network namespace (`ip netns`)
# with its own address, hostname and veth link to a bridge, the job
# launched over the TCP transport through an rsh agent that enters the
# namespace in place of ssh (tests/mpi/netns_agent.sh).
#   test_hosts.sh MODE_EXP COMPARE_RUNS CONFIG
# Checks: the ranks really ran on two hosts (and the check fails when they
# are placed on one); a model with an expert layer (all-reduce and
# all-to-all across the hosts) trains to the bits of the same run at the
# same rank count on one host; a host of three cut off mid-run (its link
# down; its ranks killed) ends every rank within seconds with one message
# naming the host, and the job resumes from the last checkpoint on the two
# hosts left.
# Skipped (exit 77) where it cannot run: not root, no `ip netns`, no
# unshare or mpirun.  The addresses (10.213.0.0/24) exist only inside the
# namespaces it makes; traffic never leaves the machine.
set -u
. "$(dirname "$0")/../common.sh"
exe=$(abspath "$1") compare=$(abspath "$2") config=$(abspath "$3")
agent=$(abspath "$(dirname "$0")/netns_agent.sh")
bench_config=
[ "${4:-}" = bench ] && bench_config=$(abspath "$5")
skip() { echo "skipped: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root (ip netns)"
command -v mpirun >/dev/null || skip "no mpirun"
command -v unshare >/dev/null || skip "no unshare"
command -v ip >/dev/null || skip "no ip (iproute2)"
enter_workdir
# names unique to this run: two runs at once make their own namespaces
# (the addresses inside them may repeat: each namespace has its own stack)
# shellcheck disable=SC2154 # work: enter_workdir's
MODE_NETNS_PREFIX="mode-$(basename "$work")-"
export MODE_NETNS_PREFIX
sw=${MODE_NETNS_PREFIX}sw
cleanup() {
	for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
		case $ns in "$MODE_NETNS_PREFIX"*)
			for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
			ip netns del "$ns" 2>/dev/null ;;
		esac
	done
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
ip netns add "$sw" 2>/dev/null || skip "ip netns add failed (no network namespaces here)"
ip -n "$sw" link add br0 type bridge 2>/dev/null || skip "no bridge devices here"
ip -n "$sw" link set br0 up || fail "bridge up"
hosts="h1 h2 h3"
i=0
for h in $hosts; do
	i=$((i + 1))
	ip netns add "$MODE_NETNS_PREFIX$h" || fail "netns $h"
	# the pair is made inside the namespaces: nothing appears in ours
	ip -n "$sw" link add "$h" type veth peer name eth0 netns "$MODE_NETNS_PREFIX$h" 2>/dev/null ||
		skip "no veth pairs here"
	ip -n "$sw" link set "$h" master br0 up || fail "$h on the bridge"
	ip -n "$MODE_NETNS_PREFIX$h" addr add "10.213.0.$i/24" dev eth0 || fail "address of $h"
	ip -n "$MODE_NETNS_PREFIX$h" link set eth0 up || fail "eth0 of $h up"
	ip -n "$MODE_NETNS_PREFIX$h" link set lo up || fail "lo of $h up"
done
# on_host HOST CMD...: run CMD on HOST (mpirun itself runs on h1, so that
# its daemons reach it over the bridge)
on_host() { h=$1; shift; "$agent" --argv "$h" "$@"; }
# The TCP transport alone (no shared memory), on the veth link; the
# daemons' keepalive probes every second after 2 s idle, 3 unanswered:
# a host whose link is down is noticed in 7-9 s here, not after Open MPI's
# defaults (300 s idle, then 9 probes 20 s apart: 8 minutes); without them
# the job of part 3 was still waiting 100 s after the link went down.
mca="--bind-to none --mca plm_rsh_agent $agent --mca btl tcp,self --mca btl_tcp_if_include eth0
 --mca oob_tcp_if_include eth0 --mca oob_tcp_keepalive_time 2 --mca oob_tcp_keepalive_intvl 1
 --mca oob_tcp_keepalive_probes 3 -x OPENBLAS_NUM_THREADS -x OMPI_MCA_mpi_yield_when_idle"
# mpi_on PLACEMENT CMD...: one job, ranks placed by --host PLACEMENT
mpi_on() {
	place=$1; shift
	# shellcheck disable=SC2086
	on_host h1 mpirun --host "$place" $mca "$@"
}
# Each rank writes where it runs (its network namespace and hostname)
# before it becomes CMD: where/RANK.
where() { # where PLACEMENT CMD...
	place=$1; shift
	rm -rf where && mkdir where
	mpi_on "$place" sh -c 'echo "$(readlink /proc/self/ns/net) $(hostname)" \
		>"where/$OMPI_COMM_WORLD_RANK"; exec "$@"' where "$@"
}
# crossed N: the N ranks of the last job ran on N different hosts, each in
# the namespace of the host it names
crossed() {
	n=$1
	got=$(find where -type f | wc -l)
	[ "$got" -eq "$n" ] || { echo "$got ranks reported, not $n"; return 1; }
	[ "$(cut -d' ' -f1 where/* | sort -u | wc -l)" -eq "$n" ] ||
		{ echo "ranks shared a network namespace: $(cat where/* | tr '\n' ' ')"; return 1; }
	for f in where/*; do
		read -r ns host <"$f"
		[ "$ns" = "$(on_host "$host" readlink /proc/self/ns/net)" ] ||
			{ echo "rank $(basename "$f") says $host but ran in $ns"; return 1; }
	done
}

# test_hosts.sh MODE_EXP COMPARE_RUNS CONFIG bench BENCH_CONFIG [RATE [ARGS...]]:
# no test, a measurement: each host's link limited to RATE (default 1gbit;
# none: the veth pairs unlimited;
# tc's tbf both ways: this kernel has no netem, so no latency is added),
# `mode-exp bench` of BENCH_CONFIG at 2 ranks on one host (shared memory),
# on one host over TCP (within the host, unlimited), and across h1 and h2;
# the one-host runs on h1.
if [ "${4:-}" = bench ]; then
	rate=${6:-1gbit}
	if [ $# -ge 6 ]; then shift 6; else shift 5; fi
	for h in $hosts; do
		[ "$rate" = none ] && break
		# both ways: out of the host (its eth0), into it (its bridge port)
		ip netns exec "$MODE_NETNS_PREFIX$h" tc qdisc add dev eth0 root tbf rate "$rate" \
			burst 256kb latency 50ms || fail "tc on $h"
		ip netns exec "$sw" tc qdisc add dev "$h" root tbf rate "$rate" burst 256kb \
			latency 50ms || fail "tc on $h's port"
	done
	echo "one host, shared memory:"
	on_host h1 mpirun -n 2 --bind-to none "$exe" bench "$bench_config" --threads 1 "$@" || fail "bench"
	echo "one host, TCP within it:"
	on_host h1 mpirun -n 2 --bind-to none --mca btl tcp,self "$exe" bench "$bench_config" \
		--threads 1 "$@" || fail "bench"
	echo "h1 and h2, TCP over their $rate links:"
	mpi_on h1:1,h2:1 "$exe" bench "$bench_config" --threads 1 "$@" || fail "bench"
	exit 0
fi

# 1. Crossing, and the check's own failure: both ranks on h1 must not pass.
where h1:1,h2:1 true >out.txt 2>&1 || fail "a job across h1 and h2: $(cat out.txt)"
crossed 2 || fail "the job did not cross the hosts"
echo "ok: 2 ranks on 2 hosts: $(cat where/0) / $(cat where/1)"
where h1:2 true >out.txt 2>&1 || fail "a job on h1 alone: $(cat out.txt)"
crossed 2 >why.txt && fail "two ranks on one host passed as crossing"
echo "ok: two ranks on h1 alone are caught: $(cat why.txt)"

# 2. Training across the hosts: a dense and an expert layer (2 experts, one
# a rank), so the gradients' all-reduce and the all-to-all both cross the
# link; the same bits as one host at 2 ranks (shared memory there): the
# sums run in the same order whichever transport carries them.
moe="model.layers=dense, moe"
before=$(ip -n "$sw" -s link show h2 | awk '/RX:/{getline; print $1}')
where h1:1,h2:1 "$exe" "$config" "$moe" moe.experts=2 run.out=x --quiet >out.txt 2>&1 ||
	fail "training across hosts: $(cat out.txt)"
crossed 2 || fail "the training job did not cross the hosts"
after=$(ip -n "$sw" -s link show h2 | awk '/RX:/{getline; print $1}')
on_host h1 mpirun -n 2 "$exe" "$config" "$moe" moe.experts=2 run.out=one --quiet || fail "training on one host"
"$compare" one/tiny/run.h5 x/tiny/run.h5 0 || fail "across hosts differs from one host"
"$compare" --tensors one/tiny/ckpt.h5 x/tiny/ckpt.h5 0 || fail "checkpoints differ"
echo "ok: trained across h1 and h2 ($((after - before)) bytes over h2's link): the bits of one host"

# 3. A host cut off mid-run: a job of 4 ranks on three hosts (h1:1, h2:1,
# h3:2), then h3 lost two ways: its link down (its processes live on,
# unreachable: noticed by the keepalive probes of $mca) and its ranks
# killed.  Every rank on every host must end within 60 s, with one message
# naming h3 (Open MPI's: the daemon of h3 lost, or the rank of h3 killed;
# a rank left may add a line of the TCP transport's broken pipe), nothing
# left running; the job resumes from the last checkpoint on the hosts left,
# h1 and h2, at 2 ranks: the uninterrupted run of one host at 2 ranks
# within float rounding (the steps before the cut ran at 4 ranks, the
# experts re-sharded: sums in another order, cli-moe's tolerances).
ckpt_step() { h5dump -a step "$1" 2>/dev/null | awk '/\(0\)/{print $2}'; }
long="run.steps=200 run.ckpt_every=10"
for how in link kill; do
	rm -rf c
	# shellcheck disable=SC2086
	timeout -k 5 90 "$agent" --argv h1 mpirun --host h1:1,h2:1,h3:2 $mca "$exe" "$config" "$moe" \
		moe.experts=2 $long run.out=c --quiet >out.txt 2>&1 &
	pid=$!
	i=0
	while [ -z "$(ckpt_step c/tiny/ckpt.h5)" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
	[ -n "$(ckpt_step c/tiny/ckpt.h5)" ] || fail "$how: no checkpoint after 30 s"
	case $how in
	link) ip -n "$sw" link set h3 down ;;
	kill) # the ranks, not the daemon: a process lost on a host still up
		for p in $(ip netns pids "${MODE_NETNS_PREFIX}h3"); do
			[ "$(cat "/proc/$p/comm" 2>/dev/null)" = mode-exp ] && kill -9 "$p"
		done ;;
	esac
	t1=$(date +%s)
	wait "$pid"
	code=$? t2=$(date +%s)
	[ "$code" -ne 124 ] || fail "$how: the job did not end within 90 s"
	[ "$code" -ne 0 ] || fail "$how: the job finished as if nothing happened"
	[ $((t2 - t1)) -le 60 ] || fail "$how: the job took $((t2 - t1)) s to end"
	for h in $hosts; do
		# mpirun returns once the daemons report; a killed process may still
		# be leaving its namespace then (seen once: one pid on h1 right
		# after the kill case): up to 10 s more, then name what is left
		left=$(ip netns pids "$MODE_NETNS_PREFIX$h" | tr '\n' ' ')
		for _ in 1 2 3 4 5 6 7 8 9 10; do
			[ -z "$left" ] && break
			sleep 1
			left=$(ip netns pids "$MODE_NETNS_PREFIX$h" | tr '\n' ' ')
		done
		[ -z "$left" ] || fail "$how: processes left on $h 10 s after the job ended: $left ($(
			for p in $left; do cat "/proc/$p/comm" 2>/dev/null; done | tr '\n' ' '))"
	done
	# Open MPI's message, once; mode-exp's ranks say nothing more
	n=$(grep -c -e 'ORTE has lost communication with a remote daemon' \
		-e 'mpirun noticed that process rank' out.txt)
	if [ "$n" -ne 1 ] || ! grep -q 'on node h3' out.txt || grep -q 'mode-exp' out.txt; then
		fail "$how: not one message naming h3: $(cat out.txt)"
	fi
	s=$(ckpt_step c/tiny/ckpt.h5)
	ip -n "$sw" link set h3 up
	echo "ok: h3 cut off ($how) after step $s: every rank ended in $((t2 - t1)) s, exit $code:" \
		"$(grep -e 'on node h3' -e 'exited on signal' out.txt | tr -s ' \n' ' ')"
	# resumed on the hosts left, 20 steps on from the checkpoint
	# shellcheck disable=SC2086
	where h1:1,h2:1 "$exe" "$config" "$moe" moe.experts=2 $long run.out=c --resume \
		--max-steps 20 --quiet >out.txt 2>&1 || fail "$how: resume on h1 and h2: $(cat out.txt)"
	crossed 2 || fail "$how: the resumed job did not cross h1 and h2"
	[ "$(ckpt_step c/tiny/ckpt.h5)" -eq $((s + 20)) ] ||
		fail "$how: resumed to step $(ckpt_step c/tiny/ckpt.h5), not $((s + 20))"
	# shellcheck disable=SC2086
	on_host h1 mpirun -n 2 "$exe" "$config" "$moe" moe.experts=2 $long run.out=u --max-steps $((s + 20)) \
		--quiet --overwrite || fail "uninterrupted run"
	"$compare" u/tiny/run.h5 c/tiny/run.h5 1e-5 1e-3 ||
		fail "$how: resumed on h1 and h2: not the uninterrupted run"
	echo "ok: resumed from step $s on h1 and h2"
done
