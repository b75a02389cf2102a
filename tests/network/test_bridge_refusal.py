"""Routed traffic into the cluster's bridges (components/files/lib/bridges.sh inbound_rules): in
network namespaces of its own, with the real rule functions, a machine that routes a container
subnet through the host reaches the containers' ports before the refusal and is refused after
it, while what must get in still does: the forward (DNAT), another host's containers (routes),
burst nodes to Slurm's ports, the bridge's own containers to each other (bridged, through
iptables: br_netfilter is on in a fresh namespace) and out via NAT. A second cluster's bridge
on the same host is refused both ways, whichever cluster's rules came first."""

import pytest

from tests.network.netns_scene import run_scene

# The host's namespace: cluster t's NAT bridge br0 (10.43.3.0/24) with the web app (ct1,
# 10.43.3.5: its port 8080 and a Prometheus stand-in on 9090) and a node that is the controller
# too (ct2, 10.43.3.6: 6817, 6818, srun's 60001); its cluster bridge br1 with a port (ct4,
# 10.43.5.5), routed, as a site could make it. Beyond the host: a LAN machine (out,
# 192.168.10.11) routing the container subnets via the host, another host (peer: 10.45.0.2,
# its container 10.47.3.5), a burst node (burst, 10.90.1.5). Cluster u's NAT bridge br2
# (10.44.3.0/24) holds ct3 (10.44.3.5).
SCENE = r"""
ct1=$(netns) ct2=$(netns) ct3=$(netns) ct4=$(netns) out=$(netns) peer=$(netns) burst=$(netns)
trap 'kill $ct1 $ct2 $ct3 $ct4 $out $peer $burst $(jobs -p) 2>/dev/null' EXIT
bridge_up t br0 10.43.3.1/24; bridge_up t br1 ""; bridge_up u br2 10.44.3.1/24
attach "$ct1" v1 br0 10.43.3.5/24 10.43.3.1
attach "$ct2" v2 br0 10.43.3.6/24 10.43.3.1
attach "$ct3" v3 br2 10.44.3.5/24 10.44.3.1
attach "$ct4" v4 br1 10.43.5.5/24 10.43.5.1
ip addr add 10.43.5.1/24 dev br1  # routed, as a site could make it (the program gives it no address)
attach "$out" vout -192.168.10.1/24 192.168.10.11/24 192.168.10.1
attach "$peer" vpeer -10.45.0.1/30 10.45.0.2/30 10.45.0.1
in_ns "$peer" ip addr add 10.47.3.5/32 dev lo
attach "$burst" vburst -10.90.1.1/24 10.90.1.5/24 10.90.1.1
serve() { # serve PID ADDRESS PORT... (nsenter execs python3: the job is the server, which the trap kills)
  nsenter -t "$1" -n python3 -c 'import socket,sys,threading
def serve(port):
    s=socket.socket(); s.bind((sys.argv[1], port)); s.listen()
    while True: s.accept()[0].close()
for port in sys.argv[3:]: threading.Thread(target=serve, args=(int(port),), daemon=True).start()
serve(int(sys.argv[2]))' "${@:2}" </dev/null >/dev/null 2>&1 &
}
serve "$ct1" 10.43.3.5 8080 9090; serve "$ct2" 10.43.3.6 6817 6818 60001 22; serve "$ct3" 10.44.3.5 8080
serve "$ct4" 10.43.5.5 6818; serve "$out" 192.168.10.11 80
probe() { # probe WHO PID ADDRESS PORT [SOURCE]: open, refused or silent
  local result
  result=$(in_ns "$2" python3 -c 'import socket,sys
s=socket.socket(); s.settimeout(3)
if sys.argv[3:]: s.bind((sys.argv[3], 0))
try: s.connect((sys.argv[1], int(sys.argv[2]))); print("open")
except ConnectionRefusedError: print("refused")
except OSError: print("silent")' "$3" "$4" ${5:+"$5"})
  echo "$1 -> $3:$4 $result"
}
for server in 10.43.3.5:9090 10.43.3.6:60001 10.44.3.5:8080 10.43.5.5:6818 192.168.10.11:80; do
  wait_until 10 "the stand-in servers" tcp_connects "${server%:*}" "${server#*:}"
done
probes() {
  probe lan "$out" 10.43.3.5 8080; probe lan "$out" 10.43.3.5 9090; probe lan "$out" 10.43.5.5 6818
  probe lan "$out" 192.168.10.1 7000
  probe peer "$peer" 10.43.3.5 9090 10.47.3.5; probe peer-host "$peer" 10.43.3.6 6818
  probe burst "$burst" 10.43.3.6 6817; probe burst "$burst" 10.43.3.6 6818; probe burst "$burst" 10.43.3.6 60001
  probe burst "$burst" 10.43.3.6 22; probe burst "$burst" 10.43.3.5 9090
  probe node "$ct2" 10.43.3.5 9090; probe node "$ct2" 192.168.10.11 80
  probe other-cluster "$ct3" 10.43.3.5 8080; probe node "$ct1" 10.44.3.5 8080
}
# The cluster bridge's create can come first: no bridge's NAT rules yet, its rules go at the end.
inbound_up t br1 ""
echo "alone: $(iptables -S FORWARD | grep -c gpucluster:t:inbound:br1)"
delete_tagged_rules gpucluster:t:inbound:br1
# What the create scripts made before the refusal: the bridges' NAT rules, the forward (host port
# 7000 -> the web app's 8080, from the LAN), the route to the other host, the burst VPC's route.
nat_rules t br0 10.43.3.0/24 | rules_up gpucluster:t:bridge:br0 append
nat_rules u br2 10.44.3.0/24 | rules_up gpucluster:u:bridge:br2 append
forward_up gpucluster:t:fwd:7000 7000 10.43.3.5 8080 192.168.10.0/24
routes_up t br0 10.43.3.0/24 10.47.3.0/24,10.45.0.2 10.90.0.0/16,10.90.1.254,burst
echo "@ before"; probes
ADMITTED="10.90.1.0/24,10.43.3.6,6817 10.90.1.0/24,10.43.3.5+10.43.3.6,6818+60001:63000"
inbound_up t br0 "$ADMITTED"; inbound_up t br1 ""; inbound_up u br2 ""
inbound_up t br0 "$ADMITTED"  # again: nothing changes
echo "@ refused"; probes
echo "rules: $(tagged_rule_count gpucluster:t:inbound:br0) $(tagged_rule_count gpucluster:t:inbound:br1)"
echo "misplaced: $(inbound_misplaced t br0)$(inbound_misplaced t br1)$(inbound_misplaced u br2)"
# Cluster t's NAT rules made again (appended after u's), a forward added later (on top): the order holds.
delete_tagged_rules gpucluster:t:bridge:br0
nat_rules t br0 10.43.3.0/24 | rules_up gpucluster:t:bridge:br0 append
forward_up gpucluster:t:fwd:7001 7001 10.43.3.6 22
echo "@ reordered"; probes; probe lan "$out" 192.168.10.1 7001
echo "misplaced: $(inbound_misplaced t br0)$(inbound_misplaced u br2)"
iptables -w -A FORWARD -s 10.1.0.0/16 -o br0 -m comment --comment gpucluster:t:route:10.1.0.0/16 -j ACCEPT
echo "an accept after it: $(inbound_misplaced t br0)"
"""


def section(out: str, name: str) -> list[str]:
    return out.split(f"@ {name}\n")[1].split("@ ")[0].splitlines()


def expected(refused: set[str]) -> list[str]:
    every = [
        "lan -> 10.43.3.5:8080",  # the web app's own port, past allowed_sources
        "lan -> 10.43.3.5:9090",  # Prometheus
        "lan -> 10.43.5.5:6818",  # into the cluster bridge
        "lan -> 192.168.10.1:7000",  # the forward
        "peer -> 10.43.3.5:9090",  # another host's container
        "peer-host -> 10.43.3.6:6818",  # another host itself
        "burst -> 10.43.3.6:6817",
        "burst -> 10.43.3.6:6818",
        "burst -> 10.43.3.6:60001",  # srun
        "burst -> 10.43.3.6:22",
        "burst -> 10.43.3.5:9090",
        "node -> 10.43.3.5:9090",  # on the same bridge: bridged, through iptables
        "node -> 192.168.10.11:80",  # out via NAT
        "other-cluster -> 10.43.3.5:8080",
        "node -> 10.44.3.5:8080",
    ]
    return [f"{probe} {'refused' if probe in refused else 'open'}" for probe in every]


@pytest.mark.privileged  # network namespaces of its own (unshare -n), iptables in them
def test_routed_traffic_into_a_bridge_is_refused_but_what_must_get_in():
    done = run_scene(SCENE)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    # Before: every port of every container is open to whoever routes the subnet via the host
    # (the burst VPC's route accepts nothing of its own; the ACCEPT policy lets it all in).
    assert "alone: 2\n" in out
    assert section(out, "before") == expected(set())
    refused = {
        "lan -> 10.43.3.5:8080",
        "lan -> 10.43.3.5:9090",
        "lan -> 10.43.5.5:6818",
        "burst -> 10.43.3.6:22",
        "burst -> 10.43.3.5:9090",
        "other-cluster -> 10.43.3.5:8080",
        "node -> 10.44.3.5:8080",
    }
    assert section(out, "refused")[:15] == expected(refused)
    # Made once though set twice: the bridge's own traffic, two burst entries (3 addresses), the refusal.
    assert "rules: 5 2" in out
    reordered = section(out, "reordered")
    assert reordered[:15] == expected(refused)
    assert reordered[15] == "lan -> 192.168.10.1:7001 open"
    assert out.count("misplaced: \n") == 2
    assert "an accept after it: after the refusal into the bridge: -A FORWARD -s 10.1.0.0/16" in out
