"""The QEMU UART session connects only to its own QEMU: a port handed out
by _free_tcp_port can be taken by another process first (a second test
run on the machine), and connecting there reaches a console that never
speaks to us (run/qemu.py _listens)."""
import os
import socket
import subprocess
import sys

import pytest

from tinyllm_gen.run.qemu import _listens


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="needs Linux's /proc/net/tcp")
def test_the_listening_socket_is_told_by_its_owner():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        assert _listens(os.getpid(), port) is False  # bound, not listening yet
        s.listen(1)
        assert _listens(os.getpid(), port) is True
        other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            assert _listens(other.pid, port) is False  # someone else's listener is not this process's
        finally:
            other.kill()
            other.wait()


def test_a_process_that_is_gone_cannot_say():
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    assert _listens(int(done.stdout), 1) is None
