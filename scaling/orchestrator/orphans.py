"""Reap the processes a killed local Ray left behind.

Ray starts its GCS and raylet to die with their parent, but the raylet's own children (the
dashboard and runtime-env agents, idle and running workers) are reparented when a sweep is
killed with SIGKILL, and may keep running, and writing metrics, for a while. Each of them is
named ``ray::...`` and, while its node is alive, is a child of a ``raylet``: one of ours whose
parent is anything else belongs to no node and is stopped before a new local Ray starts.
"""

from __future__ import annotations

import os

import psutil

#: How long an orphan may take to exit on SIGTERM before it is killed.
GRACE_S = 3.0
#: The agents' scripts, for the moment before an agent renames itself ``ray::...``.
AGENT_SCRIPTS = ("ray/dashboard/agent.py", "ray/_private/runtime_env/agent/main.py")


def _is_ray_child(name: str, cmdline: list[str]) -> bool:
    return name.startswith("ray::") or any(arg.endswith(AGENT_SCRIPTS) for arg in cmdline[:3])


def orphaned_ray_processes() -> list[psutil.Process]:
    """This user's ``ray::`` processes whose parent is not a raylet."""
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
            parent = proc.parent()
            if parent is None or parent.name() != "raylet":
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def reap_orphaned_agents() -> int:
    """Stop every orphaned ``ray::`` process of this user; returns how many there were."""
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
