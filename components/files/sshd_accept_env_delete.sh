# Remove the cluster's drop-in (its name on stdin), check the config and reload sshd; nothing
# to do when it is gone.
sshd_dropin_target
[ -n "$dropin" ] && [ -e "$dropin" ] || exit 0
rm -f "$dropin"
sshd -t -f "$config" || die "sshd -t refuses $config after removing $dropin"
kill -HUP "$master"
