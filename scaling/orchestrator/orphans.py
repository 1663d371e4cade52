"""Reap the processes a killed local Ray left behind, and only those.

Ray starts its GCS and raylet to die with their parent, but the raylet's own children (the
dashboard and runtime-env agents, idle and running workers) are reparented when a sweep is
killed with SIGKILL, and may keep running, and writing metrics, for a while. Each of them is
named ``ray::...`` and carries the pid of the raylet that started it in ``RAY_RAYLET_PID`` (Ray's
own processes read it to follow their raylet). One whose raylet is gone belongs to no node and is
stopped before a new local Ray starts, and as soon as its raylet exits by a watchdog the sweep
starts beside its local Ray (:func:`start_watchdog`, a process of its own, so a sweep killed with
SIGKILL leaves nothing running: the workers exit with their raylet, the agents are stopped).
Another live Ray's processes are never touched, even one that is no raylet's child (a task's own
subprocess keeps the task's name): on a machine shared by several sweeps, or test workers, each
with its own Ray, stopping them would break that Ray.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
from pathlib import Path
from typing import Optional

import psutil

#: How long an orphan may take to exit on SIGTERM before it is killed.
GRACE_S = 3.0
#: The agents' scripts, for the moment before an agent renames itself ``ray::...``.
AGENT_SCRIPTS = ("ray/dashboard/agent.py", "ray/_private/runtime_env/agent/main.py")
#: The variable in which Ray gives each process it starts its raylet's pid.
RAYLET_PID_PREFIX = b"RAY_RAYLET_PID="


def _is_ray_child(name: str, cmdline: list[str]) -> bool:
    return name.startswith("ray::") or any(arg.endswith(AGENT_SCRIPTS) for arg in cmdline[:3])


def raylet_pid_of(proc: psutil.Process) -> Optional[int]:
    """The pid of the raylet that started ``proc``, or None where its environment does not say.

    Read from ``/proc`` directly: a process that renames itself with a long title overwrites the
    start of its environment block, which then no longer parses as one (psutil's ``environ()``
    returns nothing); the variable itself, further on, is still there.
    """
    path = f"/proc/{proc.pid}/environ"
    if os.path.exists(path):
        with open(path, "rb") as f:
            entries = f.read().split(b"\0")
    else:  # no /proc (macOS): what psutil can read
        entries = [f"{k}={v}".encode() for k, v in proc.environ().items()]
    for entry in entries:
        if entry.startswith(RAYLET_PID_PREFIX):
            value = entry[len(RAYLET_PID_PREFIX):]
            return int(value) if value.isdigit() else None
    return None


def raylet_alive(pid: int, child: psutil.Process) -> bool:
    """Whether ``pid`` is still the raylet that started ``child`` (not exited, not a reused pid)."""
    try:
        raylet = psutil.Process(pid)
        return (raylet.name() == "raylet" and raylet.status() != psutil.STATUS_ZOMBIE
                and raylet.create_time() <= child.create_time())
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return False  # (AccessDenied: another user's process under that pid, so not our raylet)


def orphaned_ray_processes() -> list[psutil.Process]:
    """This user's ``ray::`` processes whose raylet has exited.

    One whose raylet cannot be told (no ``RAY_RAYLET_PID``) is left alone: it may be anyone's.
    """
    uid = os.getuid()
    found = []
    for proc in psutil.process_iter(["name", "uids", "cmdline", "status"]):
        try:
            if proc.info["uids"] is None or proc.info["uids"].real != uid:
                continue
            if proc.info["status"] == psutil.STATUS_ZOMBIE:  # already exited: only its parent can reap it
                continue
            if not _is_ray_child(proc.info["name"] or "", proc.info["cmdline"] or []):
                continue
            raylet = raylet_pid_of(proc)
            if raylet is not None and not raylet_alive(raylet, proc):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return found


def reap_orphaned_agents() -> int:
    """Stop every ``ray::`` process of this user whose raylet has exited; returns how many there were."""
    orphans = orphaned_ray_processes()
    for proc in orphans:
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(orphans, timeout=GRACE_S)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    return len(orphans)


def wait_for_exit(pid: int) -> None:
    """Block until process ``pid`` (not a child of this one) has exited."""
    try:
        fd = os.pidfd_open(pid)  # Linux: woken by the kernel, no polling
    except (AttributeError, OSError):
        try:
            psutil.Process(pid).wait()
        except psutil.NoSuchProcess:
            pass
        return
    try:
        select.select([fd], [], [])
    finally:
        os.close(fd)


def start_watchdog() -> Optional[subprocess.Popen]:
    """A process that stops the children of this process's raylet once it exits (None without a raylet).

    It runs in a session of its own, so it outlives this process when it is killed, and exits
    once it has reaped (a local Ray shut down normally leaves it nothing to do).
    """
    raylets = [c for c in psutil.Process().children() if c.name() == "raylet"]
    if not raylets:
        return None
    root = str(Path(__file__).resolve().parents[2])  # this checkout's scaling, installed or not
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    return subprocess.Popen([sys.executable, "-m", "scaling.orchestrator.orphans", str(raylets[0].pid)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, close_fds=True, env=env)


if __name__ == "__main__":  # the watchdog: python -m scaling.orchestrator.orphans RAYLET_PID
    wait_for_exit(int(sys.argv[1]))
    reap_orphaned_agents()
