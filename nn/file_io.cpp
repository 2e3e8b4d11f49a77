// nn/file_io.cpp: safe opening and atomic replacement of files (see nn/file_io.h).
#include <ringgrad/nn/file_io.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>  // NOLINT(modernize-deprecated-headers): POSIX kill(), which <csignal> need not declare
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <climits>
#include <cstring>
#include <ctime>
#include <random>

#include <ringgrad/core/base/error.h>

namespace ringgrad {
namespace nn {
namespace {

constexpr size_t kWriteBufferBytes = size_t{1} << 20;
constexpr int kMaxSymlinkHops = 40;   // as Linux's own limit (ELOOP)
constexpr size_t kMaxHostChars = 16;  // the readable part of the host tag; a hash of the whole name follows
// "<stem>.tmp.<host tag>.<pid>.<16 hex>" must fit in NAME_MAX: ".tmp." + tag (16 + 1 + 12) + "." +
// pid (at most 9 digits) + "." + 16 hex is at most 61 bytes, so a stem of up to 194 bytes always fits.
constexpr size_t kMaxStemBytes = NAME_MAX - 61;
// A temporary younger than this is never removed as stale: it covers the moment between a
// writer's open(O_CREAT) and its flock(), and a writer on a host whose clock runs a little ahead.
constexpr int64_t kStaleGraceSeconds = 10;

// FNV-1a, 64 bits: a fixed hash (the same in every process and on every host) for names only.
uint64_t name_hash(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

std::string hex_of(uint64_t v, int digits) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(v));
  return std::string(hex + 16 - digits);
}

std::string dir_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}

// dir + "/" + name, built in one string (it runs in loops over directory entries and symlinks).
std::string join_path(const std::string& dir, const std::string& name) {
  std::string path;
  path.reserve(dir.size() + 1 + name.size());
  path.append(dir).append(1, '/').append(name);
  return path;
}

std::string base_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// This machine's name as it appears in temporary file names: its first 16 characters (only
// [A-Za-z0-9_-], so the '.' that separates the fields is never part of it), '-' and 12 hex digits of
// a hash of the whole name. The hash keeps apart hosts whose names share a long beginning (pods
// "trainer-job-1234-worker-0" and "-worker-1"), whose temporaries must never be taken for ours.
const std::string& host_tag() {
  static const std::string tag = [] {
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') std::strcpy(name, "unknown-host");
    std::string t;
    for (const char* c = name; *c && t.size() < kMaxHostChars; ++c) {
      const bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '-';
      t.push_back(ok ? *c : '_');
    }
    return t + "-" + hex_of(name_hash(name), 12);
  }();
  return tag;
}

// The part of a temporary's name taken from the target's: the whole base name when it leaves room
// for the suffix, else its first bytes (cut at a UTF-8 character boundary), '~' and 16 hex digits
// of a hash of the whole base name, so that two long names sharing a beginning still get prefixes
// of their own.
std::string temp_stem_of(const std::string& base) {
  if (base.size() <= kMaxStemBytes) return base;
  size_t keep = kMaxStemBytes - 17;
  while (keep > 0 && (static_cast<unsigned char>(base[keep]) & 0xC0) == 0x80) --keep;
  return base.substr(0, keep) + "~" + hex_of(name_hash(base), 16);
}

std::string random_hex() {
  static std::atomic<uint64_t> counter{0};
  uint64_t noise = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  try {
    noise ^= static_cast<uint64_t>(std::random_device{}()) << 20;
  } catch (...) {  // no entropy source: the clock and the counter keep names apart
  }
  noise += counter.fetch_add(1) * 0x9E3779B97F4A7C15ull;
  return hex_of(noise, 16);
}

bool all_of(const std::string& s, const char* allowed) {
  return !s.empty() && s.find_first_not_of(allowed) == std::string::npos;
}

// Why ENAMETOOLONG: which limit `path` breaks, in numbers.
std::string too_long(const std::string& path) {
  return detail::str("; a file name holds at most ", NAME_MAX, " bytes and a path ", PATH_MAX - 1, ", this one has ",
                     base_of(path).size(), " and ", path.size());
}

// A path that came from a symlink's text, as a message shows it: a symlink in /tmp may be planted by
// anyone, with an ESC sequence or a newline in its target. Escaped (detail::printable) but not cut
// at any length a real path has.
std::string from_link(const std::string& path) { return detail::printable(path, 2 * size_t{PATH_MAX}); }

// The kernel's fs.protected_symlinks rule, which a walk by lstat()+readlink() would otherwise
// bypass: a symlink in a sticky world-writable directory (/tmp) is followed only by its owner or
// when it belongs to the directory's owner. Else another user could plant /tmp/model.safetensors ->
// /home/victim/notes.txt and have the victim's save replace notes.txt. Applied whatever the sysctl
// says, as the follower is euid (the kernel's fsuid, which differs only under setfsuid()).
void refuse_protected_symlink(const char* op, const std::string& path, const std::string& link,
                              const struct stat& link_st) {
  const std::string dir = dir_of(link);
  struct stat dir_st {};
  if (::stat(dir.c_str(), &dir_st) != 0)
    throw Error(detail::str(op, ": cannot inspect '", from_link(dir), "', the folder of the symlink '", from_link(link),
                            "' (", std::strerror(errno), ")"));
  const bool sticky_world_writable = (dir_st.st_mode & S_ISVTX) && (dir_st.st_mode & S_IWOTH);
  if (!sticky_world_writable || link_st.st_uid == ::geteuid() || link_st.st_uid == dir_st.st_uid) return;
  const std::string via = link == path ? "" : " (reached through '" + path + "')";
  throw Error(detail::str(op, ": '", from_link(link), "'", via, " is a symlink owned by uid ", link_st.st_uid, " in '",
                          from_link(dir), "' (owned by uid ", dir_st.st_uid, "; this process runs as uid ", ::geteuid(),
                          "): refusing to follow a symlink in a sticky world-writable directory that belongs to "
                          "another user (the kernel's protected_symlinks rule); save to the file's real path"));
}

// Follows `path` through symlinks to the file a write must replace. A target that does not exist
// (a new file, or the end of a dangling symlink) is fine; anything but a regular file is refused.
std::string resolve_write_target(const char* op, const std::string& path, struct stat* existing, bool* exists) {
  std::string target = path;
  *exists = false;
  for (int hops = 0;; ++hops) {
    if (::lstat(target.c_str(), existing) != 0) {
      const int err = errno;
      if (err == ENOENT) return target;
      throw Error(detail::str(op, ": cannot inspect '", from_link(target), "' (", std::strerror(err), ")",
                              err == ENAMETOOLONG ? too_long(target) : ""));
    }
    if (S_ISREG(existing->st_mode)) {
      *exists = true;
      return target;
    }
    if (!S_ISLNK(existing->st_mode)) {
      const std::string via = target == path ? "" : " (the target of its symlink, '" + from_link(target) + "')";
      throw Error(detail::str(op, ": '", path, "'", via, " is ", file_kind(existing->st_mode),
                              ", not a regular file; refusing to replace it (write to a regular file or a new name)"));
    }
    RINGGRAD_CHECK(hops < kMaxSymlinkHops, op, ": '", path, "': more than ", kMaxSymlinkHops,
                   " levels of symbolic links (a loop?)");
    refuse_protected_symlink(op, path, target, *existing);
    std::vector<char> link(static_cast<size_t>(existing->st_size > 0 ? existing->st_size : 255) + 2);
    const ssize_t n = ::readlink(target.c_str(), link.data(), link.size() - 1);
    RINGGRAD_CHECK(n > 0, op, ": cannot read the symlink '", from_link(target), "' (", std::strerror(errno), ")");
    const std::string next(link.data(), static_cast<size_t>(n));
    target = next[0] == '/' ? next : join_path(dir_of(target), next);
  }
}

// After the rename, the directory entry itself must reach the disk, or a crash can bring back
// the old file. Best effort: some file systems do not let a directory be opened this way.
void sync_directory_of(const std::string& path) {
  const int fd = ::open(dir_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

}  // namespace

const char* file_kind(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "a special file";
}

int open_regular_file(const char* op, const std::string& path, uint64_t* size_bytes) {
  // stat() before open(): opening a FIFO for reading blocks until a writer comes, forever if none.
  struct stat st {};
  RINGGRAD_CHECK(::stat(path.c_str(), &st) == 0, op, ": '", path, "': cannot open the file (", std::strerror(errno),
                 ")");
  RINGGRAD_CHECK(S_ISREG(st.st_mode), op, ": '", path, "' is ", file_kind(st.st_mode), ", not a regular file");
  // O_NONBLOCK in case the path was swapped for a FIFO since the stat(); fstat() then sees it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  RINGGRAD_CHECK(fd >= 0, op, ": '", path, "': cannot open the file (", std::strerror(errno), ")");
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string kind = file_kind(st.st_mode);
    ::close(fd);
    throw Error(detail::str(op, ": '", path, "' changed into ", kind, " while it was being opened"));
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  *size_bytes = static_cast<uint64_t>(st.st_size);
  return fd;
}

void read_exactly(const char* op, const std::string& path, int fd, uint64_t offset, void* dst, uint64_t n) {
  char* p = static_cast<char*>(dst);
  uint64_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd, p + done, static_cast<size_t>(std::min<uint64_t>(n - done, 1u << 30)),
                                static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      throw Error(detail::str(op, ": '", path, "': could not read ", n, " bytes at offset ", offset,
                              " (the file changed or is unreadable",
                              got < 0 ? std::string(": ") + std::strerror(errno) : "", ")"));
    done += static_cast<uint64_t>(got);
  }
}

std::string temp_prefix_for(const std::string& target) {
  const std::string stem = temp_stem_of(base_of(target));
  const size_t slash = target.find_last_of('/');
  return (slash == std::string::npos ? stem : target.substr(0, slash + 1) + stem) + ".tmp." + host_tag() + ".";
}

int remove_stale_temporaries(const char* op, const std::string& target) {
  const std::string dir = dir_of(target);
  const std::string prefix = base_of(temp_prefix_for(target));
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;  // nothing to clean; creating the temporary will report the real problem
  int removed = 0;
  const auto now = static_cast<int64_t>(std::time(nullptr));
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    // Exactly "<pid>.<16 hex digits>" after the prefix, or it is not ours to touch.
    const std::string rest = name.substr(prefix.size());
    const size_t dot = rest.find('.');
    if (dot == std::string::npos) continue;
    const std::string pid_text = rest.substr(0, dot), hex = rest.substr(dot + 1);
    if (!all_of(pid_text, "0123456789") || pid_text.size() > 9 || pid_text[0] == '0') continue;
    if (hex.size() != 16 || !all_of(hex, "0123456789abcdef")) continue;
    const auto pid = static_cast<pid_t>(std::stol(pid_text));
    // Alive, or someone else's (EPERM): keep. A reused pid keeps a stale file, never loses a live one.
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;
    const std::string full = join_path(dir, name);
    const int fd = ::open(full.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;  // a symlink, or gone already
    struct stat st {
    }, now_there{};
    // Young files are left alone (a writer between its open() and its flock()); then the writer's
    // lock: held by a live writer even where its pid means nothing here (another pid namespace on
    // the same kernel). A file that cannot be locked is never removed; and the name must still be
    // that very file when it is.
    const bool young = ::fstat(fd, &st) != 0 || static_cast<int64_t>(st.st_mtime) > now - kStaleGraceSeconds;
    if (!young && S_ISREG(st.st_mode) && ::flock(fd, LOCK_EX | LOCK_NB) == 0 &&
        ::lstat(full.c_str(), &now_there) == 0 && now_there.st_dev == st.st_dev && now_there.st_ino == st.st_ino &&
        ::unlink(full.c_str()) == 0)
      ++removed;
    ::close(fd);
  }
  ::closedir(d);
  if (removed > 0)
    std::fprintf(stderr, "%s: removed %d stale temporary file%s of '%s' left by writers that died\n", op, removed,
                 removed == 1 ? "" : "s", target.c_str());
  return removed;
}

AtomicFile::AtomicFile(const char* op, std::string path) : op_(op), path_(std::move(path)) {
  struct stat existing {};
  bool exists = false;
  target_ = resolve_write_target(op, path_, &existing, &exists);
  remove_stale_temporaries(op, target_);
  temp_ = temp_prefix_for(target_) + std::to_string(::getpid()) + "." + random_hex();
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd_ < 0) {
    const int err = errno;
    const std::string hint = err == ENAMETOOLONG               ? too_long(temp_)
                             : err == ENOENT || err == ENOTDIR ? "; does the directory '" + dir_of(temp_) + "' exist?"
                             : err == EACCES || err == EPERM || err == EROFS
                                 ? "; is the directory '" + dir_of(temp_) + "' writable?"
                                 : "";
    throw Error(detail::str(op, ": cannot create the temporary file '", temp_, "' (", std::strerror(err), ")", hint));
  }
  // Held until after the rename: tells remove_stale_temporaries that this writer is alive. A
  // writer without its lock could lose its temporary to a cleaner that took the lock first, so it
  // does not go on.
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    ::unlink(temp_.c_str());
    throw Error(detail::str(op, ": cannot lock the temporary file '", temp_, "' (flock: ", std::strerror(err),
                            "); a save needs a file system with flock() so that its temporary is not taken for a "
                            "dead writer's"));
  }
  // The new version keeps the old one's permissions (a 0600 checkpoint stays private).
  if (exists) (void)::fchmod(fd_, existing.st_mode & 07777);
  buffer_.reserve(kWriteBufferBytes);
}

AtomicFile::~AtomicFile() {
  if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
  if (fd_ >= 0) ::close(fd_);
}

void AtomicFile::write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  if (buffer_.size() + n > kWriteBufferBytes) flush();
  if (n >= kWriteBufferBytes) {
    write_all(p, n);
  } else {
    buffer_.insert(buffer_.end(), p, p + n);
  }
}

void AtomicFile::flush() {
  write_all(buffer_.data(), buffer_.size());
  buffer_.clear();
}

void AtomicFile::write_all(const char* p, size_t n) {
  while (n > 0) {
    const ssize_t done = ::write(fd_, p, n);
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0) fail("write");
    p += done;
    n -= static_cast<size_t>(done);
  }
}

void AtomicFile::commit() {
  flush();
  if (::fsync(fd_) != 0) fail("fsync");
  // Checked again right before the rename: a FIFO, device or directory put at the target while
  // the data was written is not replaced either.
  struct stat st {};
  if (::lstat(target_.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw Error(detail::str(op_, ": '", target_, "' became ", file_kind(st.st_mode),
                            " while the new version was written; refusing to replace it"));
  RINGGRAD_CHECK(::rename(temp_.c_str(), target_.c_str()) == 0, op_, ": cannot rename '", temp_, "' to '", target_,
                 "' (", std::strerror(errno), ")");
  committed_ = true;
  ::close(fd_);  // after the rename, so the lock covered the temporary's whole life
  fd_ = -1;
  sync_directory_of(target_);
}

void AtomicFile::fail(const char* call) const {
  throw Error(detail::str(op_, ": ", call, " to '", temp_, "' failed (", std::strerror(errno), ")"));
}

void check_writable(const char* op, const std::string& path) {
  RINGGRAD_CHECK(!path.empty(), op, ": expected a file name, got an empty one");
  struct stat existing {};
  bool exists = false;
  const std::string target = resolve_write_target(op, path, &existing, &exists);
  const std::string dir = dir_of(target);
  const std::string via = target == path ? "" : " (through its symlink, '" + target + "')";
  struct stat dir_st {};
  if (::stat(dir.c_str(), &dir_st) != 0) {
    const int err = errno;
    throw Error(detail::str(op, ": cannot write '", path, "'", via, ": its folder '", dir, "' ",
                            err == ENOENT ? std::string("does not exist")
                                          : std::string("cannot be inspected (") + std::strerror(err) + ")"));
  }
  RINGGRAD_CHECK(S_ISDIR(dir_st.st_mode), op, ": cannot write '", path, "'", via, ": '", dir, "' is ",
                 file_kind(dir_st.st_mode), ", not a folder");
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    const int err = errno;
    throw Error(detail::str(op, ": cannot write '", path, "'", via, ": the folder '", dir,
                            "' does not let this process create files (", std::strerror(err), ")"));
  }
}

void write_file_atomically(const char* op, const std::string& path, const std::string& bytes) {
  AtomicFile file(op, path);
  file.write(bytes.data(), bytes.size());
  file.commit();
}

}  // namespace nn
}  // namespace ringgrad
