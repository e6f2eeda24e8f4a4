"""A private PostgreSQL cluster for fault tests: a throwaway ``initdb`` in a temp folder, on a
free port of 127.0.0.1, that a test may stop, restart or crash without touching the shared
server. Every wait here is bounded; nothing is downloaded (the binaries must be installed).

    with PrivateCluster() as cluster:       # initdb + start
        url = cluster.create_database("x")  # postgresql+psycopg://postgres@127.0.0.1:PORT/x
        cluster.restart()                   # same port, same data
        cluster.kill()                      # SIGKILL the postmaster: a crash

Run as root, the server runs as the OS user ``postgres`` (PostgreSQL refuses to run as root).
``initdb`` runs once per process, into a template that each cluster copies; clusters live in
``/dev/shm`` when it has room (else the temp folder). Folders left by a process that died are
removed by the next process that makes a cluster.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType

import psycopg
from psycopg import sql

SERVER_USER = "postgres"
START_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 30.0
INITDB_TIMEOUT_SECONDS = 120.0
LOG_TAIL_LINES = 40

SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "shared_buffers": "'16MB'",
    "max_connections": "50",
    "max_wal_senders": "0",
    "wal_level": "minimal",
    "autovacuum": "off",
    "logging_collector": "off",
}


# pg_ctl stop -m MODE sends these to the postmaster.
SHUTDOWN_SIGNALS = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}


class ClusterError(RuntimeError):
    """The private cluster could not be set up, started or stopped."""


def find_bindir() -> Path | None:
    """The folder of ``initdb`` and ``postgres``: ``pg_config --bindir``, else the
    newest ``/usr/lib/postgresql/*/bin``, else wherever ``initdb`` is on the PATH; ``None``
    when PostgreSQL's server binaries are not installed."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            )
            candidates.append(Path(out.stdout.strip()))
        except (subprocess.SubprocessError, OSError):
            pass
    versioned = glob.glob("/usr/lib/postgresql/*/bin")
    versioned.sort(key=lambda p: _version_key(Path(p).parent.name), reverse=True)
    candidates.extend(Path(p) for p in versioned)
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(Path(initdb).parent)
    for folder in candidates:
        if all((folder / name).is_file() for name in ("initdb", "postgres")):
            return folder
    return None


def _version_key(name: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in name.split("."))
    except ValueError:
        return (-1,)


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


CLUSTER_PREFIX = "memory_sql_pg_"
TEMPLATE_PREFIX = "memory_sql_pg_template_"
COPY_TIMEOUT_SECONDS = 60.0
SHM = Path("/dev/shm")
SHM_MIN_FREE_BYTES = 512 * 1024 * 1024


def _workspace() -> Path | None:
    """Where clusters live: ``/dev/shm`` (memory: copying a data folder there takes a fifth of
    the time) when it is there with room to spare, else the temp folder (``None``)."""
    try:
        stats = os.statvfs(SHM)
    except OSError:
        return None
    if not os.access(SHM, os.W_OK) or stats.f_bavail * stats.f_frsize < SHM_MIN_FREE_BYTES:
        return None
    return SHM


def _make_folder(prefix: str) -> Path:
    """A fresh folder named after this process, so that :func:`_sweep` can tell leftovers of
    processes that died without cleaning up."""
    _sweep()
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}_", dir=_workspace()))


def _sweep() -> None:
    """Remove the folders of processes that are gone (a server still running in one, orphaned,
    shuts itself down within a minute once its postmaster.pid is gone)."""
    global _swept
    if _swept:
        return
    _swept = True
    roots = {Path(tempfile.gettempdir())}
    if (workspace := _workspace()) is not None:
        roots.add(workspace)
    for root in roots:
        for folder in root.glob(f"{CLUSTER_PREFIX}*"):
            owner = folder.name.removeprefix(TEMPLATE_PREFIX).removeprefix(CLUSTER_PREFIX)
            pid = owner.split("_", 1)[0]
            if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
                shutil.rmtree(folder, ignore_errors=True)


_swept = False
_templates: dict[Path, Path] = {}
_templates_lock = threading.Lock()


def _template(bindir: Path, user: pwd.struct_passwd | None) -> Path:
    """A data folder ``initdb`` made once in this process (removed at exit), to copy."""
    with _templates_lock:
        if bindir in _templates:
            return _templates[bindir]
        base = _make_folder(TEMPLATE_PREFIX)
        atexit.register(shutil.rmtree, base, ignore_errors=True)
        if user is not None:
            os.chown(base, user.pw_uid, user.pw_gid)
        _initdb(bindir, user, base / "data")
        _templates[bindir] = base / "data"
        return base / "data"


def _initdb(bindir: Path, user: pwd.struct_passwd | None, data: Path) -> None:
    argv = [str(bindir / "initdb"), "-D", str(data), "-U", SERVER_USER, "--auth=trust"]
    argv += ["-E", "UTF8", "--no-locale", "--no-sync", "--no-instructions"]
    _run(argv, user=user, cwd=data.parent, timeout=INITDB_TIMEOUT_SECONDS)


def _env() -> dict[str, str]:
    """The server's settings come from its own files, never from the caller's PG*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    return env


def _run(argv: list[str], *, user: pwd.struct_passwd | None, cwd: Path, timeout: float) -> None:
    """Run ``argv`` (as ``user``, when given), bounded by ``timeout``; raise on failure."""
    if user is not None:
        argv = ["runuser", "-u", user.pw_name, "--", *argv]
    try:
        result = subprocess.run(
            argv,
            cwd=cwd,
            env=_env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        raise ClusterError(f"{' '.join(argv)} did not finish in {timeout:.0f}s") from exc
    if result.returncode != 0:
        raise ClusterError(
            f"{' '.join(argv)} failed ({result.returncode}): {result.stdout}{result.stderr}"
        )


def _pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not: PID 1 here may never reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    # The state follows the parenthesised command name, which may itself hold spaces.
    state = stat.rsplit(")", 1)[-1].split()[0]
    return state not in ("Z", "X")


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and fields[1] == str(pid):
            found.append(int(entry.name))
    return found


class PrivateCluster:
    """A PostgreSQL cluster of its own in a temp folder (see the module's docstring).

    ``PrivateCluster()`` runs ``initdb``; ``start()`` (or ``with``) starts it. The port is
    chosen once and kept across ``stop``/``start``/``restart``/``kill``; ``close()`` stops the
    server and removes the folder.
    """

    def __init__(self, bindir: Path | str | None = None, *, use_template: bool = True) -> None:
        """``use_template``: copy a data folder that ``initdb`` made once in this process
        (a fifth of a second in memory) instead of running ``initdb`` (a second or more)."""
        found = Path(bindir) if bindir is not None else find_bindir()
        if found is None:
            raise ClusterError("PostgreSQL's server binaries (initdb, postgres) are not installed")
        self.bindir = found
        self._as_user = self._server_user()
        self.base = _make_folder(CLUSTER_PREFIX)
        self.data = self.base / "data"
        self.socket_dir = self.base / "sock"
        self.log = self.base / "server.log"
        self._port = free_port()
        self._closed = False
        self._proc: subprocess.Popen[bytes] | None = None
        try:
            self.socket_dir.mkdir()
            self.log.touch()
            if self._as_user is not None:
                for path in (self.base, self.socket_dir, self.log):
                    os.chown(path, self._as_user.pw_uid, self._as_user.pw_gid)
            if use_template:
                template = _template(self.bindir, self._as_user)
                self._run(["cp", "-a", str(template), str(self.data)], timeout=COPY_TIMEOUT_SECONDS)
            else:
                _initdb(self.bindir, self._as_user, self.data)
            self._configure()
        except BaseException:
            shutil.rmtree(self.base, ignore_errors=True)
            self._closed = True
            raise

    # --- properties -------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        """A SQLAlchemy URL of the ``postgres`` database."""
        return self.url_for("postgres")

    def url_for(self, database: str) -> str:
        return f"postgresql+psycopg://{SERVER_USER}@127.0.0.1:{self._port}/{database}"

    @property
    def postmaster_pid(self) -> int | None:
        """The running postmaster's pid (``None`` when it is not running)."""
        return self._server_pid()

    # --- lifecycle --------------------------------------------------------------------------

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = START_TIMEOUT_SECONDS) -> None:
        """Start the server and return once it accepts connections on its TCP port."""
        self._check_open()
        if self.is_running():
            return
        deadline = time.monotonic() + timeout
        argv = [self._bin("postgres"), "-D", str(self.data)]
        if self._as_user is not None:
            argv = ["runuser", "-u", self._as_user.pw_name, "--", *argv]
        # The postmaster is our child (or runuser's, which waits for it), so it is reaped as it
        # dies: a zombie would keep postmaster.pid and the socket lock "in use" after kill().
        with open(self.log, "ab") as log:
            self._proc = subprocess.Popen(
                argv,
                cwd=self.base,
                env=self._env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._wait_for_connections(deadline)

    def stop(self, mode: str = "fast", timeout: float = STOP_TIMEOUT_SECONDS) -> None:
        """Stop the server and wait until it is gone (``mode``: ``smart``, ``fast`` or
        ``immediate``, as ``pg_ctl stop -m``); a no-op when it is not running."""
        if mode not in SHUTDOWN_SIGNALS:
            raise ValueError(f"unknown shutdown mode {mode!r}")
        if not self.is_running():
            self._reap()
            return
        self._signal_postmaster(SHUTDOWN_SIGNALS[mode])
        if not self._reap(timeout):
            raise ClusterError(
                f"the server did not stop ({mode}) in {timeout:.0f}s{self._log_tail()}"
            )

    def restart(self, mode: str = "fast") -> None:
        """Stop and start again: same port, same data; every client connection is cut."""
        self.stop(mode)
        self.start()

    def kill(self, timeout: float = 10.0) -> None:
        """SIGKILL the postmaster, as in a crash, and wait (bounded) until its child processes
        are gone too, so ``start()`` can run crash recovery; stragglers are SIGKILLed."""
        pid = self._server_pid()
        if pid is None:
            if self._proc is not None and self._proc.poll() is None:
                self._proc.kill()
            self._reap(timeout)
            return
        children = _children(pid)
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + timeout
        self._reap(timeout)
        waiting = children
        while waiting and time.monotonic() < deadline:
            waiting = [p for p in waiting if _pid_alive(p)]
            if waiting:
                time.sleep(0.02)
        for straggler in waiting:
            with contextlib.suppress(ProcessLookupError):
                os.kill(straggler, signal.SIGKILL)

    def close(self) -> None:
        """Stop the server (killing it if it will not stop) and remove the folder."""
        if self._closed:
            return
        try:
            try:
                self.stop("immediate", timeout=15)
            except (ClusterError, OSError):
                self.kill()
            if self._proc is not None and self._proc.poll() is None:
                self._proc.kill()
                self._reap(5)
        finally:
            self._closed = True
            shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> PrivateCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("running" if self.is_running() else "stopped")
        return f"<PrivateCluster 127.0.0.1:{self._port} {state} {self.base}>"

    # --- databases --------------------------------------------------------------------------

    def connect(self, database: str = "postgres", **kwargs: object) -> psycopg.Connection:
        """A plain psycopg connection (autocommit unless told otherwise)."""
        kwargs.setdefault("autocommit", True)
        kwargs.setdefault("connect_timeout", 5)
        return psycopg.connect(
            host="127.0.0.1", port=self._port, user=SERVER_USER, dbname=database, **kwargs
        )

    def create_database(self, name: str) -> str:
        """Create database ``name``; returns its SQLAlchemy URL."""
        with self.connect() as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url_for(name)

    # --- internals --------------------------------------------------------------------------

    @staticmethod
    def _server_user() -> pwd.struct_passwd | None:
        """The OS user to run the server as: ``postgres`` when we are root, else ourselves."""
        if os.geteuid() != 0:
            return None
        try:
            return pwd.getpwnam(SERVER_USER)
        except KeyError:
            raise ClusterError(
                f"running as root, but there is no OS user {SERVER_USER!r} to run PostgreSQL as"
            ) from None

    @staticmethod
    def _env() -> dict[str, str]:
        return _env()

    def _bin(self, name: str) -> str:
        return str(self.bindir / name)

    def _run(self, argv: list[str], *, timeout: float) -> None:
        _run(argv, user=self._as_user, cwd=self.base, timeout=timeout)

    def _configure(self) -> None:
        settings = {
            **SETTINGS,
            "port": str(self._port),
            "unix_socket_directories": f"'{self.socket_dir}'",
        }
        lines = "".join(f"{key} = {value}\n" for key, value in settings.items())
        with open(self.data / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.write("\n# memory_sql tests: a private cluster\n" + lines)

    def _server_pid(self) -> int | None:
        """The running postmaster's pid: our child, or runuser's only child."""
        if self._proc is None or self._proc.poll() is not None:
            return None
        if _comm(self._proc.pid) == "postgres":
            return self._proc.pid
        children = [pid for pid in _children(self._proc.pid) if _comm(pid) == "postgres"]
        return children[0] if children else None

    def _signal_postmaster(self, signum: int) -> None:
        pid = self._server_pid()
        if pid is None:
            # Still being spawned: runuser passes a TERM/INT/QUIT on (as a TERM).
            if self._proc is not None and self._proc.poll() is None:
                self._proc.send_signal(signum)
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    def _reap(self, timeout: float = 0.0) -> bool:
        """Wait (at most ``timeout``) for the server process to exit; whether it has."""
        if self._proc is None:
            return True
        try:
            self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        self._proc = None
        return True

    def _wait_for_connections(self, deadline: float) -> None:
        last: Exception | None = None
        while True:
            try:
                with self.connect(connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError as exc:
                last = exc
            if not self.is_running():
                code = self._proc.returncode if self._proc is not None else None
                self._reap()
                raise ClusterError(
                    f"the server exited ({code}) while starting: {last}{self._log_tail()}"
                )
            if time.monotonic() >= deadline:
                self.kill()
                raise ClusterError(
                    f"the server on 127.0.0.1:{self._port} accepts no connections: {last}"
                    f"{self._log_tail()}"
                )
            time.sleep(0.05)

    def _log_tail(self) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        except OSError:
            return ""
        return "\n--- server log (tail) ---\n" + "\n".join(lines) if lines else ""

    def _check_open(self) -> None:
        if self._closed:
            raise ClusterError("the cluster is closed")
