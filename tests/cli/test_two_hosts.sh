#!/usr/bin/env bash
# test_two_hosts.sh — a real two-host launch on one machine (docs/../DESIGN.md section 9): two
# network namespaces joined by a bridge on a private subnet, mpirun's plm_rsh_agent pointed at a
# script that runs the remote command with `ip netns exec`, the ranks talking TCP only
# (btl tcp,self on that subnet). ctrain trains across the two "hosts", each rank sees its own
# address, and the losses equal a one-host mpirun -np 2 bit for bit (MPI's reduction algorithm
# depends on sizes, not on the transport). The namespaces and the bridge are removed when the
# test ends, pass or fail. Needs root (CAP_NET_ADMIN): without it the test says so and skips.
set -u
cd "$(dirname "$0")/../.."
. tests/cli/train_lib.sh
work=$(mktemp -d /tmp/ctrain-hosts-XXXXXX)
id=$$
sub=10.$((200 + id % 50)).$((id / 50 % 250)) # a private /24 of this test's own
br=ctbr$id A=ctA$id B=ctB$id
cleanup() {
    ip netns del "$A" 2>/dev/null; ip netns del "$B" 2>/dev/null
    ip link del "$br" 2>/dev/null; ip link del "va$id" 2>/dev/null; ip link del "vb$id" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_mpi_yield_when_idle=1

if ! ip netns add "$A" 2>/dev/null; then
    echo "skipped: cannot create a network namespace here (needs root with CAP_NET_ADMIN)"
    finish; exit 0
fi
# host A = $sub.1 in namespace A, host B = $sub.2 in B, mpirun on the bridge ($sub.254)
setup() {
    ip netns add "$B" && ip link add "$br" type bridge && ip addr add "$sub.254/24" dev "$br" \
        && ip link set "$br" up || return 1
    local h ns n v
    for h in a b; do
        if [ $h = a ]; then ns=$A n=1; else ns=$B n=2; fi
        v=v$h$id
        ip link add "$v" type veth peer name eth0 netns "$ns" && ip link set "$v" master "$br" up \
            && ip netns exec "$ns" ip addr add "$sub.$n/24" dev eth0 \
            && ip netns exec "$ns" ip link set eth0 up && ip netns exec "$ns" ip link set lo up \
            || return 1
    done
}
setup || { fail "setting up the namespaces and the bridge"; finish; exit 1; }
cat > "$work/agent.sh" <<AGENT
#!/bin/sh
# plm_rsh_agent: HOST COMMAND... -> the command, through a shell as ssh would, in HOST's namespace
host=\$1; shift
case \$host in $sub.1) ns=$A ;; $sub.2) ns=$B ;; *) echo "agent: unknown host \$host" >&2; exit 1 ;; esac
exec ip netns exec \$ns sh -c "\$*"
AGENT
chmod +x "$work/agent.sh"
printf '%s slots=1\n%s slots=1\n' "$sub.1" "$sub.2" > "$work/hosts"
# routed=direct: both namespaces share this machine's host name, which confuses OpenMPI's
# daemon tree; direct routing connects every daemon to mpirun itself
two_hosts=(mpirun -np 2 --hostfile "$work/hosts" --mca plm_rsh_agent "$work/agent.sh"
           --mca routed direct --mca btl tcp,self --mca oob_tcp_if_include "$sub.0/24"
           --mca btl_tcp_if_include "$sub.0/24")

# OpenMPI 4's daemons between the two namespaces sometimes fail at start-up ("an internal
# programming error ... set routed=direct" though it is set, a daemon that cannot connect back
# to mpirun, or a daemon's segfault) before any rank runs: such a start is tried again, at most
# five in all. Only ORTE prints these messages.
daemon_failed() {
    grep -qE "internal programming error|create a connection back to mpirun|unable to reliably start one or more daemons" "$1"
}
# Here the ranks are `sh`, so every failure of this step is OpenMPI's own.
for attempt in 1 2 3 4 5; do
    out=$(timeout 60 "${two_hosts[@]}" sh -c 'echo "rank $OMPI_COMM_WORLD_RANK at $(ip -4 -o addr show eth0 | awk "{print \$4}")"' 2>&1)
    printf '%s\n' "$out" > "$work/sh.log"
    daemon_failed "$work/sh.log" || [[ "$out" == *"Process received signal"* ]] || break
done
printf '%s\n' "$out" | grep -q "^rank 0 at $sub.1/24" && printf '%s\n' "$out" | grep -q "^rank 1 at $sub.2/24" \
    && ok "two hosts: rank 0 runs at $sub.1, rank 1 at $sub.2" || fail "two hosts: $out"

small_run_setup "$work" || { finish; exit 1; }
timeout 60 mpirun --oversubscribe -np 2 "$CTRAIN" train "$work/t.ini" --set comm.plugin=mpi \
    --set run.out_dir="$work/one" > "$work/one.log" 2>&1 || fail "one host: $(tail -3 "$work/one.log")"
# The same start-up failures of OpenMPI's daemons are tried again here, at most five starts
# (a start counts as failed when no metrics were written, whatever mpirun's status); any other
# failure counts (a crash of ctrain included).
for attempt in 1 2 3 4 5; do
    rm -rf "$work/two"
    timeout 60 "${two_hosts[@]}" "$CTRAIN" train "$work/t.ini" --set comm.plugin=mpi \
        --set run.out_dir="$work/two" > "$work/two.log" 2>&1 && rc=0 || rc=$?
    [ -s "$work/two/metrics.jsonl" ] || [ $rc -ne 0 ] || rc=1
    [ $rc -ne 0 ] && daemon_failed "$work/two.log" || break
done
[ $rc -eq 0 ] && ok "ctrain trains across two hosts over TCP (start $attempt of at most 5)" \
    || fail "two hosts: $(tail -5 "$work/two.log")"
compare_series "$work/two" "$work/one" loss 0 "two hosts over TCP equal one host bit for bit"
finish
