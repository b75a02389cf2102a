# ---- ssh_host.sh: the host's LXC path ----
# Each host may keep its containers under its own LXC path (LXC_PATH, `lxc-* -P`).
if [ -n "${LXC_PATH:-}" ] && [ "$LXC_PATH" != /var/lib/lxc ]; then
  lxc_dir() { printf '%s/%s' "$LXC_PATH" "$1"; }
  lxc-attach() { command lxc-attach -P "$LXC_PATH" "$@"; }
  lxc-copy() { command lxc-copy -P "$LXC_PATH" "$@"; }
  lxc-create() { command lxc-create -P "$LXC_PATH" "$@"; }
  lxc-destroy() { command lxc-destroy -P "$LXC_PATH" "$@"; }
  lxc-info() { command lxc-info -P "$LXC_PATH" "$@"; }
  lxc-start() { command lxc-start -P "$LXC_PATH" "$@"; }
  lxc-stop() { command lxc-stop -P "$LXC_PATH" "$@"; }
  mkdir -p "$LXC_PATH"
fi
