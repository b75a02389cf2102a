"""/etc/os-release of the host distributions the program supports and of some it does not (as
those releases ship it, less the URLs), and a command run with fake files over the host's own
in a mount namespace of its own (the host's files are left alone)."""

from pathlib import Path

SUPPORTED = {
    "debian 12": 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\nVERSION_ID="12"\n'
    'VERSION="12 (bookworm)"\nVERSION_CODENAME=bookworm\nID=debian\n',
    "debian 13": 'PRETTY_NAME="Debian GNU/Linux 13 (trixie)"\nNAME="Debian GNU/Linux"\nVERSION_ID="13"\n'
    'VERSION="13 (trixie)"\nVERSION_CODENAME=trixie\nDEBIAN_VERSION_FULL=13.1\nID=debian\n',
    "ubuntu 22.04": 'PRETTY_NAME="Ubuntu 22.04.5 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\n'
    'VERSION="22.04.5 LTS (Jammy Jellyfish)"\nVERSION_CODENAME=jammy\nID=ubuntu\nID_LIKE=debian\n',
    "ubuntu 24.04": 'PRETTY_NAME="Ubuntu 24.04.3 LTS"\nNAME="Ubuntu"\nVERSION_ID="24.04"\n'
    'VERSION="24.04.3 LTS (Noble Numbat)"\nVERSION_CODENAME=noble\nID=ubuntu\nID_LIKE=debian\n',
}

# Each with what the refusal says it found.
UNSUPPORTED = {
    "fedora 40": (
        'NAME="Fedora Linux"\nVERSION="40 (Server Edition)"\nID=fedora\nVERSION_ID=40\n'
        'PRETTY_NAME="Fedora Linux 40 (Server Edition)"\n',
        "Fedora Linux 40 (Server Edition) (/etc/os-release: ID=fedora, VERSION_ID=40)",
    ),
    "debian 11": (
        'PRETTY_NAME="Debian GNU/Linux 11 (bullseye)"\nNAME="Debian GNU/Linux"\nVERSION_ID="11"\nID=debian\n',
        "Debian GNU/Linux 11 (bullseye) (/etc/os-release: ID=debian, VERSION_ID=11)",
    ),
    "ubuntu 20.04": (
        'NAME="Ubuntu"\nVERSION="20.04.6 LTS (Focal Fossa)"\nID=ubuntu\nID_LIKE=debian\n'
        'PRETTY_NAME="Ubuntu 20.04.6 LTS"\nVERSION_ID="20.04"\n',
        "Ubuntu 20.04.6 LTS (/etc/os-release: ID=ubuntu, VERSION_ID=20.04)",
    ),
    # Debian's testing has no VERSION_ID; a derivative is not its parent.
    "debian testing": (
        'PRETTY_NAME="Debian GNU/Linux forky/sid"\nNAME="Debian GNU/Linux"\nVERSION_CODENAME=forky\nID=debian\n',
        "Debian GNU/Linux forky/sid (/etc/os-release: ID=debian, VERSION_ID=(none))",
    ),
    "linux mint 22": (
        'NAME="Linux Mint"\nVERSION="22 (Wilma)"\nID=linuxmint\nID_LIKE="ubuntu debian"\n'
        'PRETTY_NAME="Linux Mint 22"\nVERSION_ID="22"\n',
        "Linux Mint 22 (/etc/os-release: ID=linuxmint, VERSION_ID=22)",
    ),
}


def in_mount_namespace(binds: dict[str, Path], command: list[str]) -> list[str]:
    """`command` run where each path of `binds` (e.g. /etc/os-release) shows the file it maps
    to: bind mounts in a private mount namespace, gone with the command. Needs root."""
    mounts = " && ".join(f'mount --bind "{source}" "{target}"' for target, source in binds.items())
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", f'{mounts} && exec "$@"', "sh", *command]
