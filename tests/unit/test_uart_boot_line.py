"""QEMU starts the guest the moment our UART connection is accepted, so the
firmware's first line can reach the socket before pyserial's socket:// open()
has finished, and that open() ends by flushing its input: the line was lost
and the host waited for "@TLLM ready" while the firmware waited for a request
(the serve tests' hangs on a busy machine). BootKeepingPort keeps it. The
race is made certain here: the port's setup waits until the line is there."""
import select
import socket
import threading

from serial.urlhandler.protocol_socket import Serial as SocketSerial

from tinyllm_gen.run.qemu import BootKeepingPort

LINE = b"@TLLM ready max_request=64\n"


def _until_readable(self):
    """Stands in for a descheduled host: open() carries on only once the boot line has arrived."""
    assert select.select([self._socket], [], [], 30)[0], "the server never sent its line"


def _first_line(port_class) -> bytes:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)

        def speak():
            conn, _ = server.accept()
            with conn:
                conn.sendall(LINE)
                conn.recv(1)  # held open until the client closes

        t = threading.Thread(target=speak, daemon=True)
        t.start()
        slow = type("Slow" + port_class.__name__, (port_class,), {"_reconfigure_port": _until_readable})
        port = slow(f"socket://127.0.0.1:{server.getsockname()[1]}", timeout=0.5)
        try:
            return port.readline()
        finally:
            port.close()
            t.join(30)


def test_the_boot_line_survives_the_open():
    assert _first_line(BootKeepingPort) == LINE


def test_pyserials_own_open_drops_it():
    """What the test above guards against (were pyserial to stop flushing, BootKeepingPort could go)."""
    assert _first_line(SocketSerial) == b""


def test_a_flush_after_the_open_still_flushes():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = BootKeepingPort(f"socket://127.0.0.1:{server.getsockname()[1]}", timeout=0.5)
        conn, _ = server.accept()
        with conn, port:
            conn.sendall(b"junk\n")
            assert select.select([port._socket], [], [], 30)[0]
            port.reset_input_buffer()
            conn.sendall(LINE)
            assert port.readline() == LINE
