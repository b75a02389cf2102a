# The burst programs off the controller: the timer, the programs, the key, their state.
require CLUSTER BASE CREDENTIALS_FILE STATE_DIR
on_controller() { if [ -n "${CONTAINER:-}" ]; then in_ct "$CONTAINER" "$@"; else "$@"; fi; }
if [ -n "${CONTAINER:-}" ] && ! lxc_running "$CONTAINER"; then
  log "controller container $CONTAINER is not running: nothing to remove"
  exit 0
fi
unit=gpucluster-burst-$CLUSTER-reconcile
on_controller systemctl disable --now --quiet "$unit.timer" 2>/dev/null || true
on_controller rm -rf "/etc/systemd/system/timers.target.wants/$unit.timer" "/etc/systemd/system/$unit.timer" "/etc/systemd/system/$unit.service" \
  "$BASE" "$CREDENTIALS_FILE" "$STATE_DIR"
on_controller /bin/sh -c '[ ! -d /run/systemd/system ] || systemctl daemon-reload' || true
