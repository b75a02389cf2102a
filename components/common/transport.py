"""Host commands: every pulumi-command resource runs a script kept in a component's files/.

A host's commands run their scripts (shared helpers + the script) from the host's script store
(components/common/script_store.py): the resource input is a short stub naming each file of
the script by its content hash, so a preview still says which file changed; parameters travel
as environment variables, never pasted into shell text.
This is the only module that creates pulumi-command resources.

A host is reached locally (`local.Command`, the default: a one-host stack's graph) or over
SSH (`remote.Command`, the same script files). Over SSH the environment travels as SSH env
requests, which stock sshd drops unless `AcceptEnv` lists the names: every parameter of an
SSH host carries the prefix `GPUCLUSTER_` (lib's prelude strips it), and the host's first
command installs an sshd drop-in accepting that prefix. Secrets travel by stdin only.
"""

import functools
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pulumi
from pulumi_command import local, remote

from components.common import script_store
from components.common.script_store import Part


class TransportHost(Protocol):
    """What the transport reads of a host (the composition's ClusterHostConfig): its name, how it
    is reached (`connection`: an SSH endpoint where `is_ssh`), its LXC path, whether it is retired."""

    name: str
    connection: Any
    lxc_dir: str
    state_dir: str
    retired: bool

    @property
    def is_ssh(self) -> bool: ...


FILES = Path(__file__).parents[1] / "files"
# The shared helpers, one file per concern. A script's text is preceded by core.sh and by the
# files whose functions (or variables) it uses, found in its text, and transitively those the
# included files use: an edit to one helper file changes the input of exactly the commands
# whose scripts use it, so the next `up` runs their create again as an update in place (never
# a replace: the helpers are no trigger). Creates converge and are safe to repeat, and no
# command keeps running helpers older than the repository's. Each part has a header line; the
# script's header names the bare file name, not its folder, so moving a script changes no
# input (tests/upgrade/ proves both).
LIB = FILES / "lib"
CORE = "core.sh"
DEFAULT_LXC_PATH = "/var/lib/lxc"
INTERPRETER = ["/bin/bash", "-c"]
ENV_PREFIX = "GPUCLUSTER_"

_FUNCTION = re.compile(r"^([A-Za-z_][\w-]*)\(\)\s*\{", re.MULTILINE)
_VARIABLE = re.compile(r"^([A-Z][A-Z0-9_]*)=", re.MULTILINE)
_COMMENT = re.compile(r"^\s*#.*$", re.MULTILINE)


def _uses(names: set[str], variables: set[str]) -> re.Pattern:
    """A pattern matching a call of one of the functions or a reference to one of the variables."""
    alternatives = []
    if names:
        alternatives.append(r"(?<![\w$-])(?:" + "|".join(map(re.escape, sorted(names))) + r")(?![\w-])")
    if variables:
        alternatives.append(r"\$\{?(?:" + "|".join(map(re.escape, sorted(variables))) + r")\b")
    return re.compile("|".join(alternatives) or r"(?!)")


def library() -> dict[str, tuple[str, re.Pattern]]:
    """Every helper file by name: its text and the pattern of what it defines."""
    found = {}
    for path in sorted(LIB.glob("*.sh")):
        text = path.read_text()
        found[path.name] = (text, _defines(text))
    return found


@functools.cache
def _defines(text: str) -> re.Pattern:
    return _uses(set(_FUNCTION.findall(text)), set(_VARIABLE.findall(text)))


def helper_files(text: str) -> list[str]:
    """The helper files a script's text needs: core.sh, then every file defining a function
    or variable that the text (or an included file) uses, in name order."""
    return list(_helper_files(text, tuple((name, helper) for name, (helper, _) in library().items())))


# A program run asks this for every command (a node's scripts, 64 nodes: 281 times); the
# answer depends only on the texts, so it is worked out once per script and library. A key
# holds the library's text (about 100 KB): a few dozen scripts a run, 128 keys at most.
@functools.lru_cache(maxsize=128)
def _helper_files(text: str, files: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    defines = {name: _defines(helper) for name, helper in files}
    helper_text = dict(files)
    needed, pending = {CORE}, [text, helper_text[CORE]]
    while pending:
        code = _COMMENT.sub("", pending.pop())
        for name, pattern in defines.items():
            if name not in needed and pattern.search(code):
                needed.add(name)
                pending.append(helper_text[name])
    return (CORE, *sorted(needed - {CORE}))


def helpers(names: list[str] | None = None) -> str:
    """The text of these helper files (default: all of them), each under its header line."""
    names = [CORE, *sorted(set(library()) - {CORE})] if names is None else names
    return "".join(f"# ---- lib/{name} ----\n{(LIB / name).read_text()}\n" for name in names)


def script_parts(path: Path, over_ssh: bool = False) -> list[script_store.Part]:
    """The files the script at `path` is made of, in order: over SSH the prelude, then the
    shared helpers it uses, then the script; their concatenation is `script(path)`."""
    if not isinstance(path, Path):
        raise TypeError(f"script wants the path of a file (e.g. FILES / 'x.sh'), got {path!r}")
    body = path.read_text()
    prelude = [Part("ssh_prelude.sh", f"{(FILES / 'ssh_prelude.sh').read_text()}\n")] if over_ssh else []
    libs = [Part(f"lib/{name}", f"# ---- lib/{name} ----\n{(LIB / name).read_text()}\n") for name in helper_files(body)]
    return [*prelude, *libs, Part(path.name, f"# ---- {path.name} ----\n{body}")]


def script(path: Path) -> str:
    """The text of the script at `path` preceded by the shared helpers it uses."""
    return "".join(part.text for part in script_parts(path))


def remote_script(path: Path) -> str:
    """The script for an SSH host: the prelude (un-prefix the parameters), helpers and script,
    run by bash whatever the login shell is (the text is quoted, not pasted into: it is the
    same readable text with its single quotes escaped)."""
    text = f"{(FILES / 'ssh_prelude.sh').read_text()}\n{script(path)}"
    return f"exec /bin/bash -c {shlex.quote(text)}"


def env_list(values) -> str:
    """Lists travel as one value per line (config types forbid newlines inside values)."""
    return "\n".join(str(value) for value in values)


# Every input a Command of this project sets: a retired host's commands keep their old values.
COMMAND_INPUTS = ["connection", "create", "delete", "update", "environment", "interpreter", "triggers", "stdin"]


@dataclass
class Transport:
    """How one host's commands reach it. `ready`: what every command of the host waits for
    (an SSH host's sshd drop-in and wait-for-SSH commands). `deleted_with`: the resource that
    is the host itself where the program creates it (an instance): deleting it deletes them."""

    host: TransportHost
    connection: remote.ConnectionArgs | None = None
    ready: list[pulumi.Resource] = field(default_factory=list)
    deleted_with: pulumi.Resource | None = None
    store: script_store.ScriptStore | None = None
    """The host's script store, where its commands' scripts run from (None: inline text)."""
    checks: list[pulumi.Resource] = field(default_factory=list)
    """A local host's checks (stand-in GPUs, preflight): they run before the store is made, so a
    refused config leaves the host as it was."""
    store_options: pulumi.ResourceOptions | None = None
    """How the local store's resource is made, once the first command after the checks needs it."""
    store_name: str = ""

    @property
    def is_ssh(self) -> bool:
        return self.connection is not None

    def lifecycle(self) -> pulumi.ResourceOptions:
        """Options every command of the host carries.

        A remote.Command's delete dials the host before any script runs, so a delete against a
        host that is gone fails whatever the script says. A retired host's commands therefore
        stay in the program with their old inputs (ignore_changes: nothing runs, nothing dials)
        and retain_on_delete, which the engine reads from the state when the host is later
        removed: then they leave the state without running.
        """
        if self.host.retired:
            return pulumi.ResourceOptions(retain_on_delete=True, ignore_changes=COMMAND_INPUTS)
        return pulumi.ResourceOptions(deleted_with=self.deleted_with)

    def env(self, environment: dict) -> dict:
        """Parameters as the host receives them: plus the host's LXC path where it is not
        LXC's default, and prefixed over SSH (AcceptEnv GPUCLUSTER_*)."""
        return self.prefixed(self.with_lxc_path(environment))

    def with_lxc_path(self, environment: dict) -> dict:
        if self.host.lxc_dir != DEFAULT_LXC_PATH:
            environment = {**environment, "LXC_PATH": self.host.lxc_dir}
        return environment

    def prefixed(self, environment: dict) -> dict:
        if not self.is_ssh:
            return environment
        return {f"{ENV_PREFIX}{key}": value for key, value in environment.items()}

    def command_texts(
        self, create: Path, delete: Path | None, environment: dict, check: bool = False
    ) -> tuple[str, str | None, dict]:
        """`create` and `delete` as the command's inputs, and its environment: stubs running
        from the host's script store (long parameters in it too), else the whole texts."""
        environment = self.with_lxc_path(environment)
        # A command made once the store's set was shipped (in an apply) carries its text.
        store = self.store if self.store is not None and self.store.open else None
        if check and not self.is_ssh:
            # A local check runs before the store is made: without a delete (the preflight),
            # from the files the program wrote beside itself; with one (the test-only stand-in
            # GPUs), with its whole text.
            if store is not None and delete is None:
                text, kept = store.command_text(script_parts(create), environment, folder=script_store.files_dir())
                return text, None, kept
            store = None
        if store is None:
            to_text = remote_script if self.is_ssh else script
            return to_text(create), delete and to_text(delete), self.prefixed(environment)
        prefix = ENV_PREFIX if self.is_ssh else ""
        create_text, kept = store.command_text(script_parts(create, self.is_ssh), environment, prefix)
        delete_text = delete and store.command_text(script_parts(delete, self.is_ssh), environment, prefix)[0]
        return create_text, delete_text, self.prefixed(kept)


def _endpoint(
    endpoint, private_key: pulumi.Input[str], dial_error_limit: int, machine: "Machine | None" = None
) -> dict:
    """Connection arguments of an SSH endpoint (a host, or its jump host: a proxy connection has
    no proxy of its own); a machine the program makes gives its address and host key (outputs)
    in place of the config's."""
    return dict(
        host=machine.address if machine else endpoint.address,
        port=endpoint.port,
        user=endpoint.user,
        private_key=private_key,
        host_key=machine.host_key if machine else endpoint.host_key,
        dial_error_limit=dial_error_limit,
    )


# How long `<name>-ssh-ready` waits for sshd: the provider waits up to 5 s between dials and
# each dial up to SSH_READY_DIAL_TIMEOUT_S, so 90 dials are 8 to 15 minutes, enough for an
# instance to boot; then `up` fails with the last dial's error (e.g. a host key mismatch).
SSH_READY_DIALS = 90
SSH_READY_DIAL_TIMEOUT_S = 5


@dataclass(frozen=True)
class Machine:
    """A host the program creates (an EC2 instance): where to reach it, the host key to pin,
    and the resource whose deletion deletes everything on it."""

    address: pulumi.Input[str]
    host_key: pulumi.Input[str]
    resource: pulumi.Resource


def connect(
    name: str,
    cluster: str,
    host: TransportHost,
    opts: pulumi.ResourceOptions,
    private_key: pulumi.Input[str] | None = None,
    deleted_with: pulumi.Resource | None = None,
    machine: Machine | None = None,
) -> Transport:
    """The transport of a host; for an SSH host also its bootstrap commands.

    `<name>-ssh-ready` polls until sshd answers (the host may still be booting), at most
    SSH_READY_DIALS times: pulumi-command retries every dial error alike, a host key that is
    not the pinned one or a refused login included, so an unlimited poll would wait forever
    on those; `<name>-sshd-accept-env` installs /etc/ssh/sshd_config.d/gpucluster-<cluster>.conf
    (`AcceptEnv GPUCLUSTER_*`), checks it with `sshd -t` and reloads sshd (a reload keeps
    open sessions; never a restart), and removes it on destroy. Neither has parameters in its
    environment, so both work before sshd accepts any: the cluster's name goes by stdin.
    `private_key` is the secret key (default: the stack secret that the host's
    `private_key_secret` names); `deleted_with` the resource that is the host, where the
    program creates it; `machine` such a host (its commands are deleted with it).
    """
    if machine is not None:
        deleted_with = machine.resource
    repair = script_store.repair_command(pulumi.get_stack(), f"{name}-scripts")
    store = script_store.ScriptStore(f"{host.state_dir}/{cluster}/scripts", repair)
    if not host.is_ssh:
        transport = Transport(host, deleted_with=deleted_with, store=store)
        transport.store_options = pulumi.ResourceOptions.merge(opts, transport.lifecycle())
        transport.store_name = f"{name}-scripts"
        return transport
    ssh = host.connection
    if private_key is None:
        private_key = pulumi.Config().require_secret(ssh.private_key_secret)
    proxy = (
        remote.ProxyConnectionArgs(**_endpoint(ssh.bastion, private_key, ssh.dial_error_limit)) if ssh.bastion else None
    )
    connection = remote.ConnectionArgs(**_endpoint(ssh, private_key, ssh.dial_error_limit, machine), proxy=proxy)
    transport = Transport(host, connection, deleted_with=deleted_with)
    opts = pulumi.ResourceOptions.merge(opts, transport.lifecycle())
    poll = remote.ConnectionArgs(
        **_endpoint(ssh, private_key, SSH_READY_DIALS, machine), proxy=proxy, per_dial_timeout=SSH_READY_DIAL_TIMEOUT_S
    )
    wait = remote.Command(f"{name}-ssh-ready", connection=poll, create="true", opts=opts)
    cluster_dir = str(Path(store.path).parent)
    # The store: its folder (removed at destroy, after every command of the host), then the
    # files, by the provider's SFTP copy (an asset's state is its path and hash, not its text);
    # neither needs a parameter, so both come before the sshd drop-in that accepts them.
    folder = remote.Command(
        f"{name}-scripts-dir",
        connection=connection,
        create=f"mkdir -p {shlex.quote(store.path)}",
        triggers=[store.path],
        delete=f"rm -rf {shlex.quote(store.path)}; rmdir {shlex.quote(cluster_dir)} 2>/dev/null"
        f" && rmdir {shlex.quote(str(Path(cluster_dir).parent))} 2>/dev/null || true",
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[wait])),
    )
    shipped = remote.CopyToRemote(
        f"{name}-scripts",
        connection=connection,
        source=store.shipped_set().apply(lambda name: pulumi.FileArchive(script_store.set_folder(name))),
        remote_path=cluster_dir,
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[folder])),
    )
    transport.store = store
    accept_env = remote.Command(
        f"{name}-sshd-accept-env",
        connection=connection,
        create=store.command_text(script_parts(FILES / "sshd_accept_env_create.sh", over_ssh=True), {})[0],
        delete=store.command_text(script_parts(FILES / "sshd_accept_env_delete.sh", over_ssh=True), {})[0],
        stdin=cluster,
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[shipped])),
    )
    transport.ready = [wait, folder, shipped, accept_env]
    return transport


def _local_store(transport: Transport) -> None:
    """A local host's store, made once, when the first command after the host's checks needs it:
    its resource waits for the checks, every later command waits for it. Its folder is a trigger:
    another folder (a new state_dir) is a new store, and the old one goes. A replace deletes
    first: the delete and the create name the same folder, and a create-first replace would
    remove the store it just shipped at the end of the update (`repair_command`)."""
    if transport.ready or transport.store is None or not transport.store.open:
        return
    store = transport.store
    transport.ready = [
        local.Command(
            transport.store_name,
            create=STORE_CREATE,
            delete=STORE_DELETE,
            environment={"SHIP_DIR": script_store.ship_dir(), "SET": store.shipped_set(), "STORE": store.path},
            interpreter=INTERPRETER,
            triggers=[store.path],
            opts=pulumi.ResourceOptions.merge(
                transport.store_options,
                pulumi.ResourceOptions(depends_on=list(transport.checks), delete_before_replace=True),
            ),
        )
    ]


# The local store's shipping: every file of the set checked against its name (the SHA-256 of
# its content), and each one missing or changed copied in again by rename (it appears whole), so
# a damaged store is repaired by the next create; files of other sets stay (a delete may still
# need them). No `-n` (its exit status differs between coreutils releases). Removed at destroy,
# after every command of the host.
STORE_CREATE = """set -euo pipefail
source_dir=$SHIP_DIR/sets/$SET/scripts
[ -d "$source_dir" ] || { echo "script store: the program's set $source_dir is missing" >&2; exit 1; }
mkdir -p "$STORE"
rm -rf "$STORE"/.incoming.*  # an interrupted create's (an update of a stack is one at a time)
incoming=$(mktemp -d "$STORE/.incoming.XXXXXX")
trap 'rm -rf "$incoming"' EXIT
names=$(cd "$source_dir" && ls -A)
# The files of the set whose content in the store matches their name (a missing one: none).
declare -A good=()
while read -r sum name; do
  [ "$sum" != "$name" ] || good[$name]=1
done < <(cd "$STORE" && printf '%s\\n' $names | xargs -r sha256sum -- 2>/dev/null || true)
for name in $names; do
  [ -z "${good[$name]:-}" ] || continue
  cp -- "$source_dir/$name" "$incoming/$name"
  [ "$(sha256sum < "$incoming/$name" | cut -d' ' -f1)" = "$name" ] ||
    { echo "script store: the program's copy $source_dir/$name is not the file its name says" >&2; exit 1; }
  mv -f -- "$incoming/$name" "$STORE/$name"
done
"""
STORE_DELETE = """rm -rf "$STORE"
# The store goes last of the host's commands: then the cluster's (now empty) directory and the
# state directory, as the packages' delete did when it was last.
rmdir "$(dirname "$STORE")" 2>/dev/null && rmdir "$(dirname "$(dirname "$STORE")")" 2>/dev/null || true
"""


def host_trigger(host: TransportHost) -> str:
    """The trigger naming the SSH host a placed command runs on."""
    return f"host:{host.name}"


def host_command(
    name: str,
    *,
    create: Path,
    delete: Path | None = None,
    environment: dict[str, pulumi.Input[str]],
    opts: pulumi.ResourceOptions,
    triggers: pulumi.Input[list] | None = None,
    transport: Transport | None = None,
    stdin: pulumi.Input[str] | None = None,
    placed: bool = False,
    check: bool = False,
) -> local.Command | remote.Command:
    """A Command on a host running the script at `create` (and `delete`).

    Components pass paths in their own files/ folder: `create=FILES / "x_create.sh"`.
    A changed trigger replaces the resource; any other changed input runs the create script
    again (pulumi-command's behaviour without an `update`), so every create converges the
    host to its inputs and is safe to repeat. Without a transport, or with a local one, the
    command is a `local.Command` (a one-host stack's graph is exactly that).

    `placed`: what the config puts on one host or another (a node's container and daemons,
    slurmctld, the web app, a forward), whose name does not carry the host. Over SSH the
    host's name is then one of its triggers: the connection is no trigger of pulumi-command,
    so without it a move to another SSH host would run the create there and leave the old one
    running; with it a move is a replacement, whose delete runs on the old host.
    """
    if transport is not None:
        opts = pulumi.ResourceOptions.merge(opts, transport.lifecycle())
        if placed and transport.is_ssh:
            host = host_trigger(transport.host)
            triggers = pulumi.Output.from_input(triggers or []).apply(lambda given: [*given, host])
    if transport is None:
        return local.Command(
            name,
            create=script(create),
            delete=script(delete) if delete else None,
            environment=environment,
            interpreter=INTERPRETER,
            triggers=triggers,
            stdin=stdin,
            opts=opts,
        )
    create_text, delete_text, environment = transport.command_texts(create, delete, environment, check)
    if not (check or transport.is_ssh):
        _local_store(transport)
    opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=transport.ready))
    if not transport.is_ssh:
        made = local.Command(
            name,
            create=create_text,
            delete=delete_text,
            environment=environment,
            interpreter=INTERPRETER,
            triggers=triggers,
            stdin=stdin,
            opts=opts,
        )
        if check:
            transport.checks.append(made)
        return made
    return remote.Command(
        name,
        connection=transport.connection,
        create=create_text,
        delete=delete_text,
        environment=environment,
        triggers=triggers,
        stdin=stdin,
        opts=opts,
    )


def generated_secret(name: str, *, length: int, opts: pulumi.ResourceOptions) -> pulumi.Output[str]:
    """`length` random bytes, base64, made once on the machine running `pulumi up` and kept only
    as an encrypted secret in the state (the command's stdout, marked secret and never logged).

    A local command rather than pulumi-random: its provider is bridged from Terraform and
    cannot be built where only Go modules can be fetched, while pulumi-command runs wherever
    the program does. The bytes never appear in an argument list or a log line.
    """
    made = local.Command(
        name,
        create=f"head -c {int(length)} /dev/urandom | base64 -w0",
        interpreter=INTERPRETER,
        logging=local.Logging.NONE,
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(additional_secret_outputs=["stdout"])),
    )
    return pulumi.Output.secret(made.stdout)
