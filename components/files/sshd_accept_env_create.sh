# Let the sshd serving this session accept the cluster's parameters (GPUCLUSTER_*, and the
# provider's PULUMI_COMMAND_*) sent as SSH env requests. No parameters: they would be dropped
# (the cluster's name comes on stdin). The drop-in goes into the directory its config
# includes; `sshd -t` checks it; a reload (SIGHUP: sshd re-executes itself, open sessions
# stay) applies it. Never a restart. One drop-in per cluster: clusters sharing a host leave
# each other's alone.
sshd_dropin_target
[ -n "$dropin" ] ||
  die "$config includes no drop-in directory (Include DIR/*.conf): add 'AcceptEnv GPUCLUSTER_* PULUMI_COMMAND_*' to it yourself"
mkdir -p "$(dirname "$dropin")"
printf '# Managed by the gpu-cluster Pulumi program: its parameters arrive as SSH env requests.\nAcceptEnv GPUCLUSTER_* PULUMI_COMMAND_*\n' |
  write_if_changed "$dropin" 0644 || exit 0
if ! sshd -t -f "$config"; then
  rm -f "$dropin"
  die "sshd -t refused $config with $dropin; removed it"
fi
kill -HUP "$master"
# Until sshd listens again, a new connection would be refused.
sleep 0.2
wait_until 10 "sshd $master to listen again" bash -c "ss -Hltnp | grep -q 'pid=$master,'"
log "sshd $master accepts GPUCLUSTER_* ($dropin)"
