# Shared by up.sh, test.sh and verify.sh (sourced, from the project root): the Python venv
# they run in, and which stack this machine can bring up.

# venv_python: the interpreter venv/ is made with: the distribution's python3 (/usr/bin/python3,
# or $DISTRO_PYTHON3) where there is one, else the python3 on PATH. Not whichever python3 comes
# first on PATH (pyenv, /usr/local/bin): ./up.sh, ./test.sh and CI then all run the Python a
# user's root shell on the host has.
# A distribution python3 older than the project supports (Ubuntu 22.04's 3.10) is passed over.
venv_python() {
  local distro=${DISTRO_PYTHON3:-/usr/bin/python3}
  if [ -x "$distro" ] && "$distro" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    printf '%s\n' "$distro"
  elif ! command -v python3; then
    echo "error: no python3: neither $distro (3.11 or later) nor one on PATH" >&2
    return 1
  fi
}

# ensure_venv [test]: venv/ with the locked packages installed: requirements.lock (what runs
# the program), and with `test` requirements-test.lock beside it (the test tools). Every file is
# checked against the lock's sha256 and nothing unlocked comes in (--require-hashes --no-deps):
# up.sh and verify.sh run as root, with the stack's passphrase. A venv/ without a working
# python or pip (left by a `python3 -m venv` that failed half-way, as it does on a Debian
# without python3-venv), or made by another Python than venv_python, is rebuilt; python3-venv
# is installed first when it is missing (as root; else the command is named).
ensure_venv() {
  local locks=(-r requirements.lock) python made wanted
  [ "${1:-}" != test ] || locks+=(-r requirements-test.lock)
  python=$(venv_python) || return 1
  # Which Python a venv runs: its base installation and version.
  local identity='import sys; print(sys.base_prefix, sys.version.split()[0])'
  if { [ -e venv ] || [ -L venv ]; }; then
    if ! made=$(venv/bin/python -c "import pip; $identity" 2>/dev/null); then
      echo "venv/ is broken (no working python or pip in it): rebuilding it" >&2
      rm -rf venv
    elif wanted=$("$python" -c "$identity") && [ "$made" != "$wanted" ]; then
      echo "venv/ was made by another Python ($made) than $python ($wanted): rebuilding it" >&2
      rm -rf venv
    fi
  fi
  if [ ! -e venv ]; then
    if ! "$python" -c 'import ensurepip' >/dev/null 2>&1; then
      if [ "$(id -u)" != 0 ]; then
        echo "error: python3 cannot make a venv here: Debian's python3-venv is missing. Run as root:" >&2
        echo "  apt-get install -y python3-venv" >&2
        return 1
      fi
      echo "installing Debian's python3-venv (python3 cannot make a venv without it)" >&2
      DEBIAN_FRONTEND=noninteractive apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv
    fi
    "$python" -m venv venv
  fi
  # pip takes 1 to 2 s even with nothing to install (it reads every installed package): the
  # sha256 of the locks it last installed in full are kept in venv/, and while the wanted ones
  # are among them, pip is not run again. (Remove venv/.installed-locks to have pip check.)
  local stamp=venv/.installed-locks sums files=(requirements.lock)
  [ "${1:-}" != test ] || files+=(requirements-test.lock)
  sums=$(sha256sum "${files[@]}") || return 1
  if [ -f "$stamp" ] && ! grep -qvxFf "$stamp" <<< "$sums"; then
    return 0
  fi
  rm -f "$stamp"
  venv/bin/python -m pip install -q --disable-pip-version-check --require-hashes --no-deps "${locks[@]}" || return
  printf '%s\n' "$sums" > "$stamp"
}

# Whether this machine has the NVIDIA driver loaded: the test the stand-in GPUs make
# (components/host/files/stand_in_gpus_create.sh), which refuses them where it holds.
nvidia_driver_loaded() {
  [ -e "${NVIDIA_DRIVER_PROC:-/proc/driver/nvidia}" ]
}
