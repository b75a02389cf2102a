"""The host distributions the program supports (components/files/lib/host_distribution.sh): the
preflight's check of /etc/os-release, and the packages each one is asked for by its own names
(packages_create.sh, run with a fake apt-get and dpkg-query)."""

import os
import subprocess
from pathlib import Path

import pytest

from components.common.transport import INTERPRETER, helpers, script
from components.host.gpu_host import FILES, HOST_PACKAGES
from components.sharedfs.shared_fs import CLIENT_PACKAGES, SERVER_PACKAGES
from tests.host.os_releases import SUPPORTED, UNSUPPORTED, in_mount_namespace

ALL_PACKAGES = [*HOST_PACKAGES, *SERVER_PACKAGES, *(name for names in CLIENT_PACKAGES.values() for name in names)]


def call(function: str, *args: str) -> str:
    done = subprocess.run(
        ["/bin/bash", "-c", f'{helpers()}\n{function} "$@"', "test", *args],
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def os_release(tmp_path: Path, text: str) -> str:
    path = tmp_path / "os-release"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("name", SUPPORTED)
def test_a_supported_distribution_passes(tmp_path, name):
    assert call("host_distribution_problem", os_release(tmp_path, SUPPORTED[name])) == ""


@pytest.mark.parametrize("name", UNSUPPORTED)
def test_another_distribution_is_refused_naming_what_was_found_and_what_is_supported(tmp_path, name):
    text, found = UNSUPPORTED[name]
    path = os_release(tmp_path, text)
    line = call("host_distribution_problem", path)
    assert line.startswith(f"this host runs {found.replace('/etc/os-release', path)}, which the program does not"), line
    assert "the cluster's hosts run Debian 12, Debian 13, Ubuntu 22.04 or Ubuntu 24.04" in line
    assert line.count("\n") == 1


def test_a_host_without_os_release_is_refused(tmp_path):
    line = call("host_distribution_problem", str(tmp_path / "none"))
    assert line.startswith(f"this host has no {tmp_path}/none, so its distribution is unknown"), line


def test_quotes_are_taken_off_and_nothing_in_the_file_runs(tmp_path):
    path = os_release(tmp_path, f"ID='ubuntu'\nVERSION_ID=\"24.04\"\nNAME=$(touch {tmp_path}/ran)\n")
    assert call("host_distribution", path) == "ubuntu 24.04\n"
    assert not (tmp_path / "ran").exists()


# Where a supported distribution names a package otherwise than Debian 12 (which the program's
# lists use): libnfs 5 is soname 14.
RENAMED = {"debian 13": {"libnfs13": "libnfs14"}, "ubuntu 24.04": {"libnfs13": "libnfs14"}}


@pytest.mark.parametrize("name", SUPPORTED)
def test_each_package_is_named_as_the_distribution_names_it(tmp_path, name):
    names = call("host_package_names", os_release(tmp_path, SUPPORTED[name]), *ALL_PACKAGES).split()
    assert names == [RENAMED.get(name, {}).get(package, package) for package in ALL_PACKAGES]


def test_the_host_needs_no_slurm_and_debootstrap_can_verify_debians_archive():
    assert not {"slurm-client", "slurmctld", "slurmd", "munge"} & set(HOST_PACKAGES)
    # Ubuntu ships only its own archive keyring; LXC's Debian template needs Debian's.
    assert {"lxc", "lxc-templates", "debootstrap", "debian-archive-keyring"} <= set(HOST_PACKAGES)


FAKE_APT = """#!/bin/sh
echo "$*" >> "$APT_CALLS"
"""
# Nothing installed but curl.
FAKE_DPKG_QUERY = """#!/bin/sh
[ "$3" = curl ] && printf 'install ok installed'
exit 0
"""


@pytest.mark.privileged  # a mount namespace of its own (its /etc/os-release)
@pytest.mark.parametrize("name", ["debian 12", "ubuntu 24.04"])
def test_the_packages_script_installs_the_names_of_the_hosts_distribution(tmp_path, name):
    assert os.geteuid() == 0, "a mount namespace needs root"
    fakes = tmp_path / "bin"
    fakes.mkdir()
    for program, text in (("apt-get", FAKE_APT), ("dpkg-query", FAKE_DPKG_QUERY)):
        (fakes / program).write_text(text)
        (fakes / program).chmod(0o755)
    marker = "# ---- packages_create.sh ----\n"
    text = script(FILES / "packages_create.sh").replace(marker, f'{marker}PATH="{fakes}:$PATH"\n')
    record = tmp_path / "state" / "host-packages"
    command = in_mount_namespace({"/etc/os-release": Path(os_release(tmp_path, SUPPORTED[name]))}, [*INTERPRETER, text])
    done = subprocess.run(
        command,
        env={
            "PATH": os.environ["PATH"],
            "PACKAGES": "\n".join(["lxc", "curl", "libnfs13", "debian-archive-keyring"]),
            "RECORD": str(record),
            "APT_CALLS": str(tmp_path / "apt-calls"),
        },
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    libnfs = RENAMED.get(name, {}).get("libnfs13", "libnfs13")
    install = [line for line in (tmp_path / "apt-calls").read_text().splitlines() if " install " in line]
    assert install == [f"-o DPkg::Lock::Timeout=300 install -y -qq lxc {libnfs} debian-archive-keyring"]
    assert record.read_text().split() == ["lxc", libnfs, "debian-archive-keyring"]
