"""A moved slurmctld's old address answers for it (components/files/lib/slurm.sh
forward_moved_controller), and a forward that an earlier release left below a bridge's refusal
goes on top again (forwards.sh forward_up): in network namespaces of their own, with the real
functions and the cluster's own bridge rules.

The host's namespace holds cluster t's NAT bridge br0 (10.43.3.1/24) with a node (c001,
10.43.3.5), the new controller (ctld, 10.43.3.6: 6817) and the node that ran slurmctld before
(c000, 10.43.3.7: nothing on 6817 any more); beyond the host a LAN machine (out, 192.168.10.11).
A job's slurmstepd reports to the address its job started with: from c001 to the host's
address (an earlier release's slurmctld on the host) or to c000's, from c000 itself to its own.
"""

import pytest

from tests.network.netns_scene import run_scene

SCENE = r"""
c001=$(netns) ctld=$(netns) c000=$(netns) out=$(netns)
trap 'kill $c001 $ctld $c000 $out $(jobs -p) 2>/dev/null' EXIT
bridge_up t br0 10.43.3.1/24
attach "$c001" v1 br0 10.43.3.5/24 10.43.3.1
attach "$ctld" v2 br0 10.43.3.6/24 10.43.3.1
attach "$c000" v3 br0 10.43.3.7/24 10.43.3.1
attach "$out" vout -192.168.10.1/24 192.168.10.11/24 192.168.10.1
serve() { # serve PID ADDRESS PORT: accepts, and tells each peer the address it came from
  nsenter -t "$1" -n python3 -c 'import socket,sys
s=socket.socket(); s.bind((sys.argv[1], int(sys.argv[2]))); s.listen()
while True:
    c, peer = s.accept(); c.sendall(peer[0].encode()); c.close()' "${@:2}" </dev/null >/dev/null 2>&1 &
}
serve "$ctld" 10.43.3.6 6817; serve "$c001" 10.43.3.5 8080
in_ns "$c000" sysctl -qw net.ipv4.ip_forward=0  # a node's namespace does not forward
probe() { # probe WHO PID ADDRESS PORT: "open (seen from X)", refused or silent
  local result
  result=$(in_ns "$2" python3 -c 'import socket,sys
s=socket.socket(); s.settimeout(3)
try: s.connect((sys.argv[1], int(sys.argv[2]))); print("open (seen from %s)" % s.recv(64).decode())
except ConnectionRefusedError: print("refused")
except OSError: print("silent")' "$3" "$4")
  echo "$1 -> $3:$4 $result"
}
for server in 10.43.3.6:6817 10.43.3.5:8080; do
  wait_until 10 "the stand-in servers" tcp_connects "${server%:*}" "${server#*:}"
done
# The cluster's own firewall: the bridge's NAT rules and its refusal of new connections.
bridge_rules_up t br0 10.43.3.0/24 ""
probes() {
  probe c001 "$c001" 10.43.3.1 6817; probe host $$ 10.43.3.1 6817
  probe c001 "$c001" 10.43.3.7 6817; probe c000 "$c000" 10.43.3.7 6817
}
echo "@ before"; probes
# A node container is found by its owner marker and lxc-info, here the namespace's holder.
lxc_owner() { [ "$1" = t-c000 ] && echo t; }
lxc-info() { echo "$c000"; }
CLUSTER=t CLUSTER_DIR=$(mktemp -d)
SLURM_CONF_TEXT=$'ClusterName=t\nSlurmctldHost=ctld(10.43.3.6)\n'
squeue_jobs=$'12\n13_1\n14'
in_ct() { [ "$1" = t-ctld ] && [ "$2" = squeue ] && printf '%s\n' "$squeue_jobs"; }
# slurmctld moved from the host: the host's address answers while jobs 12, 13_1 and 14 run.
MOVED_FROM="10.43.3.1 host" forward_moved_controller t-ctld 2>&1
# ...and, on another change, from c000 (jobs 13_1 and 14 still run): both answer.
squeue_jobs=$'13_1\n14'
MOVED_FROM="10.43.3.7 t-c000" forward_moved_controller t-ctld 2>&1
echo "@ forwarded"; probes
echo "records: $(paste -sd'|' "$CLUSTER_DIR/controller-forwards")"
echo "host rules: $(tagged_rule_count gpucluster:t:ctld-move:10.43.3.1)"
echo "c000 rules: $(in_ns "$c000" iptables -S -t nat | grep -c gpucluster:t:ctld-move:10.43.3.7)"
echo "c000 ip_forward: $(in_ns "$c000" cat /proc/sys/net/ipv4/ip_forward)"
squeue_jobs=$'14'
forward_moved_controller t-ctld 2>&1  # again, as the next change: the rules stay as they are
echo "host rules again: $(tagged_rule_count gpucluster:t:ctld-move:10.43.3.1)"
echo "records now: $(paste -sd'|' "$CLUSTER_DIR/controller-forwards")"
squeue_jobs=""
forward_moved_controller t-ctld 2>&1  # those jobs ended: both forwards go
echo "@ ended"; probes
in_c000=$(in_ns "$c000" iptables -S -t nat | grep -c ctld-move || true)
echo "left: $(tagged_rule_count gpucluster:t:ctld-move:10.43.3.1)$in_c000"
echo "c000 ip_forward: $(in_ns "$c000" cat /proc/sys/net/ipv4/ip_forward) records: $(ls "$CLUSTER_DIR")"
# The controller comes back to c000 while a forward there points away: it goes before slurmctld starts.
squeue_jobs=$'20'
MOVED_FROM="10.43.3.7 t-c000" forward_moved_controller t-ctld 2>&1
forwards_to_self 10.43.3.7
echo "back to c000: $(in_ns "$c000" iptables -S -t nat | grep -c ctld-move) $(ls "$CLUSTER_DIR")"
# A forward of host port 7000 to c001:8080 that an earlier release appended after the bridge's
# rules, so the refusal (placed before the first NAT rule) came before its accept.
delete_tagged_rules gpucluster:t:inbound:br0
forward_rules gpucluster:t:fwd:7000 7000 10.43.3.5 8080 | rules_up gpucluster:t:fwd:7000 append
bridge_rules_up t br0 10.43.3.0/24 ""
echo "shadowed: $(forward_shadows gpucluster:t:fwd:7000 7000 10.43.3.5 8080 | wc -l)"
probe lan "$out" 192.168.10.1 7000
forward_up gpucluster:t:fwd:7000 7000 10.43.3.5 8080
echo "shadowed after: $(forward_shadows gpucluster:t:fwd:7000 7000 10.43.3.5 8080 | wc -l)"
probe lan "$out" 192.168.10.1 7000
"""


def section(out: str, name: str) -> list[str]:
    return out.split(f"@ {name}\n")[1].split("@ ")[0].splitlines()[:4]


@pytest.mark.privileged  # network namespaces of its own (unshare -n), iptables in them
def test_the_old_controller_address_answers_for_the_moved_one_while_its_jobs_run():
    done = run_scene(SCENE)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert section(out, "before") == [
        "c001 -> 10.43.3.1:6817 refused",
        "host -> 10.43.3.1:6817 refused",
        "c001 -> 10.43.3.7:6817 refused",
        "c000 -> 10.43.3.7:6817 refused",
    ]
    # The new controller sees the old address (SNAT), so its answers go back the same way.
    assert section(out, "forwarded") == [
        "c001 -> 10.43.3.1:6817 open (seen from 10.43.3.1)",
        "host -> 10.43.3.1:6817 open (seen from 10.43.3.1)",
        "c001 -> 10.43.3.7:6817 open (seen from 10.43.3.7)",
        "c000 -> 10.43.3.7:6817 open (seen from 10.43.3.7)",
    ]
    assert "records: 10.43.3.1 host - 13_1 14|10.43.3.7 t-c000 0 13_1 14\n" in out
    assert "host rules: 4\n" in out and "c000 rules: 3\n" in out and "c000 ip_forward: 1\n" in out
    assert "host rules again: 4\n" in out
    assert "records now: 10.43.3.1 host - 14|10.43.3.7 t-c000 0 14\n" in out
    assert section(out, "ended") == section(out, "before")
    assert "left: 00\n" in out and "c000 ip_forward: 0 records: \n" in out
    assert "back to c000: 0 \n" in out
    # The forward below the refusal is shadowed and refused; forward_up puts it on top again.
    assert "shadowed: 1\n" in out and "lan -> 192.168.10.1:7000 refused" in out
    assert "shadowed after: 0\n" in out and "lan -> 192.168.10.1:7000 open (seen from 192.168.10.11)" in out
