# ---- ssh_prelude.sh: scripts that arrive over SSH ----
# Parameters arrive as GPUCLUSTER_<NAME> env requests (the prefix the sshd drop-in accepts):
# strip the prefix, so the scripts read the same names as on a local host. One over Linux's cap
# on an environment string (128 KiB: the node image's sources archive) stays the script's own
# variable: exported, every program the script starts would fail (E2BIG).
for __gpucluster_var in "${!GPUCLUSTER_@}"; do
  __gpucluster_value=${!__gpucluster_var}
  if [ $((${#__gpucluster_var} + ${#__gpucluster_value})) -lt 131000 ]; then
    export "${__gpucluster_var#GPUCLUSTER_}=$__gpucluster_value"
  else
    declare -g "${__gpucluster_var#GPUCLUSTER_}=$__gpucluster_value"
  fi
  unset "$__gpucluster_var"
done
unset __gpucluster_var __gpucluster_value

# sshd_master: pid of the listening sshd that serves this session (our ancestor whose parent
# is no sshd), so the drop-in goes to the sshd that runs us, whatever its config file.
sshd_master() {
  local pid=$$ parent
  while [ "$pid" -gt 1 ]; do
    parent=$(awk '{print $4}' "/proc/$pid/stat")
    if [ "$(cat "/proc/$pid/comm")" = sshd ] && [ "$(cat "/proc/$parent/comm" 2>/dev/null)" != sshd ]; then
      echo "$pid"
      return 0
    fi
    pid=$parent
  done
  return 1
}

# sshd_config_of PID: the config file of that sshd (-f, else the default). sshd rewrites its
# process title ("sshd: /usr/sbin/sshd -f FILE [listener] ..."), so the words are split here.
sshd_config_of() {
  tr '\0' ' ' < "/proc/$1/cmdline" | awk '{for (i = 1; i < NF; i++) if ($i == "-f") {print $(i + 1); exit}}' |
    grep . || echo /etc/ssh/sshd_config
}

# sshd_dropin_target: sets `master` (the sshd serving this session), `config` (its config file)
# and `dropin` (this cluster's drop-in in the directory that config includes, or empty). The
# cluster's name comes on stdin: before the drop-in exists, sshd would drop a parameter.
sshd_dropin_target() {
  local cluster include
  read -r cluster || true
  [[ "$cluster" =~ ^[a-z][a-z0-9]{0,9}$ ]] || die "expected the cluster's name on stdin, got '$cluster'"
  master=$(sshd_master) || die "no sshd found above this session"
  config=$(sshd_config_of "$master")
  include=$(awk 'tolower($1) == "include" && $2 ~ /\/\*\.conf$/ {print $2; exit}' "$config")
  # sshd reads a relative Include from /etc/ssh (not from this login's directory).
  [ -z "$include" ] || [[ $include == /* ]] || include=/etc/ssh/$include
  dropin=${include:+$(dirname "$include")/gpucluster-$cluster.conf}
}
