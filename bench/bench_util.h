// bench/bench_util.h: what every benchmark shares -- timing loops, medians, the project's benchmark
// tables (printed, and written as JSON by --json), and running a helper process.
//
// Timing method (the Python references use the same one): a warm-up loop that is never timed grows
// the iteration count until one loop takes at least `min_seconds`; then `reps` loops of that count
// are timed and each gives a time per call. Report the median of those.
#pragma once

#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <initializer_list>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench_commit.h"              // RINGGRAD_BENCH_COMMIT, generated at build time (bench_commit.cmake)
#include <ringgrad/kernels/backend.h>  // cpu_gemm_build: what ringgrad's GEMM was compiled for
#include <ringgrad/nn/file_io.h>       // write_output: results are replaced atomically, like checkpoints

#ifndef RINGGRAD_BENCH_DIR  // set by bench/CMakeLists.txt: where the PyTorch reference scripts are
#define RINGGRAD_BENCH_DIR "bench"
#endif

namespace bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

inline double median(std::vector<double> values) {
  if (values.empty()) return NAN;
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

// Nanoseconds per call of fn(), one value per repetition (see the method above).
template <typename F>
std::vector<double> time_per_call(F&& fn, int reps, double min_seconds) {
  int64_t iters = 1;
  for (;;) {  // warm-up and calibration, not timed
    const auto start = Clock::now();
    for (int64_t i = 0; i < iters; ++i) fn();
    const double s = seconds_since(start);
    if (s >= min_seconds) break;
    const double want = s > 0 ? iters * 1.2 * min_seconds / s : iters * 100.0;
    iters = std::max<int64_t>(iters * 2, std::min<int64_t>(iters * 100, static_cast<int64_t>(want)));
  }
  std::vector<double> ns;
  for (int r = 0; r < reps; ++r) {
    const auto start = Clock::now();
    for (int64_t i = 0; i < iters; ++i) fn();
    ns.push_back(seconds_since(start) * 1e9 / static_cast<double>(iters));
  }
  return ns;
}

// n values uniform in [-1, 1) from a fixed seed: the same inputs in every run and every program.
inline std::vector<float> seeded_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& e : v) e = dist(rng);
  return v;
}

// Makes `p` look used to the optimiser, so the work that produced it is not dropped.
inline void do_not_optimize(const void* p) { asm volatile("" : : "r"(p) : "memory"); }

// printf-style number formatting; NaN (= not measured) prints as "-".
inline std::string fmt(double value, int precision = 1) {
  if (std::isnan(value)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", precision, value);
  return buf;
}

struct Column {
  std::string name, unit;  // unit without parentheses, or "" for none
  int width = 10;
  bool left = false;  // text columns read better left-aligned
};

// One benchmark table: '#' header lines, units in the second header row, one row per
// measurement, the result check in the last column.
class Table {
 public:
  Table(std::string id, std::vector<Column> columns) : id_(std::move(id)), columns_(std::move(columns)) {}

  void add_row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  bool empty() const { return rows_.empty(); }

  void print(FILE* out) const {
    std::vector<std::string> names, units;
    bool any_unit = false;
    for (const Column& c : columns_) {
      names.push_back(c.name);
      units.push_back(c.unit.empty() ? "" : "(" + c.unit + ")");
      any_unit = any_unit || !c.unit.empty();
    }
    line(out, "#", names);
    if (any_unit) line(out, "#", units);
    for (const auto& row : rows_) line(out, " ", row);
  }

  // Rows as JSON objects keyed by column name, with "table": id. Cells that read as numbers are
  // written as numbers, "-" as null, anything else as a string.
  void append_json(std::string& out, bool& first) const {
    for (const auto& row : rows_) {
      out += first ? "\n  " : ",\n  ";
      first = false;
      out += "{\"table\": " + quote(id_);
      for (size_t i = 0; i < columns_.size() && i < row.size(); ++i)
        out += ", " + quote(columns_[i].name) + ": " + json_value(row[i]);
      out += "}";
    }
  }

  static std::string quote(const std::string& s) {
    std::string q = "\"";
    for (char ch : s) {
      if (ch == '"' || ch == '\\') q += '\\';
      if (static_cast<unsigned char>(ch) < 0x20) ch = ' ';
      q += ch;
    }
    return q + "\"";
  }

 private:
  void line(FILE* out, const char* lead, const std::vector<std::string>& cells) const {
    std::string s = lead;
    for (size_t i = 0; i < columns_.size(); ++i) {
      const std::string cell = i < cells.size() ? cells[i] : "";
      const int pad = std::max(0, columns_[i].width - static_cast<int>(cell.size()));
      s += "  ";
      s += columns_[i].left ? cell + std::string(pad, ' ') : std::string(pad, ' ') + cell;
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    std::fprintf(out, "%s\n", s.c_str());
  }

  static std::string json_value(const std::string& cell) {
    if (cell == "-" || cell.empty()) return "null";
    char* end = nullptr;
    const double v = std::strtod(cell.c_str(), &end);
    if (end && *end == '\0' && std::isfinite(v) && cell.find_first_of("xX") == std::string::npos) return cell;
    return quote(cell);
  }

  std::string id_;
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

// "" when every output file named (flag, path) could be written, else why not, for the flag parser's
// exit_with_usage(): checked right after the flags, so that a benchmark's minutes are not spent on results that
// cannot be saved (a missing folder, a device, a directory). Empty paths are outputs not asked for.
inline std::string unwritable_output(std::initializer_list<std::pair<const char*, std::string>> outputs) {
  for (const auto& [flag, path] : outputs) {
    if (path.empty()) continue;
    try {
      ringgrad::nn::check_writable(flag, path);
    } catch (const std::exception& e) {
      return e.what();
    }
  }
  return "";
}

// Writes a result file the way the library writes checkpoints (nn/file_io.h): a temporary beside it,
// renamed over it, through symlinks, refusing a FIFO, device or directory -- so an interrupted run
// never leaves half a JSON behind. On failure prints why on stderr and returns false.
inline bool write_output(const std::string& path, const std::string& bytes) {
  try {
    ringgrad::nn::write_file_atomically("writing results", path, bytes);
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return false;
  }
}

// Writes {"program": ..., "run": {key: value ...}, "rows": [...]} to `path`; false on failure.
inline bool write_json(const std::string& path, const std::string& program,
                       const std::vector<std::pair<std::string, std::string>>& run,
                       const std::vector<const Table*>& tables) {
  std::string out = "{\"program\": " + Table::quote(program) + ",\n \"run\": {";
  for (size_t i = 0; i < run.size(); ++i)
    out += (i ? ", " : "") + Table::quote(run[i].first) + ": " + Table::quote(run[i].second);
  out += "},\n \"rows\": [";
  bool first = true;
  for (const Table* t : tables) t->append_json(out, first);
  out += "\n]}\n";
  return write_output(path, out);
}

// The processor's model as lscpu names it (/proc/cpuinfo's "model name"; "unknown" elsewhere): the
// CPU under these machines changes, and a number holds only for the one it was measured on.
inline std::string cpu_model() {
  std::FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (f == nullptr) return "unknown";
  char line[512];
  std::string model = "unknown";
  while (std::fgets(line, sizeof line, f) != nullptr) {
    const std::string text = line;
    if (text.rfind("model name", 0) != 0) continue;
    const size_t colon = text.find(':');
    if (colon != std::string::npos) model = text.substr(colon + 1);
    break;
  }
  std::fclose(f);
  const size_t first = model.find_first_not_of(" \t"), last = model.find_last_not_of(" \t\n");
  return first == std::string::npos ? "unknown" : model.substr(first, last - first + 1);
}

// "# cpu: <model>, <n> logical CPUs; ringgrad's CPU kernels: <level>": the first header line of
// every benchmark that times the CPU.
inline std::string machine_header() {
  return "# cpu: " + cpu_model() + ", " + std::to_string(std::thread::hardware_concurrency()) +
         " logical CPUs; ringgrad's CPU kernels: " + ringgrad::kernels::cpu_kernels_chosen();
}

// The header line naming what ringgrad's CPU GEMM was built for (Eigen's version and SIMD sets, -march):
// a comparison of products is only read right beside it.
inline std::string cpu_gemm_header() { return "# ringgrad cpu gemm: " + ringgrad::kernels::cpu_gemm_build(); }

// Prints the BLAS lines of a PyTorch reference script (bench/torch_common.py's blas_report: keys
// blas, blas_core, blas_core_choice, blas_core_probe, blas_warning) as header lines. A warning is
// printed in capitals: a ratio against a handicapped peer must not pass unnoticed.
inline void print_peer_blas(FILE* out, const std::map<std::string, std::string>& kv, const char* peer = "pytorch") {
  for (const char* key : {"blas", "blas_core", "blas_core_choice", "blas_core_probe"}) {
    const auto it = kv.find(key);
    if (it != kv.end()) std::fprintf(out, "# %s %s: %s\n", peer, key, it->second.c_str());
  }
  const auto warning = kv.find("blas_warning");
  if (warning != kv.end()) std::fprintf(out, "# WARNING, %s BLAS: %s\n", peer, warning->second.c_str());
}

// One line for a JSON "run" entry: the peer's BLAS library and core.
inline std::string peer_blas_summary(const std::map<std::string, std::string>& kv) {
  const auto lib = kv.find("blas"), core = kv.find("blas_core"), warning = kv.find("blas_warning");
  std::string s = lib == kv.end() ? "unknown" : lib->second;
  if (core != kv.end()) s += ", core " + core->second;
  if (warning != kv.end()) s += "; WARNING: " + warning->second;
  return s;
}

// Runs `command` through /bin/sh; its stdout goes to `output`. Returns the exit status (127: the
// shell did not find the program, -1: it could not be started or was killed by a signal).
inline int run_command(const std::string& command, std::string& output) {
  output.clear();
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return -1;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) output.append(buf, n);
  const int status = pclose(pipe);
  return status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Single-quotes `s` for /bin/sh.
inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

// Runs a reference script that answers in "key value" lines (bench/torch_*.py): `python script args`,
// stderr merged. Returns the lines as a map, or an empty map and `why` saying why there is nothing
// (the script's own "error ..." line, a missing interpreter, or its exit status and last line).
inline std::map<std::string, std::string> run_key_value_script(const std::string& python, const std::string& script,
                                                               const std::string& args, std::string& why) {
  std::map<std::string, std::string> kv;
  std::string output;
  const int status = run_command(shell_quote(python) + " " + shell_quote(script) + " " + args + " 2>&1", output);
  std::istringstream lines(output);
  std::string line, last;
  while (std::getline(lines, line)) {
    if (!line.empty()) last = line;
    const size_t space = line.find(' ');
    if (space != std::string::npos) kv[line.substr(0, space)] = line.substr(space + 1);
  }
  if (status == 0) return kv;
  if (kv.count("error"))
    why = kv["error"];
  else if (status == 127)
    why = python + " not found";
  else
    why = python + " " + script + " exited with status " + std::to_string(status) + ": " + last;
  return {};
}

}  // namespace bench
