// tests/nn/test_file_io.cpp: what a save or a load does with whatever its path names.
//
// A save never replaces a FIFO, a device, a socket or a directory (the file left there must be what
// it was), writes through a symlink to its target, and removes the temporaries of writers that died
// -- only those. A load of anything but a regular file fails at once instead of blocking.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <string>
#include <vector>

#include <ringgrad/core/base/error.h>
#include <ringgrad/core/ops.h>
#include <ringgrad/core/tensor.h>
#include <ringgrad/nn/file_io.h>
#include <ringgrad/nn/safetensors.h>
#include "test_util.h"

using namespace ringgrad;
using Catch::Matchers::Contains;
using ringgrad::test::TempDir;
namespace fs = std::filesystem;

namespace {

using ringgrad::test::read_file;
using ringgrad::test::write_file;

nn::StateDict one_tensor(float value) { return {{"x", from_vector<float>({value})}}; }

float saved_value(const std::string& path) { return nn::load_safetensors(path).at("x").to_vector<float>()[0]; }

mode_t mode_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return st.st_mode;
}

// The pid of a process that has exited and been reaped: no process has it now (a new one could be
// given it later, but not within the few milliseconds a test needs it).
pid_t dead_pid() {
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) ::_exit(0);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  return child;
}

// Makes `path` look an hour old: older than the grace period in which a temporary is never
// taken for a dead writer's.
void age(const std::string& path) {
  fs::last_write_time(path, fs::file_time_type::clock::now() - std::chrono::hours(1));
}

// Captures what the process writes to stderr while it lives.
class StderrCapture {
 public:
  explicit StderrCapture(std::string path) : path_(std::move(path)) {
    std::fflush(stderr);
    saved_ = ::dup(2);
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fd, 2);
    ::close(fd);
  }
  ~StderrCapture() { restore(); }
  std::string text() {
    restore();
    return read_file(path_);
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
  }
  std::string path_;
  int saved_ = -1;
};

}  // namespace

TEST_CASE("file_io: a save refuses a FIFO or a directory or a socket and leaves it as it was", "[safetensors]") {
  TempDir dir;
  const std::string fifo = dir.file("pipe"), folder = dir.file("folder"), sock = dir.file("sock");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  fs::create_directory(folder);
  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(s >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  REQUIRE(sock.size() < sizeof addr.sun_path);
  std::strcpy(addr.sun_path, sock.c_str());
  REQUIRE(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);

  CHECK_THROWS_WITH(nn::save_safetensors(fifo, one_tensor(1)),
                    Contains("save_safetensors: '" + fifo + "' is a FIFO") && Contains("refusing to replace it"));
  CHECK_THROWS_WITH(nn::save_safetensors(folder, one_tensor(1)), Contains("'" + folder + "' is a directory"));
  CHECK_THROWS_WITH(nn::save_safetensors(sock, one_tensor(1)), Contains("'" + sock + "' is a socket"));
  // Through a symlink, the message names both.
  fs::create_symlink("pipe", dir.file("link_to_pipe"));
  CHECK_THROWS_WITH(nn::save_safetensors(dir.file("link_to_pipe"), one_tensor(1)),
                    Contains("link_to_pipe") && Contains("the target of its symlink") && Contains("a FIFO"));

  CHECK(S_ISFIFO(mode_of(fifo)));
  CHECK(S_ISDIR(mode_of(folder)));
  CHECK(S_ISSOCK(mode_of(sock)));
  CHECK(S_ISLNK(mode_of(dir.file("link_to_pipe"))));
  CHECK(fs::is_empty(folder));
  ::close(s);
  // No temporary left behind.
  for (const std::string& name : dir.entries()) CHECK(name.find(".tmp.") == std::string::npos);
}

TEST_CASE("file_io: check_writable finds before the work what a save would refuse, and accepts what it takes",
          "[safetensors]") {
  TempDir dir;
  const std::string fifo = dir.file("pipe"), folder = dir.file("folder"), existing = dir.file("old.ckpt");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  fs::create_directory(folder);
  std::ofstream(existing) << "old";
  // What a save takes: a new name in a folder, an existing regular file, a symlink to a new name.
  CHECK_NOTHROW(nn::check_writable("--save", dir.file("new.ckpt")));
  CHECK_NOTHROW(nn::check_writable("--save", existing));
  fs::create_symlink("later.ckpt", dir.file("link_to_new"));
  CHECK_NOTHROW(nn::check_writable("--save", dir.file("link_to_new")));
  // What it refuses, each named.
  CHECK_THROWS_WITH(nn::check_writable("--save", folder + "/missing/run.ckpt"),
                    Contains("--save: cannot write '" + folder + "/missing/run.ckpt': its folder '" + folder +
                             "/missing' does not exist"));
  CHECK_THROWS_WITH(nn::check_writable("--save", existing + "/run.ckpt"),
                    Contains("--save: cannot inspect '" + existing + "/run.ckpt' (Not a directory)"));
  CHECK_THROWS_WITH(nn::check_writable("--save", fifo), Contains("--save: '" + fifo + "' is a FIFO"));
  CHECK_THROWS_WITH(nn::check_writable("--save", folder), Contains("'" + folder + "' is a directory"));
  CHECK_THROWS_WITH(nn::check_writable("--save", "/dev/null"), Contains("is a character device"));
  CHECK_THROWS_WITH(nn::check_writable("--save", ""), Contains("--save: expected a file name, got an empty one"));
  if (::geteuid() != 0) {  // root may write any folder
    fs::permissions(folder, fs::perms::owner_read | fs::perms::owner_exec);
    CHECK_THROWS_WITH(nn::check_writable("--save", folder + "/run.ckpt"),
                      Contains("the folder '" + folder + "' does not let this process create files"));
    fs::permissions(folder, fs::perms::owner_all);
  }
  // Nothing was created.
  CHECK(fs::is_empty(folder));
  CHECK(!fs::exists(dir.file("new.ckpt")));
  CHECK(S_ISFIFO(mode_of(fifo)));
}

TEST_CASE("file_io: a save to /dev/null is refused and /dev/null stays a character device", "[safetensors]") {
  // Only root could replace /dev/null; as anyone else the rename fails anyway, so the check runs
  // either way, and the device is checked afterwards.
  struct stat before {};
  REQUIRE(::stat("/dev/null", &before) == 0);
  REQUIRE(S_ISCHR(before.st_mode));
  CHECK_THROWS_WITH(nn::save_safetensors("/dev/null", one_tensor(1)),
                    Contains("save_safetensors: '/dev/null' is a character device"));
  struct stat after {};
  REQUIRE(::lstat("/dev/null", &after) == 0);
  CHECK(S_ISCHR(after.st_mode));
  CHECK(after.st_rdev == before.st_rdev);
  CHECK(after.st_ino == before.st_ino);
}

TEST_CASE("file_io: a save through a symlink replaces the target and keeps the link", "[safetensors]") {
  TempDir dir;
  fs::create_directory(dir.file("store"));
  const std::string real = dir.file("store/real.safetensors");
  nn::save_safetensors(real, one_tensor(1));
  ::chmod(real.c_str(), 0640);
  fs::create_symlink("store/real.safetensors", dir.file("model.safetensors"));  // relative, as ln -s makes
  fs::create_symlink(dir.file("model.safetensors"), dir.file("latest"));        // a chain of two

  nn::save_safetensors(dir.file("latest"), one_tensor(2));
  CHECK(fs::is_symlink(dir.file("latest")));
  CHECK(fs::is_symlink(dir.file("model.safetensors")));
  CHECK(fs::read_symlink(dir.file("model.safetensors")) == "store/real.safetensors");
  CHECK(saved_value(real) == 2);
  CHECK(saved_value(dir.file("latest")) == 2);
  CHECK((mode_of(real) & 07777) == 0640);  // the new version keeps the old one's permissions
  // The temporary lived beside the target (same file system, so the rename is atomic) and is gone.
  std::vector<std::string> stored;
  for (const auto& e : fs::directory_iterator(dir.file("store"))) stored.push_back(e.path().filename().string());
  CHECK(stored == std::vector<std::string>{"real.safetensors"});

  SECTION("a dangling symlink: the save creates its target") {
    fs::create_symlink("store/fresh.safetensors", dir.file("fresh"));
    nn::save_safetensors(dir.file("fresh"), one_tensor(3));
    CHECK(fs::is_symlink(dir.file("fresh")));
    CHECK(saved_value(dir.file("store/fresh.safetensors")) == 3);
  }
  SECTION("a symlink loop is refused") {
    fs::create_symlink("b", dir.file("a"));
    fs::create_symlink("a", dir.file("b"));
    CHECK_THROWS_WITH(nn::save_safetensors(dir.file("a"), one_tensor(4)), Contains("levels of symbolic links"));
    CHECK(fs::is_symlink(dir.file("a")));
    CHECK(fs::is_symlink(dir.file("b")));
  }
}

TEST_CASE("file_io: loading a FIFO or a directory or a device fails at once instead of blocking", "[safetensors]") {
  TempDir dir;
  const std::string fifo = dir.file("pipe");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto load = std::async(std::launch::async, [&]() -> std::string {
    try {
      nn::load_safetensors(fifo);
      return "loaded";
    } catch (const Error& e) {
      return e.what();
    }
  });
  const bool in_time = load.wait_for(std::chrono::seconds(1)) == std::future_status::ready;
  if (!in_time) {
    // A loader stuck in open() is released by a writer that opens and closes the FIFO at once.
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  }
  const std::string message = load.get();
  CHECK(in_time);
  CHECK_THAT(message, Contains("load_safetensors: '" + fifo + "' is a FIFO") && Contains("not a regular file"));

  CHECK_THROWS_WITH(nn::load_safetensors("/dev/null"), Contains("'/dev/null' is a character device"));
  CHECK_THROWS_WITH(nn::load_safetensors(dir.str()), Contains("is a directory"));
  // A symlink to a regular file still loads.
  nn::save_safetensors(dir.file("real"), one_tensor(5));
  fs::create_symlink("real", dir.file("link"));
  CHECK(saved_value(dir.file("link")) == 5);
}

TEST_CASE("file_io: a save removes the temporaries of dead writers of the same target and nothing else",
          "[safetensors]") {
  TempDir dir;
  const std::string target = dir.file("run.ckpt");
  nn::save_safetensors(target, one_tensor(1));
  const std::string prefix = nn::temp_prefix_for(target);  // "<target>.tmp.<host>."
  const std::string dead = std::to_string(dead_pid()), alive = std::to_string(::getpid());
  const std::string hex = ".0123456789abcdef";
  const std::vector<std::string> stale = {prefix + dead + hex, prefix + dead + ".fedcba9876543210"};
  for (const std::string& f : stale) {
    write_file(f, std::string(4096, 'x'));
    age(f);
  }

  const std::vector<std::string> kept = {
      prefix + alive + hex,                           // its writer is alive (this process)
      target + ".tmp.some-other-host." + dead + hex,  // another machine's, on a shared file system
      target + ".tmp." + dead + hex,                  // no host in the name: unknown origin
      prefix + dead + ".0123",                        // not 16 hex digits
      prefix + dead + hex + ".bak",                   // more after the pattern
      prefix + "0" + dead + hex,                      // not the pid's own spelling
      dir.file("run.ckpt2") + ".tmp." + prefix.substr(target.size() + 5) + dead + hex,  // another target
      dir.file("other.ckpt"),
  };
  for (const std::string& f : kept) {
    write_file(f, "keep");
    age(f);
  }
  // A symlink and a directory that match the pattern are not files a writer left.
  const std::string link = prefix + dead + ".1111111111111111", folder = prefix + dead + ".2222222222222222";
  fs::create_symlink("other.ckpt", link);
  fs::create_directory(folder);
  // A file whose lock is held: a live writer in another pid namespace, whose pid means nothing here.
  const std::string locked = prefix + dead + ".3333333333333333";
  write_file(locked, "writing");
  age(locked);
  const int lock_fd = ::open(locked.c_str(), O_RDONLY);
  REQUIRE(lock_fd >= 0);
  REQUIRE(::flock(lock_fd, LOCK_EX) == 0);

  std::string said;
  {
    StderrCapture capture(dir.file("stderr.txt"));
    nn::save_safetensors(target, one_tensor(2));
    said = capture.text();
  }
  ::close(lock_fd);
  CHECK_THAT(said, Contains("save_safetensors: removed 2 stale temporary files of '" + target +
                            "' left by writers that died"));
  for (const std::string& f : stale) CHECK_FALSE(fs::exists(f));
  for (const std::string& f : kept) CHECK(read_file(f) == "keep");
  CHECK(fs::is_symlink(link));
  CHECK(fs::is_directory(folder));
  CHECK(read_file(locked) == "writing");
  CHECK(saved_value(target) == 2);

  // Once its lock is released, the locked one is stale too; after that, a save says nothing.
  {
    StderrCapture capture(dir.file("stderr.txt"));
    nn::save_safetensors(target, one_tensor(3));
    CHECK_THAT(capture.text(), Contains("removed 1 stale temporary file of '" + target + "'"));
  }
  CHECK_FALSE(fs::exists(locked));
  StderrCapture quiet(dir.file("stderr.txt"));
  nn::save_safetensors(target, one_tensor(4));
  CHECK(quiet.text() == "");
}

TEST_CASE("file_io: a dead writer's temporary younger than the grace period is left alone", "[safetensors]") {
  // The moment between a writer's open() and its flock() must not look like a dead writer's file.
  TempDir dir;
  const std::string target = dir.file("run.ckpt");
  const std::string fresh = nn::temp_prefix_for(target) + std::to_string(dead_pid()) + ".0123456789abcdef";
  write_file(fresh, "just created");
  nn::save_safetensors(target, one_tensor(1));
  CHECK(read_file(fresh) == "just created");
  age(fresh);
  nn::save_safetensors(target, one_tensor(2));
  CHECK_FALSE(fs::exists(fresh));
}

TEST_CASE("file_io: the host tag holds a hash of the whole host name", "[safetensors]") {
  // Pods "trainer-job-1234-worker-0" and "trainer-job-1234-worker-1" share more than the readable
  // part of the tag; only the hash tells their temporaries apart.
  const std::string prefix = nn::temp_prefix_for("/x/run.ckpt");
  REQUIRE(prefix.rfind("/x/run.ckpt.tmp.", 0) == 0);
  const std::string tag = prefix.substr(std::strlen("/x/run.ckpt.tmp."), prefix.size() - 1 - 16);
  const size_t dash = tag.rfind('-');
  REQUIRE(dash != std::string::npos);
  CHECK(tag.size() - dash - 1 == 12);
  CHECK(tag.find_first_not_of("0123456789abcdef", dash + 1) == std::string::npos);
  CHECK(dash <= 16);
}

TEST_CASE("file_io: a 240-byte file name saves, and its temporaries stay within NAME_MAX", "[safetensors]") {
  TempDir dir;
  const std::string base(240, 'm'), target = dir.file(base);
  nn::save_safetensors(target, one_tensor(1));
  CHECK(saved_value(target) == 1);
  CHECK(dir.entries() == std::vector<std::string>{base});
  // The longest temporary name: the prefix, a 9-digit pid, '.', 16 hex digits.
  const std::string prefix = nn::temp_prefix_for(target);
  CHECK(fs::path(prefix).filename().string().size() + 9 + 1 + 16 <= 255);
  // Another long name that shares all but its last byte has its own prefix, and the cleanup of one
  // never touches the other's temporaries.
  const std::string other = dir.file(std::string(239, 'm') + "n");
  CHECK(nn::temp_prefix_for(other) != prefix);
  const std::string dead = std::to_string(dead_pid());
  const std::string mine = prefix + dead + ".0123456789abcdef";
  const std::string theirs = nn::temp_prefix_for(other) + dead + ".0123456789abcdef";
  write_file(mine, "stale");
  write_file(theirs, "stale");
  age(mine);
  age(theirs);
  nn::save_safetensors(target, one_tensor(2));
  CHECK_FALSE(fs::exists(mine));
  CHECK(fs::exists(theirs));
  CHECK(saved_value(target) == 2);
}

TEST_CASE("file_io: a name too long for the file system is reported as such", "[safetensors]") {
  TempDir dir;
  // A 256-byte base name is over NAME_MAX itself.
  CHECK_THROWS_WITH(nn::save_safetensors(dir.file(std::string(256, 'n')), one_tensor(1)),
                    Contains("File name too long") && Contains("a file name holds at most 255 bytes"));
  // A path that fits PATH_MAX while its temporary's does not.
  std::string deep = dir.str();
  while (deep.size() < 4000) {
    deep += "/" + std::string(200, 'd');
    fs::create_directory(deep);
  }
  const std::string target = deep + "/" + std::string(4090 - deep.size(), 'f');
  try {
    nn::save_safetensors(target, one_tensor(1));
    FAIL("the save should have failed");
  } catch (const Error& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Contains("cannot create the temporary file") && Contains("File name too long") &&
                         Contains("a path 4095"));
    CHECK_THAT(what, !Contains("does the directory"));
  }
  CHECK_FALSE(fs::exists(target));
}

TEST_CASE("file_io: a save does not follow another user's symlink in a sticky world-writable folder", "[safetensors]") {
  // The kernel's protected_symlinks rule, which the save's own walk of the symlink chain must keep:
  // otherwise another user's /tmp/model.safetensors -> /home/victim/notes.txt replaces notes.txt.
  if (::geteuid() != 0) {
    WARN("skipped: only root can give a symlink to another user (lchown)");
    return;
  }
  TempDir dir;
  fs::create_directory(dir.file("home"));
  fs::create_directory(dir.file("tmp"));
  REQUIRE(::chmod(dir.file("tmp").c_str(), 01777) == 0);
  const std::string notes = dir.file("home/notes.txt"), planted = dir.file("tmp/model.safetensors");
  write_file(notes, "my notes");
  fs::create_symlink(notes, planted);
  REQUIRE(::lchown(planted.c_str(), 65534, 65534) == 0);

  CHECK_THROWS_WITH(nn::save_safetensors(planted, one_tensor(1)),
                    Contains("save_safetensors: '" + planted + "' is a symlink owned by uid 65534") &&
                        Contains("refusing to follow a symlink in a sticky world-writable directory that belongs to "
                                 "another user (the kernel's protected_symlinks rule)"));
  // Also at the end of a chain that starts with a link of our own.
  fs::create_symlink(planted, dir.file("mine_to_planted"));
  CHECK_THROWS_WITH(nn::save_safetensors(dir.file("mine_to_planted"), one_tensor(1)),
                    Contains("reached through '" + dir.file("mine_to_planted") + "'"));
  CHECK(read_file(notes) == "my notes");
  CHECK(fs::is_symlink(planted));
  CHECK(dir.entries().size() == 3);
  CHECK(std::vector<std::string>{fs::directory_iterator(dir.file("home"))->path().filename().string()} ==
        std::vector<std::string>{"notes.txt"});

  // Followed: a link of our own in the same folder; another user's link once the folder is theirs;
  // another user's link in a folder that is not sticky.
  const std::string own = dir.file("tmp/own.safetensors");
  fs::create_symlink(dir.file("home/own.safetensors"), own);
  nn::save_safetensors(own, one_tensor(2));
  CHECK(saved_value(dir.file("home/own.safetensors")) == 2);
  REQUIRE(::chown(dir.file("tmp").c_str(), 65534, 65534) == 0);
  nn::save_safetensors(planted, one_tensor(3));
  CHECK(saved_value(notes) == 3);
  REQUIRE(::chown(dir.file("tmp").c_str(), 0, 0) == 0);
  REQUIRE(::chmod(dir.file("tmp").c_str(), 0777) == 0);
  nn::save_safetensors(planted, one_tensor(4));
  CHECK(saved_value(notes) == 4);
}

TEST_CASE("file_io: a symlink's target is escaped in an error", "[safetensors]") {
  // Anyone may plant a symlink in /tmp, and its target text reaches the message: an ESC sequence
  // or a newline in it must not reach a terminal or a log raw.
  TempDir dir;
  const std::string target = "d\x1b[31m\nFAKE LOG: saved";
  fs::create_directory(dir.file(target));
  fs::create_symlink(target, dir.file("link"));
  std::string message;
  try {
    nn::save_safetensors(dir.file("link"), one_tensor(1));
  } catch (const Error& e) {
    message = e.what();
  }
  CHECK_THAT(message, Contains("the target of its symlink") && Contains("/d\\x1b[31m\\x0aFAKE LOG: saved'") &&
                          Contains("is a directory"));
  CHECK(message.find('\x1b') == std::string::npos);
  CHECK(message.find('\n') == std::string::npos);
}
