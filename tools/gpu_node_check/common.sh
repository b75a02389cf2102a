# What check.sh and in_namespace.sh share (sourced from the repository's root).
COMMANDS=tools/gpu_node_check/work/commands.json

# scratch_paths: under check.sh's fresh scratch directory ($SCRATCH), the unpacked LXC, its
# container path, the containers' rootfs and logs, and the unpacked Slurm and munge (bound into
# the nodes at the same path, so slurm.conf's PluginDir holds on the host and in the nodes).
scratch_paths() {
  LXC_ROOT=$SCRATCH/lxc-install LXCPATH=$SCRATCH/containers CT=$SCRATCH/ct SLURM_ROOT=$SCRATCH/slurm-install
}

# slurm_unpack DEBS_DIR: Debian's Slurm and munge (prepare.py's slurm-debs) unpacked in
# $SLURM_ROOT (dpkg -x: no maintainer script, nothing in the system's paths), each program run
# through a wrapper in $SLURM_ROOT/wrap that names the unpacked libraries (the binaries' RUNPATH
# is Debian's /usr/lib/x86_64-linux-gnu/slurm-wlm). Debian names the daemons *-wlm.
SLURM_PROGRAMS="usr/sbin/slurmctld-wlm usr/sbin/slurmd-wlm usr/sbin/slurmstepd-wlm usr/sbin/munged
  usr/bin/munge usr/bin/unmunge usr/bin/srun usr/bin/sinfo usr/bin/scontrol usr/bin/squeue"
slurm_unpack() {
  local d t libs
  mkdir -p "$SLURM_ROOT/wrap" || return 1
  for d in "$1"/*.deb; do dpkg -x "$d" "$SLURM_ROOT" || return 1; done
  libs=$SLURM_ROOT/usr/lib/x86_64-linux-gnu/slurm-wlm:$SLURM_ROOT/usr/lib/x86_64-linux-gnu:$SLURM_ROOT/lib/x86_64-linux-gnu
  for t in $SLURM_PROGRAMS; do
    d=${t##*/}
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s/%s "$@"\n' "$libs" "$SLURM_ROOT" "$t" > "$SLURM_ROOT/wrap/${d%-wlm}"
    chmod 755 "$SLURM_ROOT/wrap/${d%-wlm}"
  done
}

step() { printf '\n===== %s (%ss)\n' "$*" "$SECONDS"; }

# libs FILE...: the project's shell helpers (components/files/lib/FILE.sh), in this shell.
libs() {
  source components/files/lib/core.sh
  set +e +u
  for l in "$@"; do source "components/files/lib/$l.sh"; done
}

# in_node CONTAINER COMMAND...: COMMAND in the node, with a plain environment.
in_node() { local n=$1; shift; timeout 120 lxc-attach -n "$n" --clear-env -- env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"; }

# probe: the acceptance probe of ./verify.sh --gpu (ops/verify_gpu.py's PROBE).
probe() { python3 - <<'EOF'
import ast
tree = ast.parse(open("ops/verify_gpu.py").read())
print(next(n.value.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "PROBE"))
EOF
}

# env_of NAME VAR: a variable of the command NAME's environment (prepare.py's commands.json).
env_of() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]]["environment"][sys.argv[3]])' "$COMMANDS" "$@"; }

# runcmd NAME [VAR=VALUE...]: the command's create script with its environment, as the engine runs it.
runcmd() {
  python3 - "$COMMANDS" "$@" <<'PY'
import json, os, subprocess, sys
path, name, extra = sys.argv[1], sys.argv[2], dict(a.split("=", 1) for a in sys.argv[3:])
c = json.load(open(path))[name]
done = subprocess.run([*c["interpreter"], c["create"]], env={**os.environ, **c["environment"], **extra},
                      capture_output=True, text=True, timeout=120)
print(f"exit {done.returncode}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-5000:]}")
PY
}
