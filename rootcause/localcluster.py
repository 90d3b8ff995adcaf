"""`--ray local`: a one-node Ray cluster that only this command can reach.

Ray binds its gRPC servers (GCS, raylet, workers, the driver's) to every address of the host and
has no option to choose one. So a command given `--ray local` runs again as a child in a network
namespace of its own (a user namespace maps the user to itself; the only interface there is
loopback, up): nothing outside the child's namespace can connect to the cluster. Its token
(RAY_AUTH_TOKEN_PATH, 0600) and Ray's session folders live in a private folder (0700) that is
removed when the child ends, with every process left in the namespace.

The namespace has no route to the package registry, so the toolchain environments the child
needs are made, and the registry's versions listed, by this (outer) process: the child, and every
Ray worker it starts, asks over a Unix socket in the private folder (envs.ensure and
envs.registry_versions do, when ROOTCAUSE_ENVS_SOCKET is set).

A host that does not let a user make namespaces (kernel.unprivileged_userns_clone=0, an AppArmor
restriction) gets one line saying so and no cluster: `--ray ADDRESS` joins a cluster the user
secured (docs/SWEEP.md), and without --ray the pairs run here one after another.
"""
from __future__ import annotations

import ctypes
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from rootcause import child
from rootcause.errors import UsageError

FOLDER_ENV = "ROOTCAUSE_RAY_FOLDER"    # set in the child: the private folder (token, Ray's sessions)
SOCKET_ENV = "ROOTCAUSE_ENVS_SOCKET"   # set in the child: where environments are asked for

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_SIOCSIFFLAGS = 0x8914
_IFF_UP, _IFF_LOOPBACK, _IFF_RUNNING = 0x1, 0x8, 0x40


def inside() -> bool:
    """True in the child that run_private started (its cluster is the private one)."""
    return bool(os.environ.get(FOLDER_ENV))


def ray_folder() -> Path:
    return Path(os.environ[FOLDER_ENV])


def _enter_namespace(uid: int, gid: int) -> None:
    """preexec_fn of the child: a user and a network namespace of its own, loopback up. Runs after
    fork, before exec, while the child still holds the capabilities the new user namespace gives."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
    Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        import fcntl
        import struct
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", _IFF_UP | _IFF_LOOPBACK | _IFF_RUNNING))
    # SIGTERM, not SIGKILL, when the outer process dies: the child shuts its cluster down and
    # removes the private folder (remove_folder_at_exit), which the outer one no longer can
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def remove_folder_at_exit() -> None:
    """In the child: the private folder goes when the command has ended, with every process left
    in the namespace. A reaper (a process of its own session, so a ^C at the terminal leaves it)
    waits for the child's whole exit, kills what is left in the namespace until none is, then
    removes the folder. It is not done by the child itself: a Ray thread of the child writes its
    session's folders again after any removal made while the child still runs."""
    subprocess.Popen([sys.executable, "-m", "rootcause.localcluster", "reap", str(os.getpid()), str(ray_folder())],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True, env=child.python_env({}))


def _reap(owner: int, folder: Path) -> None:
    """The reaper: once OWNER (every thread of it) has exited, no process of its namespace stays
    and FOLDER is removed."""
    import select

    own = _netns(owner)
    try:
        pidfd = os.pidfd_open(owner)
    except ProcessLookupError:
        pass
    except OSError:  # a kernel without pidfd_open (before 5.3): the owner's /proc entry, polled
        while Path(f"/proc/{owner}").exists():
            time.sleep(0.2)
    else:
        select.select([pidfd], [], [])  # readable once the whole thread group has exited
        os.close(pidfd)
    _end_namespace(own, own_too=True)
    for _ in range(5):
        shutil.rmtree(folder, ignore_errors=True)
        if not folder.exists():
            return
        time.sleep(0.2)


def _netns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def _end_namespace(netns: str | None, own_too: bool = False) -> None:
    """SIGKILL every other process of this user in network namespace NETNS (a Ray agent outlives a
    driver that was killed), again until none is left (a raylet may start one meanwhile) or 10 s
    have passed. The caller's own namespace is emptied only where own_too says so (the reaper,
    which lives in the namespace it ends)."""
    if netns is None or (not own_too and netns == _netns(os.getpid())):
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        others = [pid for pid in _pids_in(netns) if pid != os.getpid()]
        if not others:
            return
        for pid in others:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)


def _pids_in(netns: str | None) -> list[int]:
    """The processes of this user in network namespace NETNS (others' namespaces are unreadable)."""
    return [int(entry.name) for entry in Path("/proc").iterdir()
            if entry.name.isdigit() and _netns(int(entry.name)) == netns]


def _serve(server: socket.socket, calls: dict[str, Callable[..., object]]) -> None:
    """One request a connection: {"call": NAME, "args": [...]} -> {"value": ...} or {"error": LINE}."""
    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        with conn:
            try:
                ask = json.loads(conn.makefile("rb").readline())
                reply = {"value": calls[ask["call"]](*ask["args"])}
            except UsageError as err:
                reply = {"error": str(err)}
            except Exception as err:  # noqa: BLE001  the asker reports it; this thread must go on
                reply = {"error": f"{type(err).__name__}: {err}"}
            try:
                conn.sendall(json.dumps(reply).encode() + b"\n")
            except OSError:
                pass


def asks_outside() -> bool:
    """True inside the namespace: calls that reach the registry go to the outer process."""
    return bool(os.environ.get(SOCKET_ENV))


def ask_outside(call: str, *args: object) -> object:
    """From inside the namespace: the outer process makes the call (envs.ensure, the registry's
    versions) and answers with its value; its UsageError is raised here."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(os.environ[SOCKET_ENV])
        s.sendall(json.dumps({"call": call, "args": list(args)}).encode() + b"\n")
        reply = json.loads(s.makefile("rb").readline() or b"{}")
    if "value" not in reply:
        raise UsageError(reply.get("error") or f"{call}: no answer from the rootcause outside the namespace")
    return reply["value"]


def run_private(argv: list[str], calls: dict[str, Callable[..., object]]) -> int:
    """Run `rootcause ARGV` again in a namespace of its own; its exit status. calls: what the child
    may ask of this process by name (envs.outside_calls: the ones that reach the registry)."""
    folder = Path(tempfile.mkdtemp(prefix="rootcause-ray-"))  # 0700
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    proc = None
    try:
        fd = os.open(folder / "auth_token", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
        server.bind(str(folder / "envs.sock"))
        server.listen(16)
        threading.Thread(target=_serve, args=(server, calls), daemon=True).start()
        env = child.python_env({FOLDER_ENV: str(folder), SOCKET_ENV: str(folder / "envs.sock"),
                                "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(folder / "auth_token")})
        env.pop("RAY_AUTH_TOKEN", None)
        uid, gid = os.getuid(), os.getgid()
        try:
            proc = subprocess.Popen([sys.executable, "-m", "rootcause", *argv], env=env,
                                    preexec_fn=lambda: _enter_namespace(uid, gid))
        except subprocess.SubprocessError:
            raise UsageError("--ray local: this host does not let a user make a network namespace, and Ray "
                             "listens on every address; no cluster was started (run without --ray, or give "
                             "--ray ADDRESS of a cluster you secured: docs/SWEEP.md)") from None
        netns = _netns(proc.pid)
        try:
            return proc.wait()
        except BaseException:
            proc.send_signal(signal.SIGTERM)
            proc.wait()
            raise
        finally:
            _end_namespace(netns)
    finally:
        server.close()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":  # the reaper remove_folder_at_exit starts: reap OWNER_PID FOLDER
    _reap(int(sys.argv[2]), Path(sys.argv[3]))
