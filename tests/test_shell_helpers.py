"""Every script gets the shared helper files it calls (components/common/transport.py): checked by bash
itself, which lists the functions the included helpers define and prints each one's body."""

import re
import subprocess
from pathlib import Path

import pytest

from components.common import transport
from components.common.transport import helper_files, helpers, script

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(ROOT.glob("components/**/files/*.sh"))
HEADER = re.compile(r"^# ---- [\w.-]+ ----$", re.MULTILINE)


def bash_functions(text: str) -> dict[str, str]:
    """The functions bash has after running `text` (helpers only), each with its body as bash prints it."""
    listing = 'for f in $(compgen -A function); do printf "@@ %s\\n" "$f"; declare -f "$f"; done'
    done = subprocess.run(
        ["/bin/bash", "-c", f"{text}\n{listing}"],
        capture_output=True,
        text=True,
        check=True,
    )
    functions, name = {}, None
    for line in done.stdout.splitlines():
        if line.startswith("@@ "):
            name = line[3:]
            functions[name] = ""
        else:
            functions[name] += line + "\n"
    return functions


ALL = bash_functions(helpers())


def calls(text: str) -> set[str]:
    """The shared helper functions that `text` names as a word outside comments."""
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    return {name for name in ALL if re.search(rf"(?<![\w$-]){re.escape(name)}(?![\w-])", code)}


def missing(assembled: str) -> set[str]:
    """Helper functions the script, or a helper it includes, calls but its text does not define."""
    header = list(HEADER.finditer(assembled))[-1]
    defined = bash_functions(assembled[: header.start()])
    wanted = calls(assembled[header.end() :])
    for body in defined.values():
        wanted |= calls(body)
    return wanted - set(defined)


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_script_includes_the_helpers_it_calls(path):
    assert missing(script(path)) == set()


def test_the_check_finds_a_helper_file_left_out():
    path = ROOT / "components/network/files/forward_create.sh"
    body = path.read_text()
    included = helper_files(body)
    assert "iptables.sh" in included  # forward_up pipes into rules_up
    without = helpers([name for name in included if name != "iptables.sh"]) + f"# ---- {path.name} ----\n{body}"
    assert {"rules_up"} <= missing(without)


def test_helpers_come_in_one_order_core_first():
    for path in SCRIPTS:
        included = helper_files(path.read_text())
        assert included[0] == transport.CORE
        assert included[1:] == sorted(included[1:])
    assert helper_files("nothing here") == [transport.CORE]


def test_the_header_names_the_file_not_its_folder(tmp_path):
    moved = tmp_path / "elsewhere" / "files" / "container_create.sh"
    moved.parent.mkdir(parents=True)
    original = ROOT / "components/lxc/files/container_create.sh"
    moved.write_text(original.read_text())
    assert script(moved) == script(original)


def test_staging_files_for_a_container_prints_nothing_on_stderr(tmp_path):
    """Item 3 of issue 35: the first ct_stage printed `...: line N: .../manifest: No such file or
    directory` (its redirection failed before its 2>/dev/null applied) into every create's output."""
    text = (ROOT / "components/files/lib/lxc.sh").read_text()
    done = subprocess.run(
        ["/bin/bash", "-c", f'{text}\nset -eu\necho a | ct_stage "$1" /etc/a 0644 root\nct_stage_absent "$1" /etc/b\n'
         'echo c | ct_stage "$1" /etc/c 0600 root:root\ncat "$1/manifest"', "-", str(tmp_path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.splitlines() == ["1 0644 root /etc/a", "2 - - /etc/b", "3 0600 root:root /etc/c"]
    assert (tmp_path / "1").read_text() == "a\n" and (tmp_path / "3").read_text() == "c\n"
