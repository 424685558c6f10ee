// The wire protocol between pipewright ranks: the source of truth for both services.
// Every call carries the job's token; a server refuses calls whose token differs.
namespace cpp pw.rpc.wire

// ---- tensor transfer ----------------------------------------------------------------------

enum FrameKind {
  ACTIVATION = 1,
  GRADIENT = 2,
  TIED_GRADIENT = 3,
  EVALUATION = 4,
  CONTROL = 5,
  COLLECTIVE = 6,            // step: the group's operation, micro_batch: the message, virtual_stage: the group
}

enum ElementType {
  F32 = 1,
  F64 = 2,
  I64 = 3,
  I32 = 4,
  U8 = 5,
  BF16 = 6,
  F16 = 7,
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

enum RendezvousError {
  JOB_FAILED = 1,   // another rank failed or was lost; the reason names it
  TIMED_OUT = 2,
  REFUSED = 3,      // a request outside the job (rank out of range...)
  WRONG_TOKEN = 4,  // the caller's job token is not this job's
}

exception RendezvousFailed {
  1: string reason,
  2: i32 code,      // a RendezvousError
}

// Every blocking call takes the caller's remaining time (timeout_ms) and throws RendezvousFailed
// when it passes, or as soon as the job has failed (the reason names the rank that failed).
service Rendezvous {
  // Blocks until every rank has registered, then returns the layout (rank r: stage r % stages,
  // replica r / stages).
  JobLayout register_rank(1: string job_token, 2: i32 rank, 3: string address, 4: i32 timeout_ms)
      throws (1: RendezvousFailed failed),
  // A key-value store shared by the job: NCCL unique ids, Gloo's store, a split chosen by rank 0.
  void store_set(1: string job_token, 2: string key, 3: binary value) throws (1: RendezvousFailed failed),
  binary store_get(1: string job_token, 2: string key, 3: i32 timeout_ms) throws (1: RendezvousFailed failed),
  // Returns once every rank reached the barrier `name` (each name is used once).
  void barrier(1: string job_token, 2: string name, 3: i32 rank, 4: i32 timeout_ms)
      throws (1: RendezvousFailed failed),
  // Liveness, on a connection of its own: the connection that sends a rank's heartbeats closing
  // before that rank left means the rank is lost. Returns "" while the job is healthy, else the
  // reason it failed. `now_ns` is the server's steady clock (for trace clock offsets).
  string heartbeat(1: string job_token, 2: i32 rank) throws (1: RendezvousFailed failed),
  i64 now_ns(1: string job_token) throws (1: RendezvousFailed failed),
  // A rank that fails reports why before it exits, so the others stop at once with the cause.
  void report_failure(1: string job_token, 2: i32 rank, 3: string reason) throws (1: RendezvousFailed failed),
  // A rank that finished closes its connections without being counted as lost.
  void leave(1: string job_token, 2: i32 rank) throws (1: RendezvousFailed failed),
}

// ---- parameter servers (one service per shard) ---------------------------------------------

enum SparseOptimizer {
  SGD = 1,
  ADAGRAD = 2,
  ADAM = 3,
}

struct TableSpec {
  1: string name,
  2: i32 dim,              // floats per row
  3: i32 optimizer,        // a SparseOptimizer
  4: double lr,
  5: i64 init_seed,        // rows start uniform in [-init_scale, init_scale], a function of (seed, key)
  6: double init_scale,
  // Bounds (issue 16.3): a row is made on its id's admit_after-th sighting; at most max_rows rows
  // per shard, the least recently updated evicted (0: no cap); rows not updated for row_ttl steps
  // expire (0: never). A server started with bounds refuses a table with others.
  7: i32 admit_after = 1,
  8: i64 max_rows = 0,
  9: i64 row_ttl = 0,
}

enum PsErrorCode {
  BAD_REQUEST = 1,         // unknown table, wrong row width, too many keys, a table redefined
  REFUSED = 2,             // wrong job token
  TIMED_OUT = 3,           // waiting for other workers' pushes (sync / bounded staleness)
  FAILED = 4,              // the server could not do it (disk full...)
}

exception PsError {
  1: string reason,
  2: i32 code,             // a PsErrorCode
}

struct ShardStats {
  1: i64 rows,
  2: i64 pulls,
  3: i64 pushes,
  4: i64 applied_through,  // the last step whose pushes from every worker are applied (-1: none)
  5: i64 max_pull_staleness,  // over pulls of steps t >= 0: the largest t - applied_through when answered
  6: i64 admissions,       // rows created since the table was made
  7: i64 dropped_rows,     // gradient rows dropped because their id was not yet admitted
  8: i64 evictions,        // rows removed to stay under max_rows
  9: i64 expirations,      // rows removed after row_ttl steps without an update
  10: i64 peak_rows,       // the most rows the shard held after any update
  11: list<i64> last_pushed,  // per worker: the last step whose push is whole here (-1: none)
}

// What a server was started as: a client checks it against the job on connect, so swapped,
// missing or repeated addresses and another update mode are refused rather than trained on.
struct ShardIdentity {
  1: i32 shard,
  2: i32 shards,
  3: i32 workers,
  4: string mode,          // sync, async or bounded
}

// A file a shard wrote for a job checkpoint.
struct PsCheckpointFile {
  1: string path,          // relative to the checkpoint folder: "shard-0/emb.table"
  2: i64 bytes,
  3: string checksum,      // checksum_hex(checksum64(the file's bytes)), core/durable_file.h
}

service ParameterServer {
  // Idempotent for the same spec; a different spec under an existing name is refused.
  void create_table(1: string job_token, 2: TableSpec spec) throws (1: PsError error),
  // The rows of `keys` (a key never updated: its initial row), row-major F32 little-endian. With staleness s >= 0
  // the answer waits until every worker's pushes of step `step - s` are applied (s < 0: never waits).
  binary pull(1: string job_token, 2: string table, 3: list<i64> keys, 4: i64 step, 5: i32 staleness,
              6: i32 timeout_ms) throws (1: PsError error),
  // Gradients of `keys` (unique within the step), summed over the worker's batch. Every worker
  // pushes once per step to every shard (possibly no keys), so the server can count steps; a push
  // of many keys comes in `parts` calls (part 0..parts-1, any order) that share `push_id`; the
  // server holds the parts and applies the push when the last arrives. A part the server already
  // has (a retry) is acknowledged again; a part with another push_id for the same step (the worker
  // started the push again after a failure) drops the parts held so far.
  void push(1: string job_token, 2: string table, 3: i32 worker, 4: i64 step, 5: list<i64> keys,
            6: binary grads, 7: i32 part = 0, 8: i32 parts = 1, 9: i64 push_id = 0) throws (1: PsError error),
  ShardStats stats(1: string job_token, 2: string table) throws (1: PsError error),
  // Writes every table (rows, optimizer state) as applied after the pushes of steps < `step` to
  // folder/shard-<shard>/ on the server's file system, each file durably, a manifest last. Waits
  // up to timeout_ms for every worker's pushes of step `step` - 1 (TIMED_OUT names the workers
  // behind). Returns the files written.
  list<PsCheckpointFile> checkpoint(1: string job_token, 2: string folder, 3: i64 step, 4: i32 timeout_ms)
      throws (1: PsError error),
  // Replaces every table with the ones a checkpoint saved under folder/shard-<shard>/; afterwards
  // the server stands after the saved step - 1 (nothing pending). BAD_REQUEST for a missing,
  // damaged or foreign checkpoint or another shard count; then no table changed. With
  // check_only it reads and checks the same and changes nothing (a client checks every shard
  // before it lets any replace its tables).
  void restore(1: string job_token, 2: string folder, 3: bool check_only) throws (1: PsError error),
  ShardIdentity identity(1: string job_token) throws (1: PsError error),
  // Binds the server to one job: the first claim (or one with take_over, by a job resuming from a
  // checkpoint, whose restore replaces every table) sets the job's identity; a claim by another job
  // is BAD_REQUEST naming both. Kept in the server's folder, so it outlives a restart.
  void claim(1: string job_token, 2: string job_id, 3: bool take_over) throws (1: PsError error),
}
