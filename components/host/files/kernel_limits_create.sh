# The kernel limits this host's node containers need (lib/kernel_limits.sh), raised and
# persisted in the cluster's file in /etc/sysctl.d/; never lowered below the host's own.
require CLUSTER KERNEL_LIMITS_FILE KERNEL_LIMITS
kernel_limits_set "$CLUSTER" "$KERNEL_LIMITS_FILE" "$KERNEL_LIMITS"
