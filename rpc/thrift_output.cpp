#include "rpc/thrift_output.h"

#include <mutex>

#include <thrift/TOutput.h>

#include "core/error.h"
#include "core/log.h"

namespace pw::rpc {

void route_thrift_output_to_log() {
  static std::once_flag once;
  std::call_once(once, [] {
    apache::thrift::GlobalOutput.setOutputFunction([](const char* message) { PW_LOG(Debug, "thrift: " << message); });
  });
}

}  // namespace pw::rpc
