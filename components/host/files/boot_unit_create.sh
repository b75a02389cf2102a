# The cluster's bring-up at boot: the script and the description of the host state in the
# cluster directory, and on hosts with systemd a unit running them, enabled.
require BOOT_SCRIPT BOOT_SCRIPT_TEXT HOST_STATE HOST_STATE_TEXT UNIT_FILE UNIT_TEXT
printf '%s' "$BOOT_SCRIPT_TEXT" | write_if_changed "$BOOT_SCRIPT" 0755 || true
printf '%s' "$HOST_STATE_TEXT" | write_if_changed "$HOST_STATE" 0644 || true
unit_dir=$(dirname "$UNIT_FILE")
if [ ! -d "$unit_dir" ]; then
  log "no $unit_dir (no systemd): run '/bin/bash $BOOT_SCRIPT $HOST_STATE' at boot from your init system"
  exit 0
fi
changed=1
printf '%s' "$UNIT_TEXT" | write_if_changed "$UNIT_FILE" 0644 && changed=0
# What `systemctl enable` does, without needing a running systemd.
mkdir -p "$unit_dir/multi-user.target.wants"
ln -sfn "$UNIT_FILE" "$unit_dir/multi-user.target.wants/$(basename "$UNIT_FILE")"
if [ "$changed" = 0 ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload
fi
