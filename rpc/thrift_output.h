#pragma once
// Thrift prints its own socket messages (every refused connect while a peer starts, every failed
// TLS handshake) through its GlobalOutput, to stderr by default. Ours carry what matters, so those
// go to the debug log instead. Idempotent; called by whatever opens Thrift sockets.
namespace pw::rpc {

void route_thrift_output_to_log();

}  // namespace pw::rpc
