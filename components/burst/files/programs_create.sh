# The burst programs on the controller (the host or the container slurmctld runs in):
# their Python files, boto3 in a venv of their own (its hashed lock), the wrappers slurm.conf names,
# the controller's AWS key (stdin only, 0400 slurm), the reconciler's timer, and the
# cluster's munge key put in its Secrets Manager secret for the burst nodes.
require CLUSTER BASE CONFIG_JSON CREDENTIALS_FILE STATE_DIR LOG_FILE MUNGE_KEY_FILE SECRET_ID
require BURST_COMMON_PY RESUME_PY SUSPEND_PY RECONCILE_PY STORE_MUNGE_KEY_PY REQUIREMENTS_LOCK
on_controller() { if [ -n "${CONTAINER:-}" ]; then in_ct "$CONTAINER" "$@"; else "$@"; fi; }
# put PATH MODE OWNER < content
put() {
  if [ -n "${CONTAINER:-}" ]; then
    ct_write_if_changed "$CONTAINER" "$1" "$2" "$3"
  else
    local changed=1
    write_if_changed "$1" "$2" && changed=0
    chown "$3" "$1"
    return "$changed"
  fi
}
[ -s "$MUNGE_KEY_FILE" ] || die "munge key $MUNGE_KEY_FILE is missing (made by the munge-key resource)"
credentials=$(cat)
[ -n "$credentials" ] || die "no AWS key for the burst programs on stdin"

# The programs: one variable per file (BURST_COMMON_PY holds burst_common.py...).
for variable in BURST_COMMON_PY RESUME_PY SUSPEND_PY RECONCILE_PY STORE_MUNGE_KEY_PY REQUIREMENTS_LOCK; do
  name=$(printf '%s' "$variable" | tr 'A-Z' 'a-z' | sed 's/_\([a-z]*\)$/.\1/')
  printf '%s' "${!variable}" | put "$BASE/lib/$name" 0644 root:root || true
done
printf '%s\n' "$CONFIG_JSON" | put "$BASE/burst.json" 0644 root:root || true
printf '%s' "$credentials" | put "$CREDENTIALS_FILE" 0400 slurm:slurm || true
on_controller install -d -o slurm -g slurm -m 0750 "$STATE_DIR" "$(dirname "$LOG_FILE")"
on_controller /bin/sh -c 'touch "$1" && chown slurm:slurm "$1" && chmod 0640 "$1"' sh "$LOG_FILE"

# boto3 in its own venv (Debian's python3-boto3 is too old), as root, for programs that hold
# the AWS key: only the lock's files, each checked against its sha256, no unlocked dependency
# (components/burst/files/requirements.lock, tools/lock_requirements.py); made again when it changes.
# In a container, pip trusts what the host trusts (its CA bundle: a site's TLS proxy, say).
if [ -n "${CONTAINER:-}" ] && [ -s /etc/ssl/certs/ca-certificates.crt ]; then
  put "$BASE/host-ca.crt" 0644 root:root < /etc/ssl/certs/ca-certificates.crt || true
fi
if ! on_controller cmp -s "$BASE/lib/requirements.lock" "$BASE/venv/requirements.lock" 2>/dev/null; then
  on_controller /bin/sh -c 'set -e; rm -rf "$1/venv"; python3 -m venv "$1/venv"
    if [ -s "$1/host-ca.crt" ]; then export PIP_CERT="$1/host-ca.crt"; fi
    "$1/venv/bin/pip" install -q --disable-pip-version-check --require-hashes --no-deps -r "$1/lib/requirements.lock"
    cp "$1/lib/requirements.lock" "$1/venv/requirements.lock"' sh "$BASE"
fi

# The wrappers slurm.conf names (ResumeProgram...): the config's path, the venv's Python. They
# take the usual OOM score back from slurmctld, which starts them with its own (never picked).
wrapper() { printf '#!/bin/sh\necho 0 2>/dev/null >/proc/self/oom_score_adj\nGPUCLUSTER_BURST_CONFIG=%s/burst.json exec %s/venv/bin/python %s/lib/%s "$@"\n' \
  "$BASE" "$BASE" "$BASE" "$1"; }
wrapper resume.py | put "$BASE/bin/resume" 0755 root:root || true
wrapper suspend.py | put "$BASE/bin/suspend" 0755 root:root || true
wrapper 'suspend.py --failed' | put "$BASE/bin/resume-fail" 0755 root:root || true
wrapper reconcile.py | put "$BASE/bin/reconcile" 0755 root:root || true

# The reconciler: every minute, as slurm.
unit=gpucluster-burst-$CLUSTER-reconcile
printf '[Unit]\nDescription=gpu-cluster %s: burst instances and nodes agree\n[Service]\nType=oneshot\nUser=slurm\nExecStart=%s/bin/reconcile\n' \
  "$CLUSTER" "$BASE" | put "/etc/systemd/system/$unit.service" 0644 root:root || true
printf '[Unit]\nDescription=gpu-cluster %s burst reconciler\n[Timer]\nOnBootSec=60\nOnUnitActiveSec=60\n[Install]\nWantedBy=timers.target\n' \
  "$CLUSTER" | put "/etc/systemd/system/$unit.timer" 0644 root:root || true
if on_controller test -d /run/systemd/system; then
  on_controller systemctl daemon-reload
  on_controller systemctl enable --now --quiet "$unit.timer"
else
  # What `systemctl enable` does, without a running systemd (a host booted by another init).
  on_controller /bin/sh -c 'mkdir -p /etc/systemd/system/timers.target.wants &&
    ln -sfn "/etc/systemd/system/$1.timer" "/etc/systemd/system/timers.target.wants/$1.timer"' sh "$unit"
  log "no systemd running where slurmctld runs: $unit.timer starts at its next boot; until then run $BASE/bin/reconcile as slurm each minute (cron)"
fi

# The munge key, for the burst nodes' role to read (piped: never in argv).
cat "$MUNGE_KEY_FILE" | on_controller env GPUCLUSTER_BURST_CONFIG="$BASE/burst.json" \
  "$BASE/venv/bin/python" "$BASE/lib/store_munge_key.py" "$SECRET_ID"
# slurmctld checks the programs slurm.conf names when it reads its config: started before they
# were here, it disabled power saving ("invalid SuspendProgram"). A reconfigure checks again.
slurm_conf=$(printf '%s' "$CONFIG_JSON" | python3 -c 'import json, sys; print(json.load(sys.stdin).get("slurm_conf") or "")')
if on_controller env ${slurm_conf:+SLURM_CONF=$slurm_conf} scontrol ping >/dev/null 2>&1; then
  on_controller env ${slurm_conf:+SLURM_CONF=$slurm_conf} scontrol reconfigure
fi
log "burst programs of $CLUSTER installed in $BASE"
