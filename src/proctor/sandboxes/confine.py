"""Confinement of a hosted sandbox: `python -m proctor.sandboxes.confine POLICY_JSON`.

A hosted run executes code that anyone holding a key pushed. Every backend (the local one,
and the guard on a Ray node) starts its command through this module, as root, which:

1. refuses, in one sentence, on a host that cannot confine (not root, no bubblewrap, no
   cgroup controllers); a sandbox never runs unconfined (exit 126);
2. takes a uid of its own from the configured range (`PROCTOR_HOSTED_UIDS`: never 0,
   never the server's), held by a file lock for the sandbox's life, and hands it the work
   dir (0700);
3. builds a published environment's venv outside the sandbox (`proctor.sandboxes.packages`),
   once per content hash, for the sandbox to use read-only; likewise verifiers' harness
   environment, from the harness index (`proctor.sandboxes.harness`);
4. makes a cgroup (v2 where it has the controllers, else v1) capping memory (tmpfs and
   `/dev/shm` included, no swap), processes and CPU;
5. starts a relay (`proctor.sandboxes.relay`) with one socket per allowed endpoint;
6. runs bubblewrap with a fresh root: the runtime read-only (system libraries, the
   interpreter, proctor's own installed package, wherever it lives, `/tmp` included), the
   venv and the harness environment read-only, the work dir, a private `/proc`, capped
   `/tmp` and `/dev/shm`; its own pid, network, IPC, UTS and cgroup namespaces; no
   capabilities; `no_new_privs`. Inside, the relay drops to the sandbox's uid before the
   command runs;
7. waits, and when the memory cap was hit, ends the whole sandbox and says so (exit 137);
   when stopped (SIGTERM), ends it; then removes the cgroup.

Its environment is the sandbox's (the launcher's spec only), handed on as it is.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from pydantic import BaseModel, Field

from proctor.sandboxes.relay import Endpoint, OutsideRelay, endpoints, hosts_file
from proctor.sandboxes.sandbox import place_files, shell_exit_code

CANNOT_CONFINE = 126
"""Exit code of a sandbox refused because the host cannot confine it."""
MEMORY_LIMIT = 137
"""Exit code of a sandbox ended at its memory cap."""
MEMORY_REASON = "the sandbox reached its memory limit of {mib} MiB and was ended"
"""The last line of such a sandbox's log (after `proctor: `)."""

DEFAULT_UIDS = "2000000-2099999"
PACKAGES_INSIDE = "/opt/proctor-packages"
"""Where it sees a published environment's packages (`PROCTOR_SANDBOX_PACKAGES`)."""
HARNESS_INSIDE = "/opt/proctor-harness"
"""Where it sees verifiers' harness environment (`proctor.sandboxes.harness`)."""
HARNESS_VARIABLE = "PROCTOR_SANDBOX_HARNESS"
"""The variable that tells the verifiers driver inside where that environment is."""
_RELAY_DIR = "/run/proctor-relay"
_ENV_FILE = "/run/proctor-env.json"
# Directories of the host's /etc a program needs (libraries, certificates, time zones).
_ETC = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "pki",
    "localtime",
    "timezone",
    "alternatives",
    "mime.types",
    "protocols",
    "services",
    "nsswitch.conf",
    "host.conf",
    "gai.conf",
)
_SYSTEM = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/opt/conda")


class Limits(BaseModel):
    """What one sandbox may use (`PROCTOR_HOSTED_MEMORY_MB`, `_PIDS`, `_CPUS`, `_TMPFS_MB`)."""

    memory_mb: int = Field(default=2048, ge=64)
    """Memory of all its processes together, `/tmp` and `/dev/shm` included."""
    pids: int = Field(default=256, ge=16)
    """Processes and threads at once."""
    cpus: float = Field(default=2.0, gt=0)
    """CPU time, in cores."""
    tmpfs_mb: int = Field(default=256, ge=1)
    """Size of each of `/tmp` and `/dev/shm` (also within `memory_mb`)."""


class Policy(BaseModel):
    """One sandbox's confinement, as the launcher (or the Ray guard) passes it."""

    command: str
    """The sandbox's POSIX shell command line."""
    name: str
    """A name for its cgroup (the evaluation id)."""
    workdir: str | None = None
    """Its working directory (made when absent); None: a fresh one under the temp dir."""
    uids: str = DEFAULT_UIDS
    """The uid range sandboxes take their uid from (`LOW-HIGH`)."""
    limits: Limits = Field(default_factory=Limits)
    """Its memory, process and CPU caps."""
    endpoints: list[str] = Field(default_factory=list)
    """The URLs it may reach (the platform, the model, the judge)."""
    package: dict[str, Any] | None = None
    """A published environment to install first (`proctor.sandboxes.packages.prepare`'s
    arguments: wheel, sha256, venvs, cache, index_url, ref)."""
    harness: dict[str, str] | None = None
    """verifiers' harness environment to build first (`proctor.sandboxes.harness.prepare`'s
    arguments: index, envs)."""
    readonly: list[str] = Field(default_factory=list)
    """More paths it sees read-only."""
    hidden: list[str] = Field(default_factory=list)
    """Paths never to show, even when inside the runtime (the server's data dir)."""
    env_file: str | None = None
    """A JSON file holding the sandbox's environment, read and removed at once: the
    confinement itself runs as root and never takes the sandbox's variables as its own."""
    files: dict[str, str] = Field(default_factory=dict)
    """Files written into its working directory, its own, before the command starts
    (`SandboxSpec.files`)."""


# -- can this host confine? -----------------------------------------------------------------


def host_problem() -> str | None:
    """Why this host cannot confine a sandbox, in words; None when it can."""
    if not sys.platform.startswith("linux"):
        return "sandboxes are confined with Linux namespaces and cgroups"
    if os.geteuid() != 0:
        return (
            "the launcher does not run as root, so it cannot give each sandbox a uid of its "
            "own; run it as root"
        )
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed; install the `bubblewrap` package"
    if Cgroup.flavour() is None:
        return (
            "no writable cgroup with the memory and pids controllers was found; mount "
            "cgroup v2 (or v1 memory, pids and cpu) writable for root"
        )
    return None


def refusal(problem: str) -> str:
    """The one sentence a refused sandbox says."""
    return f"this host cannot confine a hosted sandbox: {problem}; it never runs unconfined"


# -- uids -------------------------------------------------------------------------------------


def uid_range(text: str) -> range:
    """`LOW-HIGH` (inclusive) as a range of uids, never including 0 or our own uid.

    Raises:
        ValueError: a malformed range, or one that holds 0.
    """
    low, sep, high = text.partition("-")
    try:
        first, last = int(low), int(high if sep else low)
    except ValueError:
        raise ValueError(f"PROCTOR_HOSTED_UIDS must be LOW-HIGH, e.g. {DEFAULT_UIDS}") from None
    if first <= 0 or last < first or last >= 2**32 - 1:
        raise ValueError(f"PROCTOR_HOSTED_UIDS must be LOW-HIGH above 0, e.g. {DEFAULT_UIDS}")
    return range(first, last + 1)


def _lock_dir() -> Path:
    path = Path(tempfile.gettempdir()) / "proctor-sandbox-uids"
    path.mkdir(mode=0o700, exist_ok=True)
    if path.stat().st_uid != os.geteuid():
        raise OSError(f"{path} is not ours")
    path.chmod(0o700)
    return path


def take_uid(uids: range, name: str) -> tuple[int, Any]:
    """A uid of `uids` no other live sandbox here holds, and the open lock that holds it."""
    directory = _lock_dir()
    start = abs(hash(name)) % len(uids)
    server = {os.getuid(), os.geteuid(), 0}
    for offset in range(len(uids)):
        uid = uids[(start + offset) % len(uids)]
        if uid in server:
            continue
        lock = (directory / str(uid)).open("w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            continue
        return uid, lock
    raise OSError("every uid of PROCTOR_HOSTED_UIDS is taken by a running sandbox")


def hand_over(workdir: Path, uid: int, uids: range) -> None:
    """Make `workdir` the sandbox's: its own (0700), with what an earlier sandbox of the
    same evaluation left there (files of range uids only) handed to the new uid."""
    workdir.mkdir(parents=True, exist_ok=True)
    for root, dirs, files in os.walk(workdir):
        for name in dirs + files:
            path = os.path.join(root, name)
            with contextlib.suppress(OSError):
                owner = os.lstat(path).st_uid
                if owner in uids:  # (never a root-owned file: it may be a hard link)
                    os.lchown(path, uid, uid)
    os.chown(workdir, uid, uid)
    workdir.chmod(0o700)


# -- cgroups ----------------------------------------------------------------------------------


@dataclass
class Cgroup:
    """One sandbox's cgroup: a directory per hierarchy (one on v2, one per controller on v1)."""

    version: int
    dirs: dict[str, Path] = field(default_factory=dict)
    memory_bytes: int = 0

    @staticmethod
    def flavour() -> tuple[int, dict[str, Path]] | None:
        """(2, {"": parent}) or (1, {controller: parent}) under which sandboxes' cgroups go."""
        root = Path("/sys/fs/cgroup")
        own = _own_cgroups()
        if (root / "cgroup.controllers").is_file():
            parent = _v2_parent(root, own.get("", "/"))
            if parent is not None:
                return 2, {"": parent}
        parents: dict[str, Path] = {}
        for controller in ("memory", "pids", "cpu"):
            mount = root / controller
            if not (mount / "cgroup.procs").is_file():
                if controller == "cpu":
                    continue  # CPU is capped where it can be
                return None
            path = own.get(controller, "/").lstrip("/")
            parent = mount / path if (mount / path / "cgroup.procs").is_file() else mount
            if not os.access(parent, os.W_OK):
                return None
            parents[controller] = parent
        return 1, parents

    @classmethod
    def create(cls, name: str, limits: Limits) -> Cgroup:
        found = cls.flavour()
        if found is None:
            raise OSError("no cgroup to confine the sandbox in")
        version, parents = found
        for parent in parents.values():
            _sweep(parent)
        leaf = f"proctor-{name}-{os.getpid()}"
        group = cls(version, memory_bytes=limits.memory_mb << 20)
        for controller, parent in parents.items():
            path = parent / leaf
            path.mkdir(exist_ok=True)
            group.dirs[controller] = path
        if version == 2:
            path = group.dirs[""]
            _write(path / "memory.max", str(group.memory_bytes))
            _write(path / "memory.swap.max", "0", optional=True)
            _write(path / "memory.oom.group", "1", optional=True)
            _write(path / "pids.max", str(limits.pids))
            _write(path / "cpu.max", f"{int(limits.cpus * 100_000)} 100000", optional=True)
        else:
            memory = group.dirs["memory"]
            _write(memory / "memory.limit_in_bytes", str(group.memory_bytes))
            _write(memory / "memory.memsw.limit_in_bytes", str(group.memory_bytes), optional=True)
            _write(memory / "memory.swappiness", "0", optional=True)
            _write(group.dirs["pids"] / "pids.max", str(limits.pids))
            if "cpu" in group.dirs:
                cpu = group.dirs["cpu"]
                _write(cpu / "cpu.cfs_period_us", "100000", optional=True)
                _write(cpu / "cpu.cfs_quota_us", str(int(limits.cpus * 100_000)), optional=True)
        return group

    def join(self) -> None:
        """Move the calling process in (run in the child, before it execs bubblewrap)."""
        for path in self.dirs.values():
            with open(path / "cgroup.procs", "w") as f:
                f.write("0")

    def oom_kills(self) -> int:
        """How many processes the kernel killed at the memory cap so far."""
        path = (
            self.dirs[""] / "memory.events"
            if self.version == 2
            else self.dirs["memory"] / "memory.oom_control"
        )
        try:
            for line in path.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key in ("oom_kill", "oom_group_kill") and int(value) > 0:
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def pids(self) -> list[int]:
        path = self.dirs["" if self.version == 2 else "pids"] / "cgroup.procs"
        try:
            return [int(p) for p in path.read_text().split()]
        except (OSError, ValueError):
            return []

    def kill_all(self) -> None:
        """SIGKILL every process in it, until none is left (bounded)."""
        if self.version == 2:
            with contextlib.suppress(OSError):
                _write(self.dirs[""] / "cgroup.kill", "1")
        deadline = time.monotonic() + 10
        while (left := self.pids()) and time.monotonic() < deadline:
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)

    def remove(self) -> None:
        self.kill_all()
        for path in self.dirs.values():
            deadline = time.monotonic() + 5
            while True:
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() >= deadline:
                        break
                    time.sleep(0.05)


def _sweep(parent: Path) -> None:
    """Remove empty sandbox cgroups whose confinement died without removing them."""
    for path in parent.glob("proctor-*-*"):
        pid = path.name.rpartition("-")[2]
        if not pid.isdigit() or Path(f"/proc/{pid}").exists():
            continue
        with contextlib.suppress(OSError):
            if not (path / "cgroup.procs").read_text().strip():
                path.rmdir()


def _write(path: Path, value: str, *, optional: bool = False) -> None:
    try:
        with open(path, "w") as f:
            f.write(value)
    except OSError:
        if not optional:
            raise


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup per v1 controller ("" for v2)."""
    out: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                out[controller] = path
    return out


def _v2_parent(root: Path, own: str) -> Path | None:
    """A v2 cgroup where sandboxes' cgroups can get memory and pids: a `proctor-sandboxes`
    child of ours with the controllers delegated (or `PROCTOR_HOSTED_CGROUP`, prepared by
    the operator), or None."""
    configured = os.environ.get("PROCTOR_HOSTED_CGROUP")
    base = Path(configured) if configured else root / own.lstrip("/")
    try:
        available = (base / "cgroup.controllers").read_text().split()
    except OSError:
        return None
    if not {"memory", "pids"} <= set(available):
        return None
    wanted = [c for c in ("memory", "pids", "cpu") if c in available]
    parent = base / "proctor-sandboxes"
    try:
        # v2's "no internal processes" rule: controllers go to children of a cgroup only
        # while no process sits in it. Ours holds the server; its child holds none.
        enabled = (base / "cgroup.subtree_control").read_text().split()
        if not set(wanted) <= set(enabled):
            _write(base / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))
        parent.mkdir(exist_ok=True)
        enabled = (parent / "cgroup.subtree_control").read_text().split()
        if not set(wanted) <= set(enabled):
            _write(parent / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))
    except OSError:
        return None
    return parent


# -- the sandbox's root -------------------------------------------------------------------


def runtime_paths() -> list[Path]:
    """What a sandbox needs of the host to run proctor: the interpreter, its standard
    library, the server's installed packages and proctor itself, read-only."""
    import proctor

    paths = {
        Path(sys.prefix),
        Path(sys.base_prefix),
        Path(sys.exec_prefix),
        Path(sys.base_exec_prefix),
        Path(os.path.realpath(sys.executable)).parent.parent,
        Path(proctor.__file__).resolve().parent.parent,
    }
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        with contextlib.suppress(KeyError):
            paths.add(Path(sysconfig.get_paths()[key]))
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if entry and os.path.isabs(entry):
            paths.add(Path(entry))
    return _outermost(p for p in paths if p.exists() and p != Path("/"))


def _outermost(paths: Any) -> list[Path]:
    """Each path once, leaving out those inside another."""
    out: list[Path] = []
    for path in sorted({Path(os.path.realpath(p)) for p in paths}, key=lambda p: len(p.parts)):
        if not any(path == kept or kept in path.parents for kept in out):
            out.append(path)
    return out


class Root:
    """The bubblewrap arguments that build the sandbox's root, and the fds they read."""

    def __init__(self) -> None:
        self.args: list[str] = []
        self.fds: list[int] = []
        self._made: set[Path] = {Path("/")}
        self._bound: list[Path] = []

    def _parents(self, path: Path) -> None:
        # bubblewrap would copy the host's mode of a parent (0700 /root). 0711: the
        # sandbox passes through to what is bound below, and lists nothing of the rest.
        for parent in reversed(path.parents):
            if parent in self._made or any(b == parent or b in parent.parents for b in self._bound):
                continue
            self.args += ["--perms", "0711", "--dir", str(parent)]
            self._made.add(parent)

    def bind(self, source: Path, dest: Path | None = None, *, write: bool = False) -> None:
        dest = dest or source
        self._parents(dest)
        self.args += ["--bind" if write else "--ro-bind", str(source), str(dest)]
        self._bound.append(dest)

    def symlink(self, target: str, dest: str) -> None:
        self.args += ["--symlink", target, dest]
        self._made.add(Path(dest))

    def data(self, content: str, dest: str, *, perms: str = "0444") -> None:
        fd = os.memfd_create(Path(dest).name, 0)
        os.write(fd, content.encode())
        os.lseek(fd, 0, os.SEEK_SET)
        self.fds.append(fd)
        self._parents(Path(dest))
        self.args += ["--perms", perms, "--ro-bind-data", str(fd), dest]

    def close(self) -> None:
        fds, self.fds = self.fds, []
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def _passwd(uid: int) -> tuple[str, str]:
    passwd = (
        "root:x:0:0:root:/nonexistent:/usr/sbin/nologin\n"
        f"sandbox:x:{uid}:{uid}:proctor sandbox:/home/sandbox:/bin/sh\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    )
    group = f"root:x:0:\nsandbox:x:{uid}:\nnogroup:x:65534:\n"
    return passwd, group


def build_root(
    policy: Policy,
    workdir: Path,
    uid: int,
    relay_dir: Path,
    points: list[Endpoint],
    environment: dict[str, str],
    package_dir: Path | None = None,
    harness_dir: Path | None = None,
) -> Root:
    root = Root()
    for system in _SYSTEM:
        path = Path(system)
        if path.is_symlink():
            root.symlink(os.readlink(path), system)
        elif path.is_dir():
            root.bind(path)
    for name in _ETC:
        path = Path("/etc") / name
        if path.exists():
            root.bind(Path(os.path.realpath(path)), path)
    passwd, group = _passwd(uid)
    root.data(passwd, "/etc/passwd")
    root.data(group, "/etc/group")
    root.data(hosts_file(points), "/etc/hosts")
    root.data("", "/etc/resolv.conf")
    root.data("sandbox\n", "/etc/hostname")
    env = sandbox_environment(environment, workdir)
    if harness_dir is not None:
        env[HARNESS_VARIABLE] = f"{HARNESS_INSIDE}/{harness_dir.name}"
    root.data(json.dumps(env), _ENV_FILE, perms="0400")
    tmpfs = str(policy.limits.tmpfs_mb << 20)
    root.args += ["--proc", "/proc", "--dev", "/dev"]
    root.args += ["--size", tmpfs, "--perms", "1777", "--tmpfs", "/tmp"]
    root.args += ["--size", tmpfs, "--perms", "1777", "--tmpfs", "/dev/shm"]
    root._made.update({Path("/proc"), Path("/dev"), Path("/tmp"), Path("/dev/shm")})
    for path in runtime_paths():
        if not str(path).startswith(("/usr/", "/lib")):
            root.bind(path)
    for extra in policy.readonly:
        root.bind(Path(extra))
    if package_dir is not None:
        root.bind(package_dir, Path(PACKAGES_INSIDE) / package_dir.name)
    if harness_dir is not None:
        root.bind(harness_dir, Path(HARNESS_INSIDE) / harness_dir.name)
    for hidden in policy.hidden:
        path = Path(os.path.realpath(hidden))
        if any(b == path or b in path.parents for b in root._bound):
            root.args += ["--tmpfs", str(path)]
    root.bind(relay_dir, Path(_RELAY_DIR))
    # At its own path, so the paths a run prints (its results) are the host's too.
    root.bind(workdir, write=True)
    return root


# -- running ----------------------------------------------------------------------------------


_RELAY_MAIN = (
    "import sys; sys.path.append({root!r}); from proctor.sandboxes.relay import main; "
    "sys.exit(main(sys.argv[1:]))"
)


def _say(message: str) -> None:
    print(f"proctor: {message}", file=sys.stderr, flush=True)


def sandbox_environment(environ: dict[str, str], workdir: Path) -> dict[str, str]:
    """The command's environment: the spec's, with a home, temp dir and path that exist."""
    env = dict(environ)
    for name in ("PYTHONHOME", "PYTHONSTARTUP", "LD_PRELOAD", "LD_LIBRARY_PATH"):
        env.pop(name, None)
    env.update(
        HOME=str(workdir),
        PROCTOR_SANDBOX_PACKAGES=PACKAGES_INSIDE,
        TMPDIR="/tmp",
        USER="sandbox",
        LOGNAME="sandbox",
        PYTHONNOUSERSITE="1",
        PATH=env.get("PATH") or "/usr/local/bin:/usr/bin:/bin",
    )
    return env


def run(policy: Policy) -> int:
    """Confine and run the policy's command; its exit code (126 refused, 137 memory)."""
    problem = host_problem()
    if problem is not None:
        _say(refusal(problem))
        return CANNOT_CONFINE
    try:
        uids = uid_range(policy.uids)
        points = endpoints(policy.endpoints)
    except ValueError as e:
        _say(refusal(str(e)))
        return CANNOT_CONFINE
    environment: dict[str, str] = {}
    if policy.env_file:
        environment = json.loads(Path(policy.env_file).read_text())
        Path(policy.env_file).unlink(missing_ok=True)
    with contextlib.ExitStack() as cleanup:
        try:
            prepared = _prepare(policy, uids, points, environment, cleanup)
        except OSError as e:
            _say(refusal(f"{e.strerror or e} ({e.filename})" if e.filename else str(e)))
            return CANNOT_CONFINE
        if prepared is None:
            return 3  # packages.INSTALL_FAILED, said already
        return _run(policy, points, *prepared)


def _prepare(
    policy: Policy,
    uids: range,
    points: list[Endpoint],
    environment: dict[str, str],
    cleanup: contextlib.ExitStack,
) -> tuple[int, Cgroup, Root, Path] | None:
    """Everything outside the sandbox, undone by `cleanup`: its uid, work dir, packages,
    relay and cgroup, and its root; None when its package could not be installed."""
    uid, uid_lock = take_uid(uids, policy.name)
    cleanup.callback(uid_lock.close)
    if policy.workdir:
        workdir = Path(policy.workdir)
    else:
        scratch = Path(tempfile.mkdtemp(prefix="proctor-sandbox-"))
        cleanup.callback(shutil.rmtree, scratch, ignore_errors=True)
        workdir = scratch / "work"
    hand_over(workdir, uid, uids)
    place_files(workdir, policy.files, owner=uid)
    package_dir = None
    if policy.package:
        from proctor.sandboxes.packages import prepare

        package = policy.package
        package_dir = prepare(
            Path(package["wheel"]),
            package["sha256"],
            Path(package["venvs"]),
            cache=bool(package.get("cache", True)),
            index_url=package.get("index_url"),
            ref=str(package.get("ref", "the environment")),
        )
        if package_dir is None:
            return None
    harness_dir = None
    if policy.harness:
        from proctor.sandboxes.harness import prepare as prepare_harness

        harness_dir = prepare_harness(Path(policy.harness["index"]), Path(policy.harness["envs"]))
    relay_dir = Path(tempfile.mkdtemp(prefix="proctor-relay-"))
    cleanup.callback(shutil.rmtree, relay_dir, ignore_errors=True)
    os.chown(relay_dir, uid, uid)
    relay = OutsideRelay(relay_dir, points, uid=uid, gid=uid)
    cleanup.callback(relay.close)
    group = Cgroup.create(policy.name, policy.limits)
    cleanup.callback(group.remove)
    root = build_root(
        policy, workdir, uid, relay_dir, points, environment, package_dir, harness_dir
    )
    cleanup.callback(root.close)
    return uid, group, root, workdir


def _run(
    policy: Policy, points: list[Endpoint], uid: int, group: Cgroup, root: Root, workdir: Path
) -> int:
    """Run bubblewrap in `group` and wait; the exit code as `run` describes it."""
    stopping: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.append(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    routes = [f"--route={p.inside}:{p.port}={_RELAY_DIR}/{i}.sock" for i, p in enumerate(points)]
    argv = [
        "bwrap",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        "sandbox",
        *root.args,
        "--chdir",
        "/",
        "--cap-drop",
        "ALL",
        # Only for the relay's first steps (listen on port 443 inside, then drop for good):
        "--cap-add",
        "CAP_SETUID",
        "--cap-add",
        "CAP_SETGID",
        "--cap-add",
        "CAP_SETPCAP",
        "--cap-add",
        "CAP_NET_BIND_SERVICE",
        "--new-session",
        "--die-with-parent",
        "--",
        sys.executable,
        "-I",  # as root of its namespaces: no variable or directory of the sandbox's counts
        "-c",
        _RELAY_MAIN.format(root=str(Path(__file__).resolve().parents[2])),
        f"--env-file={_ENV_FILE}",
        f"--uid={uid}",
        f"--gid={uid}",
        f"--chdir={workdir}",
        *routes,
        "inside",
        "--",
        "/bin/sh",
        "-c",
        policy.command,
    ]
    code = 1
    oom = 0
    try:
        proc = subprocess.Popen(
            argv,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            stdin=subprocess.DEVNULL,
            pass_fds=tuple(root.fds),
            preexec_fn=group.join,
            cwd="/",
        )
        root.close()
        deadline: float | None = None
        while True:
            try:
                code = proc.wait(timeout=0.1)
                break
            except subprocess.TimeoutExpired:
                pass
            oom = group.oom_kills()
            if oom:
                group.kill_all()
                proc.kill()
            elif stopping and deadline is None:
                proc.send_signal(stopping[0])
                deadline = time.monotonic() + 3
            elif deadline is not None and time.monotonic() >= deadline:
                group.kill_all()
        oom = oom or group.oom_kills()
    finally:
        group.kill_all()
    if oom:
        _say(MEMORY_REASON.format(mib=policy.limits.memory_mb))
        return MEMORY_LIMIT
    if stopping:
        return 128 + stopping[0]
    return shell_exit_code(code)


def command_line(policy: Policy) -> str:
    """The shell command that runs `policy` confined (what a backend starts)."""
    return f"exec {shlex.quote(sys.executable)} -m proctor.sandboxes.confine " + shlex.quote(
        policy.model_dump_json()
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m proctor.sandboxes.confine POLICY_JSON", file=sys.stderr)
        return 2
    return run(Policy.model_validate(json.loads(args[0])))


if __name__ == "__main__":
    sys.exit(main())
