#include "pipeline/error_context.h"

#include "core/error.h"
#include "kernels/allocator.h"
#include <new>

#include "rpc/mailbox.h"
#include "rpc/transport.h"

namespace pw::pipeline {

void rethrow_with_context(const std::string& context) {
  try {
    throw;
  } catch (const rpc::AbortedError& e) {
    // The root cause is another stage's error; in another process the context says what this
    // stage was blocked on when it heard.
    throw rpc::AbortedError(context + e.what());
  } catch (const rpc::TimeoutError& e) {
    throw rpc::TimeoutError(context + e.what());
  } catch (const rpc::PeerLostError& e) {
    throw rpc::PeerLostError(context + e.what());
  } catch (const kernels::OutOfMemory& e) {
    throw kernels::OutOfMemory(e, context);
  } catch (const rpc::ProtocolError& e) {   // a peer broke the protocol: keeps its kind (status 2)
    throw rpc::ProtocolError(context + e.what());
  } catch (const InputError& e) {
    throw InputError(context + e.what());
  } catch (const std::bad_alloc&) {   // the host is out of memory (status 1), not a bug
    throw;
  } catch (const std::exception& e) {
    throw Error(context + e.what());
  }
}

}  // namespace pw::pipeline
