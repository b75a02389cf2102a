"""The end-to-end tests' check for a cluster a user brought up on the same host: read from
host facts given here, so nothing on this machine is touched."""

from tests.harness.host_claims import HostFacts, Link, conflicts, host_facts, refusal

CLEAN = HostFacts(
    listening={22},
    nat_rules=["-P PREROUTING ACCEPT"],
    links=[Link("lo", "", ["127.0.0.1/8"]), Link("eth0", "", ["192.0.2.2/24"])],
)
# `./up.sh local`: bridges gpubr0/gpubr1 and its web app's port 7000 forwarded.
LOCAL_UP = HostFacts(
    listening={22},
    nat_rules=[
        '-A PREROUTING -p tcp -m tcp --dport 7000 -m comment --comment "gpucluster:gpu:fwd:7000" '
        "-j DNAT --to-destination 10.42.3.10:8080"
    ],
    links=[*CLEAN.links, Link("gpubr0", "gpucluster:gpu", ["10.42.3.1/24"]), Link("gpubr1", "gpucluster:gpu", [])],
)
# `./up.sh nogpu`: 10.46.0.0/16 and port 7001, both used by the tests' variants.
NOGPU_UP = HostFacts(
    listening=set(),
    nat_rules=['-A PREROUTING -p tcp -m tcp --dport 7001 -m comment --comment "gpucluster:nogpu:fwd:7001" -j DNAT'],
    links=[Link("nogpubr0", "gpucluster:nogpu", ["10.46.3.1/24"])],
)
# The tests' own cluster, left by a run that was cut short: teardown removes it, no conflict.
OWN_LEFTOVERS = HostFacts(
    listening=set(),
    nat_rules=['-A PREROUTING -p tcp --dport 7000 -m comment --comment "gpucluster:e2e:fwd:7000" -j DNAT'],
    links=[
        Link("e2ebr0", "gpucluster:e2e", ["10.43.3.1/24"]),
        Link("e2e-out0", "", ["10.44.0.1/30"]),
        Link("e2eh2a", "", ["10.45.0.1/30"]),
    ],
)


def test_a_clean_host_and_the_tests_own_leftovers_are_no_conflict():
    assert conflicts(CLEAN) == []
    assert conflicts(OWN_LEFTOVERS) == []


def test_the_local_stack_up_is_named_by_its_port():
    [line] = conflicts(LOCAL_UP)
    assert line.startswith("host port 7000 is forwarded by the cluster gpu: ")


def test_the_nogpu_stack_up_is_named_by_its_port_and_subnet():
    found = conflicts(NOGPU_UP)
    assert found[0].startswith("host port 7001 is forwarded by the cluster nogpu")
    assert found[1] == "interface nogpubr0 (cluster nogpu) has 10.46.3.1/24, inside 10.46.0.0/16"


def test_another_program_on_a_port_is_a_conflict():
    facts = HostFacts(listening={7011}, nat_rules=[], links=[])
    assert conflicts(facts) == ["host port 7011 is in use by a listening process"]


def test_the_refusal_says_what_to_do():
    message = refusal(conflicts(LOCAL_UP))
    assert message.startswith("the end-to-end tests stop before changing anything")
    assert "./down.sh STACK" in message and "./test.sh -m 'not e2e'" in message


def test_host_facts_reads_this_host():
    facts = host_facts()
    assert any(link.name == "lo" for link in facts.links)
