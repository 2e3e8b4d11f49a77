/// @file
/// nn/file_io.h: how nn/'s loaders open a file and its savers replace one, whatever the path names.
///
/// A path comes from a user or a config and may name anything: a FIFO, /dev/null, a directory, a
/// symlink into another folder. A loader must refuse what is not a regular file without blocking
/// on it; a saver must never turn a device node or a FIFO into a regular file, must write through
/// a symlink instead of replacing it, and must never leave a half-written file in place.
///
/// @code
///   open_regular_file   checks with stat() first, opens with O_NONBLOCK (a FIFO swapped in between
///                       cannot block), checks again with fstat(), then clears O_NONBLOCK
///   AtomicFile          writes "<target>.tmp.<host>.<pid>.<random>" next to the target (the end of
///                       the symlink chain; temp_prefix_for shortens long names), fsyncs it and
///                       renames it over the target; a writer that died mid-save leaves such a
///                       file behind, and the next save of the same target removes it
/// @endcode
///
/// Used by the library (safetensors.cpp, and so the checkpoints), by ringgrad's programs
/// (check_writable before a run, write_file_atomically for results) and by tests, which name the
/// temporary files.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ringgrad {
namespace nn {

/// What a file of this mode is, for messages: "a directory", "a FIFO", "a character device", ...
const char* file_kind(mode_t mode);

/// Opens `path` read-only if it is a regular file (after symlinks), else throws ringgrad::Error
/// `"<op>: '<path>': ..."` saying what it is. Returns the descriptor (O_CLOEXEC, blocking) and its size.
int open_regular_file(const char* op, const std::string& path, uint64_t* size_bytes);

/// Reads exactly n bytes at `offset`, or throws naming `op`, the path and the offset.
void read_exactly(const char* op, const std::string& path, int fd, uint64_t offset, void* dst, uint64_t n);

/// A new version of a file, written beside it and renamed over it on commit(). Destroying an
/// AtomicFile that was not committed removes the temporary; the target is untouched either way
/// until commit() succeeds.
class AtomicFile {
 public:
  /// Resolves `path` through any symlinks to its target, which must be a regular file or not exist
  /// (else throws, naming `op`, the path and what it is); like the kernel's protected_symlinks, it
  /// refuses a symlink in a sticky world-writable folder that belongs to neither euid nor the
  /// folder's owner. Then removes the stale temporaries of that target (see
  /// remove_stale_temporaries) and creates and locks this writer's temporary (throws if flock fails).
  AtomicFile(const char* op, std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);  ///< buffered; throws on failure, naming the temporary
  /// Flushes and fsyncs the temporary, checks (lstat) that the target is still a regular file or
  /// absent, renames the temporary over it and fsyncs the directory.
  void commit();

  const std::string& target() const { return target_; }   ///< the end of the symlink chain
  const std::string& temp_path() const { return temp_; }  ///< the temporary being written

 private:
  void flush();
  void write_all(const char* p, size_t n);
  [[noreturn]] void fail(const char* call) const;

  std::string op_, path_, target_, temp_;
  int fd_ = -1;
  bool committed_ = false;
  std::vector<char> buffer_;
};

/// Replaces (or creates) `path` with `bytes` through an AtomicFile: for outputs written in one go,
/// such as a benchmark's JSON. Throws like AtomicFile, naming `op`.
void write_file_atomically(const char* op, const std::string& path, const std::string& bytes);

/// Checks, before the work whose result it keeps (a training run, a benchmark), that a save to `path`
/// can be made: the path names a regular file or nothing yet (through symlinks, as a save follows
/// them; never a FIFO, a device or a folder), and the folder it lands in exists and lets this process
/// create files there (the temporary and the rename need that). Throws Error naming `op` (a flag,
/// say), the path and the problem. A later save can still fail (a full disk); this catches what
/// can be known at the start.
void check_writable(const char* op, const std::string& path);

/// The prefix of every temporary file of `target`: `"<target>.tmp.<host>."`, where `<host>` is the host
/// name's first 16 characters (any but [A-Za-z0-9_-] replaced by '_'), '-' and 12 hex digits of a
/// hash of the whole name. A base name longer than 194 bytes is cut there and given '~' and 16 hex
/// digits of a hash of the whole base name, so every temporary name fits in NAME_MAX.
std::string temp_prefix_for(const std::string& target);

/// Removes the files `"<temp_prefix_for(target)><pid>.<16 hex digits>"` (so only this host's), whose
/// writer process is gone (kill(pid, 0) fails with ESRCH), that are more than 10 seconds old (a
/// writer between its open() and its flock()) and whose lock it can take (each writer holds flock()
/// on its temporary until after its rename, which also covers a writer in another pid namespace; a
/// writer that cannot lock its temporary fails). A file it cannot lock is never removed. Anything
/// else -- another host's files, other names, symlinks, directories -- is left alone. Prints one line on stderr when it
/// removed something; returns how many.
int remove_stale_temporaries(const char* op, const std::string& target);

}  // namespace nn
}  // namespace ringgrad
