// Parameter servers in job checkpoints and on disk: a checkpoint of step t holds exactly the rows
// and optimizer state after the pushes of steps < t (in a shard, over Thrift, in sync mode after
// the late worker's push), restore brings them back bitwise and lets the workers carry on at t,
// other shard counts and damaged files are refused; a write-ahead log that cannot be reopened
// refuses pushes, and a table snapshot taken while pulls create rows reads back whole.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <boost/test/unit_test.hpp>

#include "core/durable_file.h"
#include "dataparallel/ps/client.h"
#include "dataparallel/ps/server.h"
#include "dataparallel/ps/shard.h"
#include "rpc/transport.h"
#include "tests/dataparallel/ps/test_servers.h"

using namespace pw;
using namespace std::chrono_literals;
using pw::test::error_of;
namespace fs = std::filesystem;

namespace {

const std::string kToken = "ps-checkpoint-token";

dp::TableConfig table(const std::string& name, int dim, dp::SparseOptimizerKind opt) {
  dp::TableConfig c;
  c.name = name;
  c.dim = dim;
  c.optimizer = opt;
  c.lr = 0.05;
  c.init_seed = 7;
  c.init_scale = 0.5;
  return c;
}

// A folder of its own under the temporary folder, removed at the end.
struct TempFolder {
  explicit TempFolder(const std::string& tag)
      : path(fs::temp_directory_path() / ("pw_ps_ckpt_" + tag + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempFolder() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  fs::path path;
};

const std::vector<std::int64_t> kKeys = {1, 5, 9, 1000003, -4, 77};

// Worker w's gradients of `step` for kKeys: different per worker and step, never zero.
std::vector<float> grads(int w, std::int64_t step, int dim) {
  std::vector<float> g(kKeys.size() * static_cast<std::size_t>(dim));
  for (std::size_t i = 0; i < g.size(); ++i)
    g[i] = 0.01f * static_cast<float>((i % 7) + 1) * (w == 0 ? 1.0f : -0.5f) + 0.003f * static_cast<float>(step);
  return g;
}

void push_step(dp::PsShard& shard, const std::string& name, int workers, std::int64_t step, int dim) {
  for (int w = 0; w < workers; ++w) {
    const auto g = grads(w, step, dim);
    shard.push(name, w, step, kKeys, g.data(), g.size());
  }
}

// Every table of a job hears of every step; "other" with no keys.
void push_both(dp::PsShard& shard, int workers, std::int64_t step, int dim) {
  push_step(shard, "emb", workers, step, dim);
  for (int w = 0; w < workers; ++w) shard.push("other", w, step, {}, nullptr, 0);
}

std::vector<float> rows_now(dp::PsShard& shard, const std::string& name) {
  return shard.pull(name, kKeys, 0, -1, std::chrono::steady_clock::now());
}

std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(parameter_server_checkpoint)

BOOST_AUTO_TEST_CASE(restore_gives_back_the_rows_and_optimizer_state_of_the_checkpointed_step_bitwise) {
  for (auto mode : {dp::UpdateMode::Sync, dp::UpdateMode::Async}) {
    for (auto opt : {dp::SparseOptimizerKind::Adam, dp::SparseOptimizerKind::Adagrad}) {
      BOOST_TEST_CONTEXT(dp::update_mode_name(mode) << ", " << dp::sparse_optimizer_name(opt)) {
        TempFolder folder("shard");
        dp::PsShardConfig c;
        c.workers = 2;
        c.mode = mode;
        dp::PsShard shard(c);
        const int dim = 4;
        shard.create_table(table("emb", dim, opt));
        shard.create_table(table("other", 2, dp::SparseOptimizerKind::Sgd));
        for (std::int64_t step = 0; step < 3; ++step) push_both(shard, 2, step, dim);
        const auto at_3 = rows_now(shard, "emb");
        const auto files = shard.checkpoint(folder.path.string(), 3, std::chrono::steady_clock::now() + 5s);
        BOOST_TEST(files.size() == 3u);   // two tables and the manifest
        for (const auto& f : files) {
          const auto bytes = file_bytes(folder.path / f.path);
          BOOST_TEST(f.path.rfind("shard-0/", 0) == 0u, f.path);
          BOOST_TEST(static_cast<std::int64_t>(bytes.size()) == f.bytes);
          BOOST_TEST(f.checksum == checksum_hex(checksum64(bytes.data(), bytes.size())));
        }

        // Two more steps and rows the checkpoint never saw, then back to step 3.
        for (std::int64_t step = 3; step < 5; ++step) push_both(shard, 2, step, dim);
        const auto at_5 = rows_now(shard, "emb");
        BOOST_TEST(at_5 != at_3);
        shard.pull("emb", {424242, 515151}, 5, -1, std::chrono::steady_clock::now());
        shard.restore(folder.path.string());
        BOOST_TEST(rows_now(shard, "emb") == at_3);   // bitwise
        BOOST_TEST(shard.stats("emb").rows == static_cast<std::int64_t>(kKeys.size()));
        BOOST_TEST(shard.stats("emb").applied_through == 2);
        // A pull of step 3 that waits for step 2 answers at once.
        BOOST_CHECK_NO_THROW(shard.pull("emb", kKeys, 3, 1, std::chrono::steady_clock::now()));
        // The workers carry on at step 3, and the optimizer state came back too: the same two
        // steps again end where they ended before.
        for (std::int64_t step = 3; step < 5; ++step) push_both(shard, 2, step, dim);
        BOOST_TEST(rows_now(shard, "emb") == at_5);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(checkpoint_and_restore_over_thrift_leave_out_pushes_of_the_checkpointed_step) {
  TempFolder folder("thrift");
  test::PsTestServers ps(2, 2, dp::UpdateMode::Sync, kToken);
  dp::PsClient w0(ps.addresses, kToken, 0, 5000ms), w1(ps.addresses, kToken, 1, 5000ms);
  const int dim = 3;
  w0.create_table(table("emb", dim, dp::SparseOptimizerKind::Adam));
  std::vector<std::int64_t> keys;
  for (std::int64_t k = 0; k < 64; ++k) keys.push_back(k * 7919 + 3);
  auto g = [&](float scale, std::int64_t step) {
    std::vector<float> v(keys.size() * dim);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = scale * (0.01f + 0.001f * static_cast<float>(i % 13 + step));
    return v;
  };
  for (std::int64_t step = 0; step < 2; ++step) {
    w0.push("emb", dim, keys, g(1.0f, step), step);
    w1.push("emb", dim, keys, g(-2.0f, step), step);
  }
  const auto at_2 = w0.pull("emb", dim, keys, 2, 1);
  // Worker 1 is already at step 2; in sync mode its push waits for worker 0's and is no part of
  // the checkpoint of step 2.
  w1.push("emb", dim, keys, g(-2.0f, 2), 2);
  const auto files = w0.checkpoint(folder.path.string(), 2);
  BOOST_TEST(files.size() == 4u);   // per shard: the table and its manifest
  BOOST_TEST(files[0].path == "shard-0/emb.table");
  BOOST_TEST(files[1].path == "shard-0/manifest.json");
  BOOST_TEST(files[3].path == "shard-1/manifest.json");
  for (const auto& f : files) {
    const auto bytes = file_bytes(folder.path / f.path);
    BOOST_TEST(f.checksum == checksum_hex(checksum64(bytes.data(), bytes.size())), f.path);
  }
  w0.push("emb", dim, keys, g(1.0f, 2), 2);   // completes step 2
  const auto at_3 = w0.pull("emb", dim, keys, 3, 1);
  BOOST_TEST(at_3 != at_2);

  w0.restore(folder.path.string());
  BOOST_TEST(w0.pull("emb", dim, keys, 2, 1) == at_2);   // bitwise, and no wait
  for (const auto& s : w0.stats("emb")) BOOST_TEST(s.applied_through == 1);
  // Both workers push step 2 again (worker 1's first push of it is gone with the restore).
  w1.push("emb", dim, keys, g(-2.0f, 2), 2);
  w0.push("emb", dim, keys, g(1.0f, 2), 2);
  BOOST_TEST(w0.pull("emb", dim, keys, 3, 1) == at_3);
}

BOOST_AUTO_TEST_CASE(a_sync_checkpoint_waits_for_the_late_workers_push_of_the_step_before) {
  TempFolder folder("wait");
  dp::PsShardConfig c;
  c.workers = 2;
  c.mode = dp::UpdateMode::Sync;
  dp::PsShard shard(c);
  const int dim = 2;
  shard.create_table(table("emb", dim, dp::SparseOptimizerKind::Adagrad));
  push_step(shard, "emb", 2, 0, dim);
  const auto g0 = grads(0, 1, dim);
  shard.push("emb", 0, 1, kKeys, g0.data(), g0.size());   // worker 1's step 1 is missing

  const auto message = error_of([&] {
    shard.checkpoint(folder.path.string(), 2, std::chrono::steady_clock::now() + 200ms);
  });
  BOOST_TEST(message.find("shard 0, table 'emb': the checkpoint of step 2 waits for every worker's pushes of "
                          "step 1; behind: worker 1 (at 0)") != std::string::npos,
             message);

  std::atomic<bool> done{false};
  std::vector<dp::PsCheckpointFile> files;
  std::thread checkpoint([&] {
    files = shard.checkpoint(folder.path.string(), 2, std::chrono::steady_clock::now() + 10s);
    done = true;
  });
  std::this_thread::sleep_for(300ms);
  BOOST_TEST(!done.load());
  const auto g1 = grads(1, 1, dim);
  shard.push("emb", 1, 1, kKeys, g1.data(), g1.size());
  checkpoint.join();
  BOOST_TEST(done.load());
  const auto at_2 = rows_now(shard, "emb");

  dp::PsShard fresh(c);
  fresh.restore(folder.path.string());
  BOOST_TEST(rows_now(fresh, "emb") == at_2);
  BOOST_TEST(fresh.stats("emb").applied_through == 1);

  // A checkpoint of a step already applied is refused: it could not leave that step out.
  push_step(shard, "emb", 2, 2, dim);
  const auto late = error_of([&] { shard.checkpoint(folder.path.string(), 2, std::chrono::steady_clock::now()); });
  BOOST_TEST(late.find("the checkpoint of step 2 comes after step 2 was applied") != std::string::npos, late);
}

BOOST_AUTO_TEST_CASE(another_shard_count_or_a_damaged_file_is_refused_and_changes_nothing) {
  TempFolder folder("refused");
  const auto spec = table("emb", 4, dp::SparseOptimizerKind::Sgd);
  {
    test::PsTestServers two(2, 1, dp::UpdateMode::Sync, kToken);
    dp::PsClient client(two.addresses, kToken, 0, 5000ms);
    client.create_table(spec);
    client.push("emb", 4, kKeys, std::vector<float>(kKeys.size() * 4, 0.5f), 0);
    client.checkpoint(folder.path.string(), 1);
  }
  for (int shards : {1, 3}) {
    BOOST_TEST_CONTEXT(shards << " shards") {
      test::PsTestServers other(shards, 1, dp::UpdateMode::Sync, kToken);
      dp::PsClient client(other.addresses, kToken, 0, 5000ms);
      const auto message = error_of([&] { client.restore(folder.path.string()); });
      BOOST_TEST(message.find(folder.path.string() + " holds a parameter-server checkpoint of 2 shards; this job has " +
                              std::to_string(shards)) != std::string::npos,
                 message);
      BOOST_TEST(message.find('\n') == std::string::npos);
    }
  }
  BOOST_TEST(error_of([&] {
               dp::PsShard shard(dp::PsShardConfig{});
               shard.restore((folder.path / "nowhere").string());
             }).find("does not exist") != std::string::npos);

  // A table file cut short: restore names it, and the shard keeps what it had.
  test::PsTestServers two(2, 1, dp::UpdateMode::Sync, kToken);
  dp::PsClient client(two.addresses, kToken, 0, 5000ms);
  client.create_table(spec);
  client.push("emb", 4, kKeys, std::vector<float>(kKeys.size() * 4, -1.0f), 0);
  client.push("emb", 4, kKeys, std::vector<float>(kKeys.size() * 4, -1.0f), 1);
  const auto before = client.pull("emb", 4, kKeys, 2, 1);
  const auto damaged = folder.path / "shard-1" / "emb.table";
  fs::resize_file(damaged, fs::file_size(damaged) - 5);
  const auto message = error_of([&] { client.restore(folder.path.string()); });
  BOOST_TEST(message.find(damaged.string() + " holds ") != std::string::npos, message);
  BOOST_TEST(client.pull("emb", 4, kKeys, 2, 1) == before);
  // A file from elsewhere under the right name and size: the checksum catches it.
  {
    std::string bytes = file_bytes(folder.path / "shard-0" / "emb.table");
    bytes[bytes.size() / 2] ^= 0x5a;
    std::ofstream(folder.path / "shard-0" / "emb.table", std::ios::binary | std::ios::trunc) << bytes;
  }
  dp::PsShardConfig one;
  one.shards = 2;
  dp::PsShard shard0(one);
  const auto foreign = error_of([&] { shard0.restore(folder.path.string()); });
  BOOST_TEST(foreign.find("emb.table is damaged") != std::string::npos, foreign);
}

BOOST_AUTO_TEST_CASE(a_restored_shard_with_a_folder_comes_back_from_its_disk_as_restored) {
  TempFolder folder("persist");
  dp::PsShardConfig c;
  c.dir = (folder.path / "server").string();
  c.snapshot_every = 2;
  const auto ckpt = (folder.path / "ckpt").string();
  const auto crash = folder.path / "crash";
  std::vector<float> at_3;
  {
    dp::PsShard shard(c);
    shard.create_table(table("emb", 4, dp::SparseOptimizerKind::Adam));
    for (std::int64_t step = 0; step < 2; ++step) push_step(shard, "emb", 1, step, 4);
    const auto at_2 = rows_now(shard, "emb");
    shard.checkpoint(ckpt, 2, std::chrono::steady_clock::now() + 5s);
    for (std::int64_t step = 2; step < 5; ++step) push_step(shard, "emb", 1, step, 4);
    shard.create_table(table("later", 2, dp::SparseOptimizerKind::Sgd));
    shard.restore(ckpt);
    BOOST_TEST(rows_now(shard, "emb") == at_2);
    BOOST_TEST(error_of([&] { shard.stats("later"); }).find("unknown table 'later'") != std::string::npos);
    push_step(shard, "emb", 1, 2, 4);
    at_3 = rows_now(shard, "emb");
    // What a killed server leaves on disk.
    fs::copy(c.dir, crash, fs::copy_options::recursive);
  }
  c.dir = crash.string();
  dp::PsShard restarted(c);
  BOOST_TEST(rows_now(restarted, "emb") == at_3);
  BOOST_TEST(restarted.stats("emb").applied_through == 2);
  BOOST_TEST(error_of([&] { restarted.stats("later"); }).find("unknown table 'later'") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_write_ahead_log_that_cannot_be_reopened_refuses_pushes) {
  TempFolder folder("wal");
  dp::PsShardConfig c;
  c.dir = folder.path.string();
  c.snapshot_every = 1;   // a snapshot, and a fresh log, after every push
  dp::PsShard shard(c);
  shard.create_table(table("emb", 2, dp::SparseOptimizerKind::Sgd));
  const std::vector<float> g(kKeys.size() * 2, 0.25f);
  shard.push("emb", 0, 0, kKeys, g.data(), g.size());
  // A folder where the log was: the next snapshot cannot reopen it (even as root).
  const auto wal = folder.path / "emb.shard0.wal";
  fs::remove(wal);
  fs::create_directory(wal);
  BOOST_CHECK_NO_THROW(shard.push("emb", 0, 1, kKeys, g.data(), g.size()));   // logged to the open file, then snapshot
  const auto message = error_of([&] { shard.push("emb", 0, 2, kKeys, g.data(), g.size()); });
  BOOST_TEST(message.find("push of step 2 by worker 0 refused: cannot open the write-ahead log '" + wal.string() +
                          "': Is a directory") != std::string::npos,
             message);
  BOOST_TEST(shard.stats("emb").applied_through == 1);   // not applied
  BOOST_TEST(shard.stats("emb").pushes == 2);
  // Once the log can be opened again, pushes go on where they stopped.
  fs::remove(wal);
  BOOST_CHECK_NO_THROW(shard.push("emb", 0, 2, kKeys, g.data(), g.size()));
  BOOST_TEST(shard.stats("emb").applied_through == 2);
}

BOOST_AUTO_TEST_CASE(a_snapshot_taken_while_updates_create_rows_reads_back_every_row_it_wrote) {
  const auto spec = table("emb", 8, dp::SparseOptimizerKind::Adagrad);
  constexpr std::int64_t kRows = 200000;
  dp::ShardTable live(spec);
  std::atomic<bool> creating{true};
  std::thread puller([&] {   // rows are stored when first updated
    const std::vector<float> grad(8, 0.5f);
    for (std::int64_t k = 0; k < kRows; ++k) live.apply(&k, 1, grad.data());
    creating = false;
  });
  int snapshots = 0, torn = 0;
  while (creating) {
    std::stringstream bytes;
    live.write(bytes);
    dp::ShardTable back(spec);
    back.read(bytes, "snapshot " + std::to_string(snapshots));
    ++snapshots;
    // Every row written was read: nothing is left after the rows its count announced.
    if (bytes.peek() != EOF) ++torn;
  }
  puller.join();
  BOOST_TEST_MESSAGE(snapshots << " snapshots while rows were created");
  BOOST_TEST(snapshots > 1);
  BOOST_TEST(torn == 0, torn << " of " << snapshots << " snapshots wrote more rows than their count");
  BOOST_TEST(live.rows() == kRows);
  // Pulls store nothing: a key never updated reads as its initial row.
  std::vector<float> fresh(8), want(8);
  const std::int64_t never = kRows + 12345;
  live.pull(&never, 1, fresh.data());
  dp::initial_row(spec, never, want.data());
  BOOST_TEST(fresh == want);
  BOOST_TEST(live.rows() == kRows);
}

BOOST_AUTO_TEST_SUITE_END()
