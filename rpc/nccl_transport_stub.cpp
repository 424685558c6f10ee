// make_nccl_transport for builds without CUDA (PW_WITH_CUDA=OFF): the NCCL transport needs both.
#include "rpc/nccl_transport.h"

namespace pw::rpc {

std::unique_ptr<Transport> make_nccl_transport(int, int, kernels::Device, Store&, std::string) {
  throw InputError("this build has no CUDA/NCCL; use the thrift transport");
}

}  // namespace pw::rpc
