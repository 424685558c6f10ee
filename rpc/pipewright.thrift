// The wire protocol between pipewright ranks: the source of truth for both services.
// Every call carries the job's token; a server refuses calls whose token differs.
namespace cpp pw.rpc.wire

// ---- tensor transfer ----------------------------------------------------------------------

enum FrameKind {
  ACTIVATION = 1,
  GRADIENT = 2,
  TIED_GRADIENT = 3,
}

enum ElementType {
  F32 = 1,
  F64 = 2,
  I64 = 3,
  I32 = 4,
  U8 = 5,
}

// One tensor from one rank to another, addressed like rpc::Tag. `kind` and `dtype` travel as
// plain i32 (values of FrameKind / ElementType) so that a receiver sees unknown codes as numbers
// it can refuse, rather than as out-of-range C++ enum values.
struct TensorFrame {
  1: string job_token,
  2: i32 source_rank,
  3: i64 step,
  4: i32 micro_batch,        // for TIED_GRADIENT: the tied group's index
  5: i32 kind,               // a FrameKind
  6: i32 virtual_stage,
  7: i32 dtype,              // an ElementType
  8: list<i64> shape,
  9: binary data,            // row-major elements, little-endian
}

exception FrameRejected {
  1: string reason,
}

service TensorTransfer {
  // Returns once the frame sits in the receiver's mailbox; throws when the receiver refuses it.
  void deliver(1: TensorFrame frame) throws (1: FrameRejected rejected),
}

// ---- rendezvous (run by rank 0) -------------------------------------------------------------

struct RankPlacement {
  1: i32 rank,
  2: i32 stage,
  3: i32 replica,
  4: string address,         // "host:port" of the rank's tensor transfer server
}

struct JobLayout {
  1: i32 world_size,
  2: i32 pipeline_stages,
  3: i32 replicas,
  4: list<RankPlacement> ranks,
}

exception RendezvousFailed {
  1: string reason,
}

service Rendezvous {
  // Blocks until every rank has registered (or the server's deadline passes), then returns the layout.
  JobLayout register_rank(1: string job_token, 2: i32 rank, 3: string address)
      throws (1: RendezvousFailed failed),
  // The NCCL unique id of a communicator group, published once by the group's root.
  void put_nccl_id(1: string job_token, 2: string group, 3: binary id) throws (1: RendezvousFailed failed),
  binary get_nccl_id(1: string job_token, 2: string group, 3: i32 timeout_ms)
      throws (1: RendezvousFailed failed),
  // Returns once every rank reached the barrier `name`; throws after timeout_ms.
  void barrier(1: string job_token, 2: string name, 3: i32 rank, 4: i32 timeout_ms)
      throws (1: RendezvousFailed failed),
  void heartbeat(1: string job_token, 2: i32 rank) throws (1: RendezvousFailed failed),
}
