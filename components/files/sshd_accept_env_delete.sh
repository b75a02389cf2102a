# Remove the drop-in of the create, check the config and reload sshd; nothing to do when gone.
master=$(sshd_master) || die "no sshd found above this session"
config=$(sshd_config_of "$master")
include=$(awk 'tolower($1) == "include" && $2 ~ /\/\*\.conf$/ {print $2; exit}' "$config")
[ -n "$include" ] || exit 0
dropin="$(dirname "$include")/gpucluster.conf"
[ -e "$dropin" ] || exit 0
rm -f "$dropin"
sshd -t -f "$config" || die "sshd -t refuses $config after removing $dropin"
kill -HUP "$master"
