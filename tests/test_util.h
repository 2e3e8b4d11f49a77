// tests/test_util.h: helpers shared by the test files.
//
//   CHECK_ERROR(expr, "piece", ...)  expr throws ringgrad::Error whose message contains every piece
//   TempDir                          a fresh folder for files a test writes, removed at scope exit
#pragma once

#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <ringgrad/core/base/error.h>
#include <ringgrad/core/gradcheck.h>

namespace ringgrad::test {

namespace fs = std::filesystem;

// Matches a ringgrad::Error whose message contains every one of the given pieces. The checks look
// for the pieces a reader needs, not for one exact sentence, so the wording may improve freely.
class MessageContainsAll : public Catch::MatcherBase<Error> {
 public:
  explicit MessageContainsAll(std::vector<std::string> pieces) : pieces_(std::move(pieces)) {}
  bool match(const Error& e) const override {
    const std::string what = e.what();
    for (const std::string& p : pieces_)
      if (what.find(p) == std::string::npos) return false;
    return true;
  }
  std::string describe() const override {
    std::ostringstream os;
    os << "has a message containing all of:";
    for (const std::string& p : pieces_) os << " \"" << p << "\"";
    return os.str();
  }

 private:
  std::vector<std::string> pieces_;
};

// A whole file's bytes ("" when it cannot be read), and a file replaced by `bytes`.
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}
inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A fresh folder under the system's temp dir, removed with everything in it at scope exit. The name
// holds the process id and a counter, so tests running in parallel processes never share a folder.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ =
        fs::temp_directory_path() / ("ringgrad_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;  // a destructor must not throw; a leftover folder is harmless
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;  // two owners would remove the folder twice
  TempDir& operator=(const TempDir&) = delete;

  std::string str() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  // The names of the entries in the folder, in directory order.
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(path_)) names.push_back(e.path().filename().string());
    return names;
  }

 private:
  fs::path path_;
};

}  // namespace ringgrad::test

// CHECK_ERROR(expr, "piece", ...): expr throws ringgrad::Error and the message contains every piece.
#define CHECK_ERROR(expr, ...) \
  CHECK_THROWS_MATCHES(expr, ::ringgrad::Error, ::ringgrad::test::MessageContainsAll({__VA_ARGS__}))

// CHECK_GRADCHECK(fn, inputs): gradcheck passes, and its report (input index, element, analytic and
// numeric values) is printed when it does not.
#define CHECK_GRADCHECK(...)                                            \
  do {                                                                  \
    const ::ringgrad::GradcheckResult result_ = gradcheck(__VA_ARGS__); \
    INFO(result_);                                                      \
    CHECK(result_.ok);                                                  \
  } while (false)
