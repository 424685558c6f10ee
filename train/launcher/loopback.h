#pragma once
// Ports on 127.0.0.1 for what a launcher starts on its own node (a rendezvous, parameter servers).

namespace pw::launcher {

// A port nobody listens on now (the rendezvous or server binds it a moment later, as torchrun does).
int free_loopback_port();
// Whether something accepts TCP connections at 127.0.0.1:port.
bool accepts_on_loopback(int port);

}  // namespace pw::launcher
