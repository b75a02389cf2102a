require BOOT_SCRIPT HOST_STATE UNIT_FILE
unit_dir=$(dirname "$UNIT_FILE")
rm -f "$unit_dir/multi-user.target.wants/$(basename "$UNIT_FILE")" "$UNIT_FILE"
[ ! -d /run/systemd/system ] || systemctl daemon-reload
rm -f "$BOOT_SCRIPT" "$HOST_STATE"
