"""Running built firmware and talking to it: the runners (host, QEMU,
Unicorn, Renode, a flashed board over serial), the console protocol, the
reference check, and the services on top (serve, chat)."""
