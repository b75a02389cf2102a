# Let the sshd serving this session accept the cluster's parameters (GPUCLUSTER_*, and the
# provider's PULUMI_COMMAND_*) sent as SSH env requests, from the deploying login only. No
# parameters: they would be refused (the cluster's name comes on stdin). The drop-in goes into
# the directory its config includes; `sshd -t` checks it; a reload (SIGHUP: sshd re-executes
# itself, open sessions stay) applies it. Never a restart. One drop-in per cluster: clusters
# sharing a host leave each other's alone.
sshd_dropin_target
[ -n "$dropin" ] ||
  die "$config includes no drop-in directory (Include DIR/*.conf): add 'AcceptEnv GPUCLUSTER_* PULUMI_COMMAND_*' to it yourself"
user=$(id -un)
# An AcceptEnv under Match replaces the host's own list for that user: the host's names
# (sshd -T without a connection: no Match applied) are kept beside ours.
own=$(sshd -T -f "$config" | awk 'tolower($1) == "acceptenv" && $2 !~ /^(GPUCLUSTER|PULUMI_COMMAND)_/ {printf " %s", $2}')
previous=""
[ ! -f "$dropin" ] || previous=$(cat "$dropin")
mkdir -p "$(dirname "$dropin")"
printf '# Managed by the gpu-cluster Pulumi program: its parameters arrive as SSH env requests.\nMatch User %s\n  AcceptEnv GPUCLUSTER_* PULUMI_COMMAND_*%s\n' \
  "$user" "$own" | write_if_changed "$dropin" 0644 || exit 0
# put_back: the drop-in as it was before this run (none: removed).
put_back() {
  if [ -n "$previous" ]; then printf '%s\n' "$previous" > "$dropin"; else rm -f "$dropin"; fi
}
if ! sshd -t -f "$config"; then
  put_back
  die "sshd -t refused $config with $dropin; put the previous one back"
fi
listening() { ss -Hltnp | grep -q "pid=$master,"; }
kill -HUP "$master"
# Until sshd listens again, a new connection would be refused. If it does not come back, the
# previous drop-in goes back and sshd is reloaded (or started, if it is gone) with it.
sleep 0.2
for _ in $(seq 20); do
  listening && break
  sleep 0.5
done
if ! listening; then
  put_back
  if kill -0 "$master" 2>/dev/null; then
    kill -HUP "$master"
  elif command -v systemctl >/dev/null; then
    systemctl start ssh.service || systemctl start sshd.service || true
  fi
  die "sshd $master did not listen again after the reload with $dropin; put the previous one back"
fi
log "sshd $master accepts GPUCLUSTER_* from $user ($dropin)"
