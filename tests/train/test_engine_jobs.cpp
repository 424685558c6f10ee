// The engine's jobs as a user runs them: a program of one's own trains embedded and as one stage
// per process with the same losses (bitwise); ranks prove they run the same job; a middle stage
// reads no data; replicas of a batch-norm model agree; tied weights across processes; schedule
// files.
#include <cmath>
#include <filesystem>
#include <regex>
#include <fstream>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "tests/tools/background_command.h"
#include "tests/tools/cli_runner.h"
#include "tests/tools/job_outputs.h"

using pw::test::BackgroundCommand;
using pw::test::check_same;
using pw::test::free_port;
using pw::test::read_json;
using pw::test::run_pipewright;
using pw::test::ScratchDir;

namespace {

std::string binary(const std::string& name) {
  const char* d = std::getenv("PW_BIN_DIR");
  return std::string(d != nullptr ? d : "build/bin") + "/" + name;
}

std::string test_binary(const std::string& name) {
  return (std::filesystem::path(binary("")).parent_path().parent_path() / "tests" / name).string();
}

pw::test::CommandResult run(const std::string& command) { return pw::test::run_command(command); }

const std::string kResnet =
    "--model resnet18 --width 8 --dataset synthetic --synthetic-size 256 --batch-size 16 --optimizer sgd --lr 0.05 "
    "--seed 2 --threads 1 --eval-batches 4 --steps 4 --stages 2 --replicas 2 --micro-batches 2 ";

}  // namespace

BOOST_AUTO_TEST_SUITE(engine_jobs)

BOOST_AUTO_TEST_CASE(a_users_own_cnn_trains_the_same_embedded_and_as_four_processes) {
  ScratchDir dir("custom_cnn");
  const std::string args = " --steps 6 --batch-size 32";
  auto r = run(binary("example_custom_cnn") + args + " --summary " + dir.file("one.json") + " --save " +
               dir.file("one.safetensors"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  BOOST_TEST(read_json(dir.file("one.json"))["launcher"] == "threads");
  r = run_pipewright("launch --nproc-per-node 4 -- " + binary("example_custom_cnn") + args + " --summary " +
                     dir.file("four.json") + " --save " + dir.file("four.safetensors"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  BOOST_TEST(r.output.find("all 4 ranks finished") != std::string::npos, r.output);
  const auto four = read_json(dir.file("four.json"));
  BOOST_TEST(four["world_size"] == 4);
  BOOST_TEST(four["stages"] == 4);
  BOOST_TEST(four["model"] == "custom-cnn");
  check_same(dir, "one", "four");
}

// The step-by-step API in processes: each process feeds the same batches to its stage, and the
// losses are those of the job run as threads, bitwise; with the table on parameter servers too
// (a server run as a thread of the program, or one `pipewright ps serve` runs, reached by address).
BOOST_AUTO_TEST_CASE(a_program_feeding_its_own_batches_trains_the_same_embedded_and_as_two_processes) {
  ScratchDir dir("own_batches");
  const std::string program = binary("example_own_batches") + " --steps 8";
  auto r = run(program + " --losses " + dir.file("threads.json"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  r = run_pipewright("launch --nproc-per-node 2 -- " + program + " --losses " + dir.file("procs.json"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  const auto threads = read_json(dir.file("threads.json"));
  BOOST_REQUIRE_EQUAL(threads.size(), 8u);
  BOOST_TEST(threads == read_json(dir.file("procs.json")));
  BOOST_TEST(threads.back().get<double>() < threads.front().get<double>());

  // The table on a server: one the program runs as a thread, or one it reaches at its address.
  r = run(program + " --ps 1 --losses " + dir.file("ps_threads.json"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  BackgroundCommand server("env PW_JOB_TOKEN=ownbatches1-0123456 " + pw::test::pipewright_binary() +
                               " ps serve --mode sync --bind 127.0.0.1:0",
                           dir.file("server.log"));
  BOOST_REQUIRE_MESSAGE(server.wait_for_output("listening on", std::chrono::seconds(30)), server.output());
  std::smatch m;
  const auto log = server.output();
  BOOST_REQUIRE_MESSAGE(std::regex_search(log, m, std::regex("listening on ([0-9.]+:[0-9]+)")), log);
  r = run("env PW_JOB_TOKEN=ownbatches1-0123456 " + pw::test::pipewright_binary() + " launch --nproc-per-node 2 -- " + program +
          " --ps-servers " + m[1].str() + " --losses " + dir.file("ps_procs.json"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  BOOST_TEST(read_json(dir.file("ps_threads.json")) == read_json(dir.file("ps_procs.json")));
}

BOOST_AUTO_TEST_CASE(ranks_of_different_jobs_name_the_first_differing_field) {
  ScratchDir dir("mismatch");
  const std::string common = "env MASTER_ADDR=127.0.0.1 PW_JOB_TOKEN=0123456789abcdef SLURM_STEP_ID=0 SLURM_NTASKS=2 "
                             "MASTER_PORT=" + std::to_string(free_port()) + " SLURM_PROCID=";
  const std::string train = pw::test::pipewright_binary() +
                            " train --model seed-cnn --dataset synthetic --synthetic-size 256 --batch-size 16 --steps 2 "
                            "--stages 2 --threads 1 --startup-timeout 30 ";
  BackgroundCommand rank1(common + "1 " + train + "--lr 0.5", dir.file("rank1.log"));
  BackgroundCommand rank0(common + "0 " + train + "--lr 0.25", dir.file("rank0.log"));
  const auto s0 = rank0.wait(std::chrono::seconds(60));
  const auto s1 = rank1.wait(std::chrono::seconds(60));
  BOOST_REQUIRE(s0.has_value() && s1.has_value());
  BOOST_TEST(*s0 != 0);
  BOOST_TEST(*s1 != 0);
  for (const auto* log : {&rank0, &rank1}) {
    const auto out = log->output();
    // The library names the field by its path; pipewright train names the flag that sets it.
    const bool named = out.find("runs another job than rank 0 (--lr: 0.25 here, 0.5 there)") != std::string::npos ||
                       out.find("runs another job than rank 0 (--lr: 0.5 here, 0.25 there)") != std::string::npos;
    BOOST_TEST(named, out);
  }
}

// Rank 0 (the first stage) finds only the image files, the last stage only the label files, and
// the middle stage a folder that does not exist: each opens only what it feeds.
BOOST_AUTO_TEST_CASE(each_stage_opens_only_the_data_it_feeds) {
  ScratchDir dir("parts");
  const std::filesystem::path source = std::getenv("PW_FASHION_MNIST_DIR") ? std::getenv("PW_FASHION_MNIST_DIR")
                                                                           : "/usr/share/datasets/fashion-mnist";
  std::filesystem::create_directories(dir.file("images"));
  std::filesystem::create_directories(dir.file("labels"));
  for (const auto& entry : std::filesystem::directory_iterator(source)) {
    const auto name = entry.path().filename().string();
    const auto into = name.find("images") != std::string::npos ? "images" : "labels";
    std::filesystem::create_symlink(entry.path(), std::filesystem::path(dir.file(into)) / name);
  }
  const std::string job = "--model seed-cnn --batch-size 30 --steps 3 --stages 3 --threads 1 --eval-batches 2 ";
  const std::string common = "env MASTER_ADDR=127.0.0.1 PW_JOB_TOKEN=0123456789abcdef OMPI_COMM_WORLD_SIZE=3 "
                             "MASTER_PORT=" + std::to_string(free_port()) + " OMPI_COMM_WORLD_RANK=";
  const std::string train = pw::test::pipewright_binary() + " train " + job;
  BackgroundCommand rank2(common + "2 " + train + "--data-dir " + dir.file("labels"), dir.file("rank2.log"));
  BackgroundCommand rank1(common + "1 " + train + "--data-dir " + dir.file("nowhere"), dir.file("rank1.log"));
  BackgroundCommand rank0(common + "0 " + train + "--data-dir " + dir.file("images") + " --summary " +
                              dir.file("split.json"),
                          dir.file("rank0.log"));
  BOOST_REQUIRE_MESSAGE(rank0.wait(std::chrono::seconds(120)).value_or(-1) == 0, rank0.output());
  BOOST_REQUIRE_MESSAGE(rank1.wait(std::chrono::seconds(30)).value_or(-1) == 0, rank1.output());
  BOOST_REQUIRE_MESSAGE(rank2.wait(std::chrono::seconds(30)).value_or(-1) == 0, rank2.output());
  // The same job in one process, reading everything.
  const auto r = run_pipewright("train " + job + "--summary " + dir.file("whole.json"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  BOOST_TEST(read_json(dir.file("split.json"))["loss_history"] == read_json(dir.file("whole.json"))["loss_history"]);
  BOOST_TEST(read_json(dir.file("split.json"))["test_loss"] == read_json(dir.file("whole.json"))["test_loss"]);
}

BOOST_AUTO_TEST_CASE(replicas_of_a_batch_norm_model_agree_embedded_and_as_four_processes) {
  ScratchDir dir("bn");
  auto r = run_pipewright("train " + kResnet + "--summary " + dir.file("one.json") + " --save " +
                          dir.file("one.safetensors"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  r = run_pipewright("launch --nproc-per-node 4 -- " + kResnet + "--summary " + dir.file("four.json") + " --save " +
                     dir.file("four.safetensors"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  check_same(dir, "one", "four");
  // Synchronised statistics over the 2 replicas, as processes, equal one replica of 2 stages.
  r = run_pipewright("launch --nproc-per-node 4 -- " + kResnet + "--sync-batch-norm --summary " + dir.file("sync.json"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  std::string single = kResnet;
  single.replace(single.find("--replicas 2"), 12, "--replicas 1");
  r = run_pipewright("train " + single + "--sync-batch-norm --summary " + dir.file("single.json"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  const auto a = read_json(dir.file("single.json"))["loss_history"];
  const auto b = read_json(dir.file("sync.json"))["loss_history"];
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    BOOST_TEST(std::abs(a[i].get<double>() - b[i].get<double>()) / a[i].get<double>() <= 1e-5, "step " << i);
}

BOOST_AUTO_TEST_CASE(weights_tied_across_processes_train_as_embedded) {
  ScratchDir dir("tied");
  const std::string program = test_binary("tied_mlp_job");
  auto r = run(program + " --summary " + dir.file("one.json") + " --save " + dir.file("one.safetensors"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  r = run_pipewright("launch --nproc-per-node 2 -- " + program + " --summary " + dir.file("two.json") + " --save " +
                     dir.file("two.safetensors"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  check_same(dir, "one", "two");
  const auto one = read_json(dir.file("one.json"));
  BOOST_TEST(one["stages"] == 2);
}

BOOST_AUTO_TEST_CASE(a_schedule_file_trains_like_the_schedule_it_spells) {
  ScratchDir dir("schedfile");
  const std::string job = "train --model seed-cnn --dataset synthetic --synthetic-size 256 --batch-size 16 --optimizer "
                          "sgd --lr 0.05 --seed 4 --threads 1 --steps 4 --stages 2 --micro-batches 2 --split 3 ";
  // GPipe written by hand: all forwards, then all backwards.
  std::ofstream(dir.file("gpipe.sched")) << "# gpipe, 2 stages, 2 micro-batches\n"
                                            "F0 sA0 F1 sA1 rG0 B0 rG1 B1 RG S\n"
                                            "rA0 F0 rA1 F1 B0 sG0 B1 sG1 RG S\n";
  auto r = run_pipewright(job + "--summary " + dir.file("plain.json"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  r = run_pipewright(job + "--schedule-file " + dir.file("gpipe.sched") + " --summary " + dir.file("file.json"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  const auto a = read_json(dir.file("plain.json"))["loss_history"];
  const auto b = read_json(dir.file("file.json"))["loss_history"];
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    BOOST_TEST(std::abs(a[i].get<double>() - b[i].get<double>()) / a[i].get<double>() <= 1e-5);
  // A program that lost an instruction is refused before anything runs, naming the line.
  std::ofstream(dir.file("bad.sched")) << "F0 sA0 F1 sA1 rG0 B0 rG1 B1 RG S\n"
                                          "rA0 F0 rA1 F1 B0 sG0 sG1 RG S\n";
  r = run_pipewright(job + "--schedule-file " + dir.file("bad.sched"));
  BOOST_TEST(r.status == 2);
  BOOST_TEST(r.output.find("bad.sched:2: stage 1") != std::string::npos, r.output);
}

// Every zero-bubble schedule new with issue 28, in bf16: as two processes bitwise as embedded, a run resumed from a
// checkpoint bitwise as one that ran through, and within 1e-5 of 1F1B.
BOOST_AUTO_TEST_CASE(zero_bubble_schedules_in_bf16_train_alike_in_processes_and_across_a_resume) {
  ScratchDir dir("zbjobs");
  const auto job = [](const std::string& schedule, int steps) {
    return "train --model seed-cnn --dataset synthetic --synthetic-size 256 --batch-size 32 --optimizer adam "
           "--lr 0.01 --seed 3 --threads 1 --eval-batches 2 --stages 2 --micro-batches 4 --precision bf16 --schedule " +
           schedule + " --steps " + std::to_string(steps) + " ";
  };
  auto r = run_pipewright(job("1f1b", 4) + "--summary " + dir.file("1f1b.json"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  const auto reference = read_json(dir.file("1f1b.json"))["loss_history"];
  for (const std::string schedule : {"zb-h2", "zb-v", "v-half", "v-min", "interleaved-zb", "dualpipev"}) {
    BOOST_TEST_CONTEXT(schedule) {
      const std::string out = " --summary " + dir.file(schedule + "_one.json") + " --save " +
                              dir.file(schedule + "_one.safetensors");
      r = run_pipewright(job(schedule, 4) + out);
      BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
      r = run_pipewright("launch --nproc-per-node 2 -- " + binary("pipewright") + " " + job(schedule, 4) + " --summary " +
                         dir.file(schedule + "_two.json") + " --save " + dir.file(schedule + "_two.safetensors"));
      BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
      check_same(dir, schedule + "_one", schedule + "_two");
      // Two steps, a checkpoint, then the other two from it.
      const std::string ckpt = " --checkpoint-dir " + dir.file(schedule + "_ckpt") + " --checkpoint-every 2";
      r = run_pipewright(job(schedule, 2) + ckpt);
      BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
      r = run_pipewright(job(schedule, 4) + ckpt + " --resume " + dir.file(schedule + "_ckpt") + " --summary " +
                         dir.file(schedule + "_resumed.json") + " --save " + dir.file(schedule + "_resumed.safetensors"));
      BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
      const auto one = read_json(dir.file(schedule + "_one.json"));
      const auto resumed = read_json(dir.file(schedule + "_resumed.json"));
      BOOST_TEST(one["loss_history"] == resumed["loss_history"]);
      BOOST_TEST(pw::test::read_file(dir.file(schedule + "_one.safetensors")) ==
                 pw::test::read_file(dir.file(schedule + "_resumed.safetensors")));
      const auto losses = one["loss_history"];
      BOOST_REQUIRE_EQUAL(losses.size(), reference.size());
      for (std::size_t i = 0; i < losses.size(); ++i)
        BOOST_TEST(std::abs(losses[i].get<double>() - reference[i].get<double>()) <=
                   1e-5 * std::abs(reference[i].get<double>()));
    }
  }
}

BOOST_AUTO_TEST_CASE(interleaved_takes_two_chunks_unless_told) {
  ScratchDir dir("chunks");
  const auto r = run_pipewright("train --model seed-cnn --dataset synthetic --synthetic-size 256 --batch-size 16 "
                                "--threads 1 --steps 2 --stages 2 --micro-batches 4 --schedule interleaved --summary " +
                                dir.file("s.json"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  BOOST_TEST(read_json(dir.file("s.json"))["chunks"] == 2);
}

BOOST_AUTO_TEST_CASE(bad_engine_input_gets_one_line_errors) {
  ScratchDir dir("badengine");
  const std::string job = "train --model seed-cnn --dataset synthetic --synthetic-size 64 --batch-size 16 --threads 1 "
                          "--steps 1 --stages 2 ";
  std::ofstream(dir.file("gpipe.sched")) << "F0 sA0 F1 sA1 rG0 B0 rG1 B1 RG S\nrA0 F0 rA1 F1 B0 sG0 B1 sG1 RG S\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {job + "--schedule-file " + dir.file("gpipe.sched") + " --recompute all",
       "--recompute: all with --schedule-file: a schedule file says where it recomputes with its own R instructions"},
      {job + "--schedule-file " + dir.file("missing.sched"), "cannot open schedule file '" + dir.file("missing.sched")},
      {"launch --nproc-per-node 2 -- " + job + "--devices cpu:0", "--devices: 1 devices for 2 stages"},
  };
  for (const auto& [args, expected] : cases) {
    const auto r = run_pipewright(args);
    BOOST_TEST_CONTEXT(args) {
      BOOST_TEST(r.status != 0);
      BOOST_TEST(r.output.find(expected) != std::string::npos, r.output);
      BOOST_TEST(r.output.find("internal error") == std::string::npos, r.output);
    }
  }
  const auto r = run(binary("example_custom_cnn") + " --replicas 0");
  BOOST_TEST(r.status != 0);
  BOOST_TEST(r.output.find("--replicas: Value 0 not in range 1 to 64") != std::string::npos, r.output);
}

BOOST_AUTO_TEST_SUITE_END()
