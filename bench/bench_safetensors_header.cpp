// bench/bench_safetensors_header.cpp: load_safetensors on headers of many tensors.
//
// The header parser must be linear in the number of tensors: one checkpoint of a large model has
// tens of thousands of entries, and the parser it replaced was quadratic (40000 entries took 19 s).
// Each file holds N one-byte U8 tensors "t0" .. "t<N-1>", so the time is the header's: parsing the
// JSON, the duplicate-key and nesting checks, the entry checks, the tiling sort and N tiny tensors.
// The last column checks that all N tensors came back.
//
//   bench_safetensors_header [--quick] [--tensors N] [--reps N] [--json FILE]
//
// --tensors N times one size only; with --reps 1 the process's peak memory is the load's (the
// file is streamed out, not built in memory), e.g.
//   /usr/bin/time -v bench_safetensors_header --tensors 1000000 --reps 1   # "Maximum resident set size"
#include <ringgrad/ringgrad.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include <ringgrad/nn/safetensors.h>
#include "tools/cli/flags.h"

#ifndef RINGGRAD_BENCH_COMMIT
#define RINGGRAD_BENCH_COMMIT "unknown"
#endif

namespace rg = ringgrad;
namespace fs = std::filesystem;

namespace {

// A file of `count` one-byte tensors, written by hand in the same layout as save_safetensors'.
// Streamed to the file, the length prefix patched at the end: a 1M-tensor header is ~70 MB, and
// holding it here would hide the loader's own peak memory (--tensors, measured with time -v).
void write_many(const std::string& path, int64_t count) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << std::string(8, '\0') << '{';
  uint64_t header_bytes = 1;
  for (int64_t i = 0; i < count; ++i) {
    const std::string entry = (i ? ",\"t" : "\"t") + std::to_string(i) +
                              "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[" + std::to_string(i) + "," +
                              std::to_string(i + 1) + "]}";
    out << entry;
    header_bytes += entry.size();
  }
  out << '}';
  ++header_bytes;
  const std::string pad((8 - header_bytes % 8) % 8, ' ');
  out << pad << std::string(static_cast<size_t>(count), '\x01');
  header_bytes += pad.size();
  std::string prefix(8, '\0');
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>((header_bytes >> (8 * i)) & 0xff);
  out.seekp(0);
  out << prefix;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  int reps = 0;
  int tensors = 0;
  std::string json;
  rg::cli::FlagParser flags("bench_safetensors_header", "load_safetensors on headers of 1000 to 100000 tensors.");
  flags.add_bool("--quick", &quick, "up to 10000 tensors only");
  flags.add_int("--tensors", &tensors, "one size only: a header of N tensors", 1, 10'000'000).metavar("N");
  flags.add_int("--reps", &reps, "timed repetitions per size (the median is reported)", 1, 100).default_text("5");
  flags.add_string("--json", &json, "also write the rows as JSON").metavar("FILE");
  flags.parse(argc, argv);
  if (const std::string why = bench::unwritable_output({{"--json", json}}); !why.empty()) flags.exit_with_usage(why);
  if (reps == 0) reps = quick ? 3 : 5;

  const fs::path dir = fs::temp_directory_path() / ("ringgrad_bench_header_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::vector<int64_t> counts = tensors > 0 ? std::vector<int64_t>{tensors}
                                      : quick     ? std::vector<int64_t>{1000, 10000}
                                                  : std::vector<int64_t>{1000, 10000, 40000, 100000};
  bench::Table table(
      "load",
      {{"tensors", "", 9}, {"header", "MB", 8}, {"load", "ms", 9}, {"per tensor", "us", 10}, {"#wrong", "", 6}});
  int wrong_total = 0;
  for (const int64_t n : counts) {
    const std::string path = (dir / ("n" + std::to_string(n) + ".safetensors")).string();
    write_many(path, n);
    int64_t got = 0;
    const std::vector<double> ns = bench::time_per_call(
        [&] {
          const rg::nn::StateDict t = rg::nn::load_safetensors(path);
          got = static_cast<int64_t>(t.size());
        },
        reps, 0.05);
    const double ms = bench::median(ns) / 1e6;
    const int wrong = got == n ? 0 : 1;
    wrong_total += wrong;
    table.add_row({std::to_string(n), bench::fmt((fs::file_size(path) - 8 - n) / 1e6, 2), bench::fmt(ms, 1),
                   bench::fmt(ms * 1e3 / static_cast<double>(n), 2), std::to_string(wrong)});
  }
  fs::remove_all(dir);

  std::printf("# ringgrad bench_safetensors_header  reps=%d  commit=%s\n", reps, RINGGRAD_BENCH_COMMIT);
  std::printf("%s\n", bench::machine_header().c_str());
  std::printf("# N one-byte U8 tensors; load = median time of load_safetensors (header parse, checks, tensors)\n#\n");
  table.print(stdout);
  if (wrong_total) std::printf("# WRONG RESULTS: %d (see #wrong)\n", wrong_total);
  if (!json.empty() &&
      !bench::write_json(json, "bench_safetensors_header", {{"commit", RINGGRAD_BENCH_COMMIT}}, {&table})) {
    std::fprintf(stderr, "bench_safetensors_header: cannot write %s\n", json.c_str());
    return 1;
  }
  return wrong_total ? 1 : 0;
}
