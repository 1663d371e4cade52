"""Who holds a run: the claimant id stored with a claim, and whether that claimant still lives.

Every entry point (`scaling sweep`'s scheduler, `scaling train`) claims as ``host:pid``, so a run
whose claimant process died on this host (SIGKILL, OOM) is taken over at once instead of after
the heartbeat timeout. A claimant on another host can only be judged by its heartbeat.
"""

from __future__ import annotations

import os
import socket
from typing import Optional


def claimant_id() -> str:
    """This process as a claimant: ``<host name>:<pid>``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def claimant_is_dead(claimant: Optional[str]) -> bool:
    """True when ``claimant`` names a process of this host that no longer exists.

    False when it is alive, is this process, is on another host, or is not of the
    ``host:pid`` form (older rows stored the host alone): then only its heartbeat can tell.
    """
    hostname, _, pid = str(claimant or "").rpartition(":")
    if hostname != socket.gethostname() or not pid.isdigit():
        return False
    number = int(pid)
    if number <= 0 or number == os.getpid():  # kill(0, ...) would mean our own process group
        return False
    try:
        os.kill(number, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):  # another user's live process; an impossible pid
        return False
    return False
