"""A network of the test's own, for the tests that start Ray (imported by test modules).

Every server a test starts listens on 127.0.0.1 only. The library's own (Flower's SuperLink and
SuperNodes, jax.distributed's coordinator) are told to; Ray's are not able to be: its GCS, raylet and
worker processes listen on every interface (Ray 2.55.1, which flwr 1.42 pins, and 2.60 alike, with
no setting that narrows them). So a test that starts Ray does it inside `private_network()`: a Linux
network namespace whose one interface is loopback, where "every interface" is 127.0.0.1, and which
the processes Ray starts inherit. Making one needs CAP_SYS_ADMIN (root, as on CI's machines); where
that is lacking the test is skipped, saying why, rather than run open to the machine's network.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import socket
import struct

import pytest

CLONE_NEWNET = 0x40000000  # <sched.h>
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1  # <linux/sockios.h>, <net/if.h>
IFREQ = "16sH14x"  # struct ifreq: the interface's name, then ifr_flags in its union


def _bring_up_loopback() -> None:
    """A new namespace's loopback is down: up, as `ip link set lo up` would."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = struct.unpack(IFREQ, fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack(IFREQ, b"lo", 0)))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack(IFREQ, b"lo", flags | IFF_UP))


@contextlib.contextmanager
def private_network():
    """This thread, and every process it starts meanwhile, in a network namespace with loopback alone;
    back in the machine's own at the end. Namespaces belong to threads: the test's thread moves, and
    the threads and processes Ray starts from it follow; the suite's other threads stay."""
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    except OSError as error:
        pytest.skip(f"starts Ray, whose servers listen on every interface, and this machine has no network "
                    f"namespaces to keep them on loopback ({error})")
    try:
        if libc.unshare(CLONE_NEWNET) != 0:
            pytest.skip(f"starts Ray, whose servers listen on every interface, and a network namespace to keep "
                        f"them on loopback needs CAP_SYS_ADMIN (unshare: {os.strerror(ctypes.get_errno())})")
        try:
            _bring_up_loopback()
            yield
        finally:
            if libc.setns(own, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back to the machine's network namespace failed")
    finally:
        os.close(own)
