# Slurm: slurm.conf as slurmctld reads it, and the cluster's slurmctld on the host or in a container.
# restart_lines: the lines of a slurm.conf on stdin that a reconfigure cannot apply, so a
# change of them restarts slurmctld: the nodes (Slurm 22.05 cannot add nodes on a reconfigure)
# and the accounting storage and job accounting plugins.
restart_lines() { grep -E '^(NodeName|AccountingStorage[A-Za-z]*|JobAcctGather[A-Za-z]*|SelectType[A-Za-z]*|ProctrackType|TaskPlugin|GresTypes)=' || true; }

# slurm_node_cpus: "NAME CPUS" for each node line of a slurm.conf on stdin, sorted by name;
# CPUs 1 where the line has none, as Slurm reads it.
slurm_node_cpus() {
  sed -n '/^NodeName=/{s/^NodeName=\([^ ]*\).*/\1 &/;s/ NodeName=.* CPUs=\([0-9]*\).*/ \1/;s/ NodeName=.*/ 1/;p}' | LC_ALL=C sort
}

# cpus_changed OLD NEW: the nodes of both slurm.conf texts whose CPUs differ. Slurm ends the
# jobs running on a node whose core count changed (a batch job is requeued and starts again
# from the beginning), on a restart as on a reconfigure.
cpus_changed() {
  LC_ALL=C join <(printf '%s\n' "$1" | slurm_node_cpus) <(printf '%s\n' "$2" | slurm_node_cpus) | awk '$2 != $3 { print $1 }' | paste -sd' '
}

# warn_cpus_changed OLD_CONF: says which nodes change their CPUs from OLD_CONF to the new
# slurm.conf, and that their running jobs end.
warn_cpus_changed() {
  local nodes
  nodes=$(cpus_changed "$1" "$(slurm_conf_text)")
  [ -z "$nodes" ] || log "CPUs of $nodes change: Slurm ends the jobs running there (a batch job is requeued and starts again)"
}

# host_slurmctld_pid CLUSTER_DIR CONF: the pid of the slurmctld running with -f CONF, or nothing.
host_slurmctld_pid() { daemon_pid "$1/slurmctld.pid" slurmctld "$2"; }


# slurm_conf_text: SLURM_CONF_TEXT as slurmctld reads it; with FirstJobId past the jobs of
# before where the cluster's job ids would otherwise start again: after a restored accounting
# database (written by the database's create), or after a saved controller state another Slurm
# release cannot read (restore_ct_slurmctld).
slurm_conf_text() {
  require CLUSTER_DIR SLURM_CONF_TEXT
  local first="$CLUSTER_DIR/accounting/first-job-id"
  printf '%s' "$SLURM_CONF_TEXT"
  if [ -s "$first" ]; then printf 'FirstJobId=%s\n' "$(cat "$first")"; fi
}

# the cluster's slurmctld, wherever it runs
# The controller's state (its job queue) is kept on the host, in $CLUSTER_DIR/slurmctld: there
# slurmctld on the host runs from it, and a slurmctld in a container saves it there when it
# stops, so a controller that moves or whose container is replaced starts from the same queue.
CT_SLURMCTLD_STATE=/var/lib/slurm/slurmctld

# stop_ct_slurmctld CONTAINER: stop slurmctld there and save its state to the host.
stop_ct_slurmctld() {
  require CLUSTER_DIR
  local name=$1 saved="$CLUSTER_DIR/slurmctld"
  in_ct "$name" systemctl disable --now --quiet slurmctld || true
  if in_ct "$name" test -e "$CT_SLURMCTLD_STATE/job_state"; then
    rm -rf "$saved.new" && mkdir -p "$saved.new"
    in_ct "$name" tar -C "$CT_SLURMCTLD_STATE" -cf - . | tar -C "$saved.new" -xf -
    chown -R slurm:slurm "$saved.new" 2>/dev/null || true
    # Which Slurm wrote it: another release's slurmctld may not read it (restore_ct_slurmctld).
    slurm_release "$name" > "$saved.new/.gpucluster-slurm-release" || true
    # Where it answered: a slurmctld that starts elsewhere from this queue has that address
    # answer for it while the jobs that started before run (forward_moved_controller).
    in_ct "$name" cat /etc/slurm/slurm.conf 2>/dev/null | controller_address | sed "s/\$/ $name/" > "$saved.new/.gpucluster-moved-from" || true
    rm -rf "$saved" && mv "$saved.new" "$saved"
  fi
  in_ct "$name" rm -f /etc/slurm/slurm.conf /etc/slurm/gres.conf /etc/slurm/cgroup.conf /etc/systemd/system/slurmctld.service.d/gpucluster.conf
}

# saved_job_id STATE_FILE: the job id sequence of slurmctld's saved job_state (22.05: the next id
# it would give). Its header, in Slurm's pack format (big-endian), alike in every release since
# 2.x: the string "PROTOCOL_VERSION" (a 32-bit length counting its NUL, then the bytes), the
# 16-bit protocol version, the 64-bit time written, then the 32-bit sequence. Fails on anything else.
saved_job_id() {
  local file=$1 size
  size=$(od -An -tu1 -N4 "$file" | awk 'NF == 4 { print $1 * 16777216 + $2 * 65536 + $3 * 256 + $4 }')
  [ "$size" = 17 ] && [ "$(head -c 20 "$file" | tail -c 16)" = PROTOCOL_VERSION ] || return 1
  od -An -tu1 -j 31 -N4 "$file" | awk 'NF == 4 { print $1 * 16777216 + $2 * 65536 + $3 * 256 + $4; ok = 1 } END { exit !ok }'
}

# carry_job_ids SAVED_DIR: a slurmctld that cannot read the saved state numbers its jobs past
# its sequence (FirstJobId, through slurm_conf_text; one past it is free whether a release
# saves the next id or the last), so a new job never takes an earlier one's id and with it its
# default output file (slurm-<id>.out, truncated when a job opens it).
carry_job_ids() {
  require CLUSTER_DIR
  local first="$CLUSTER_DIR/accounting/first-job-id" last next
  if ! last=$(saved_job_id "$1/job_state"); then
    log "the saved controller state's last job id cannot be read: job ids start again at 1"
    return 0
  fi
  next=$((last + 1))
  # Past Slurm's MaxJobId (67043328, the program sets no other) the ids wrap to FirstJobId.
  [ "$next" -lt 67043328 ] || next=1
  # A larger one kept (a restored database's) stays.
  if [ -s "$first" ] && [ "$(cat "$first")" -ge "$next" ] 2>/dev/null; then return 0; fi
  mkdir -p "$(dirname "$first")"
  printf '%s\n' "$next" > "$first.new" && mv -f "$first.new" "$first"
  log "the new slurmctld numbers its jobs from $next (FirstJobId), after the saved state's last"
}

# slurm_release CONTAINER: the Slurm release of the container's slurmctld (e.g. 22.05).
slurm_release() { in_ct "$1" slurmctld -V | awk '{print $2}' | cut -d. -f1,2; }

# restore_ct_slurmctld CONTAINER: a slurmctld about to start there for the first time takes
# the saved state (which then lives in the container only).
restore_ct_slurmctld() {
  require CLUSTER_DIR
  local name=$1 saved="$CLUSTER_DIR/slurmctld"
  [ -e "$saved/job_state" ] || return 0
  in_ct "$name" test -e "$CT_SLURMCTLD_STATE/job_state" && return 0
  # Written by another Slurm release (the node image's release changed; the preflight let it
  # through with an empty queue only): this one starts without it. No file: 22.05 wrote it.
  local wrote now
  wrote=$(cat "$saved/.gpucluster-slurm-release" 2>/dev/null || echo 22.05)
  now=$(slurm_release "$name")
  if [ "$wrote" != "$now" ]; then
    log "the saved controller state is Slurm $wrote's; slurmctld $now starts without it (its queue was empty)"
    carry_job_ids "$saved"
    rm -rf "$saved"
    return 0
  fi
  log "starting slurmctld in $name from the saved queue"
  MOVED_FROM=$(cat "$saved/.gpucluster-moved-from" 2>/dev/null) || MOVED_FROM=
  tar -C "$saved" -cf - . |
    in_ct "$name" /bin/sh -c 'set -e; mkdir -p "$1"; tar -C "$1" -xf -; chown -R slurm:slurm "$1"' sh "$CT_SLURMCTLD_STATE"
  rm -rf "$saved"
}

# stop_host_slurmctld: stop a slurmctld an earlier release started on the host for this
# cluster (checked by name, so a reused pid is never killed); its state stays for the next controller.
stop_host_slurmctld() {
  require CLUSTER_DIR
  local pid
  pid=$(host_slurmctld_pid "$CLUSTER_DIR" "$CLUSTER_DIR/controller/slurm.conf")
  if [ -n "$pid" ]; then
    stop_daemon "$pid" slurmctld
    # Its state is the next controller's queue: where it answered goes with it (restore_ct_slurmctld).
    [ ! -d "$CLUSTER_DIR/slurmctld" ] ||
      controller_address < "$CLUSTER_DIR/controller/slurm.conf" | sed 's/$/ host/' > "$CLUSTER_DIR/slurmctld/.gpucluster-moved-from" || true
  fi
  rm -rf "$CLUSTER_DIR/slurmctld.pid" "$CLUSTER_DIR/slurmctld.log" "$CLUSTER_DIR/controller"
}

# stop_other_slurmctld KEEP: the controller moved to KEEP (`host` or a container): stop this
# cluster's slurmctld everywhere else, so that two never serve one cluster.
stop_other_slurmctld() {
  require CLUSTER CLUSTER_DIR
  local keep=$1 dir name
  [ "$keep" = host ] || stop_host_slurmctld
  for dir in "${LXC_PATH:-/var/lib/lxc}"/*/; do
    name=$(basename "$dir")
    [ "$name" != "$keep" ] && [ "$(lxc_owner "$name")" = "$CLUSTER" ] && lxc_running "$name" || continue
    in_ct "$name" test -e /etc/slurm/slurm.conf || continue
    log "the controller moved: stopping slurmctld in $name"
    stop_ct_slurmctld "$name"
  done
}

# controller_address: the address of SlurmctldHost in a slurm.conf on stdin (NAME(ADDRESS)).
controller_address() { sed -n 's/^SlurmctldHost=[^(]*(\([^)]*\)).*/\1/p' | head -n1; }

# A moved controller and the jobs that started before the move: each job's slurmstepd read
# slurm.conf when its job started and sends the job's end to that SlurmctldHost; slurmd does
# not send it for it. So the old address, where it is still there (the host's own, for an
# earlier release's slurmctld on the host; a node that ran slurmctld), forwards slurmctld's port
# to the new controller (DNAT, and SNAT so the answers come back the same way) until those jobs
# have ended. $CLUSTER_DIR/controller-forwards has one line per old address: "OLD PLACE
# IP_FORWARD JOB...", PLACE `host` or the container that holds OLD, IP_FORWARD the value its
# namespace had before (`-` for the host's, which the clusters share), the jobs as squeue names
# them at the move.
CTLD_RUNNING_STATES=RUNNING,COMPLETING,SUSPENDED,CONFIGURING

controller_forward_tag() { printf 'gpucluster:%s:ctld-move:%s' "$CLUSTER" "$1"; }

# at_place PLACE COMMAND...: COMMAND in PLACE's network namespace (the host's, or a running
# container's of this cluster); fails where that place is gone.
at_place() {
  local place=$1 pid
  shift
  if [ "$place" = host ]; then command "$@"; return; fi
  [ "$(lxc_owner "$place")" = "$CLUSTER" ] && pid=$(lxc-info -n "$place" -p -H 2>/dev/null) && [ -n "$pid" ] || return 1
  nsenter -t "$pid" -n "$@"
}

# place_has_address PLACE ADDRESS: whether ADDRESS is PLACE's own.
place_has_address() { [ -n "$(at_place "$1" ip -o addr show to "$2" 2>/dev/null)" ]; }

# controller_forward_rules OLD NEW: the rules that have OLD answer for NEW's slurmctld (from
# the other containers, PREROUTING; from the place itself, OUTPUT).
controller_forward_rules() {
  local tag old=$1 new=$2 port=6817 match
  tag=$(controller_forward_tag "$old")
  match="-d $old/32 -p tcp -m tcp --dport $port -m comment --comment $tag -j DNAT --to-destination $new:$port"
  printf '%s\n' "nat PREROUTING $match" "nat OUTPUT $match" \
    "nat POSTROUTING -d $new/32 -p tcp -m tcp --dport $port -m conntrack --ctstate DNAT --ctorigdst $old -m comment --comment $tag -j SNAT --to-source $old" \
    "filter FORWARD -d $new/32 -p tcp -m tcp --dport $port -m conntrack --ctstate DNAT --ctorigdst $old -m comment --comment $tag -j ACCEPT"
}

# controller_forward_up PLACE OLD NEW / controller_forward_down PLACE OLD IP_FORWARD: that
# place's forward set, or removed and its namespace's ip_forward put back. A container forwards
# only while it does (the host does already: its NAT bridge).
controller_forward_up() {
  local place=$1 old=$2 new=$3
  [ "$place" = host ] || at_place "$place" sysctl -qw net.ipv4.ip_forward=1
  # shellcheck disable=SC2317  # called by rules_up
  controller_forward_rules "$old" "$new" | (iptables() { at_place "$place" iptables "$@"; } && rules_up "$(controller_forward_tag "$old")" top)
}
controller_forward_down() {
  local place=$1 old=$2 ip_forward=$3
  # shellcheck disable=SC2317  # called by delete_tagged_rules
  (iptables() { at_place "$place" iptables "$@"; } && delete_tagged_rules "$(controller_forward_tag "$old")") || true
  [ "$ip_forward" = - ] || at_place "$place" sysctl -qw "net.ipv4.ip_forward=$ip_forward" || true
}

# forwards_to_self NEW: before slurmctld starts at NEW, a forward away from NEW goes (the
# controller came back to a node that forwarded for it).
forwards_to_self() {
  require CLUSTER_DIR
  local new=$1 records="$CLUSTER_DIR/controller-forwards" old place ip_forward jobs kept=""
  [ -f "$records" ] || return 0
  while read -r old place ip_forward jobs; do
    if [ "$old" = "$new" ]; then
      controller_forward_down "$place" "$old" "$ip_forward"
    else
      kept+="$old $place $ip_forward $jobs"$'\n'
    fi
  done < "$records"
  if [ -n "$kept" ]; then printf '%s' "$kept" > "$records"; else rm -f "$records"; fi
}

# forward_moved_controller CONTAINER: after slurmctld answers in CONTAINER (MOVED_FROM: "OLD
# PLACE", where it answered before, if it just moved), every old address whose jobs still run
# forwards to it; the others' rules go.
forward_moved_controller() {
  require CLUSTER_DIR
  local name=$1 new records="$CLUSTER_DIR/controller-forwards" moved_from="" moved_place="" running old place ip_forward jobs job live kept=""
  new=$(slurm_conf_text | controller_address)
  read -r moved_from moved_place <<< "${MOVED_FROM:-}" || true
  if [ -z "$moved_from" ] || [ "$moved_from" = "$new" ] || ! place_has_address "$moved_place" "$moved_from"; then moved_from=""; fi
  [ -n "$moved_from" ] || [ -f "$records" ] || return 0
  running=$(in_ct "$name" squeue -h -r -t "$CTLD_RUNNING_STATES" -o %i) || return 0
  if [ -n "$moved_from" ] && [ -n "$running" ]; then
    ip_forward=-
    [ "$moved_place" = host ] || ip_forward=$(at_place "$moved_place" cat /proc/sys/net/ipv4/ip_forward)
    printf '%s %s %s %s\n' "$moved_from" "$moved_place" "$ip_forward" "$(printf '%s' "$running" | paste -sd' ')" >> "$records"
  fi
  [ -f "$records" ] || return 0
  while read -r old place ip_forward jobs; do
    live=""
    for job in $jobs; do grep -qxF -- "$job" <<< "$running" && live+=" $job"; done
    if [ -z "$live" ] || ! place_has_address "$place" "$old"; then
      controller_forward_down "$place" "$old" "$ip_forward"
      log "the controller's old address $old no longer answers for it (its jobs from before the move ended)"
      continue
    fi
    controller_forward_up "$place" "$old" "$new"
    log "the controller's old address $old ($place) answers for it while jobs from before the move run:$live"
    kept+="$old $place $ip_forward$live"$'\n'
  done < "$records"
  if [ -n "$kept" ]; then printf '%s' "$kept" > "$records"; else rm -f "$records"; fi
}

# drop_controller_forwards: no old address answers for the controller while it is gone (its
# delete). The records stay: a controller that comes back (a replaced container) takes them up
# again; the munge key's delete (it goes with the cluster) removes them.
drop_controller_forwards() {
  require CLUSTER_DIR
  local records="$CLUSTER_DIR/controller-forwards" old place ip_forward _
  [ -f "$records" ] || return 0
  while read -r old place ip_forward _; do controller_forward_down "$place" "$old" "$ip_forward"; done < "$records"
}
