# The cluster's kernel limits given back: its file in /etc/sysctl.d/ goes, and each value is
# what the host had before plus what the other clusters here still need (lib/kernel_limits.sh).
require CLUSTER KERNEL_LIMITS_FILE
kernel_limits_set "$CLUSTER" "$KERNEL_LIMITS_FILE" ""
