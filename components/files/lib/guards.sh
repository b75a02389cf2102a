# Firewall guards: REJECT rules keeping the cluster's containers (every job) away from a
# service they must not reach. A guard is one word, TAG,KIND,ARGS... (the host state's GUARDS,
# space-separated); its rules carry TAG, so verify, the boot unit and delete find them.

# guard_rules GUARD: the rule lines of one guard.
#   TAG,exporter,ADDRESS,PORT,ALLOWED: TCP to ADDRESS:PORT only from ALLOWED (Prometheus) and
#     the host itself (over lo).
#   TAG,nfs,SERVER,PORT,SUBNETS[,input]: no NFS (TCP and UDP PORT) from the container SUBNETS
#     ('+'-separated) to SERVER through this host (FORWARD: masqueraded, a job's traffic would
#     come from the host's address) and, with `input`, to this host itself (it serves it), but
#     over lo: the host's own mount of its own export (a one-host stack serves it at its NAT
#     bridge address, a source inside SUBNETS) is no container's.
guard_rules() {
  local tag kind a b c d address subnet proto chain from
  IFS=, read -r tag kind a b c d <<< "$1"
  case "$kind" in
    exporter)
      printf '%s\n' "filter INPUT ! -i lo -d $a/32 -p tcp --dport $b ! -s $c/32 -m comment --comment $tag -j REJECT --reject-with tcp-reset"
      ;;
    nfs)
      for address in $(ipv4_addresses "$a"); do
        for chain in FORWARD ${d:+INPUT}; do
          from=""
          [ "$chain" = FORWARD ] || from=" ! -i lo"
          for subnet in ${c//+/ }; do
            for proto in tcp udp; do
              printf '%s\n' "filter $chain$from -s $subnet -d $address/32 -p $proto --dport $b -m comment --comment $tag -j REJECT"
            done
          done
        done
      done
      ;;
    *) die "unknown guard kind '$kind' in '$1'" ;;
  esac
}

# guard_up GUARD: exactly the guard's rules, on top of their chains (before the bridges'
# accepts); a changed guard replaces them.
guard_up() {
  local rules
  rules=$(guard_rules "$1") # first: a server that does not resolve stops here, rules untouched
  rules_up "${1%%,*}" top <<< "$rules"
}

# guard_down GUARD: remove the guard's rules; succeeds when they are gone.
guard_down() { delete_tagged_rules "${1%%,*}"; }

# ipv4_addresses NAME: NAME when it is an IPv4 address, else its addresses (resolved now: a
# server named by DNS is guarded at the addresses it has when the rules are set).
ipv4_addresses() {
  local found
  if [[ "$1" =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
    printf '%s\n' "$1"
    return
  fi
  found=$(getent ahostsv4 "$1" | awk '{print $1}' | sort -u)
  [ -n "$found" ] || die "cannot resolve $1 (the NFS server) to guard it from the containers"
  printf '%s\n' "$found"
}
