// tests/fuzz/fuzz_safetensors.cpp: libFuzzer target for load_safetensors, which trusts nothing.
//
// Each input is a whole file: the 8-byte header length, the JSON header, the data. It is written to
// a memfd (a regular file in memory, so no disk I/O) and loaded through /proc/self/fd/N. The
// property: the load either returns tensors that fit in the file, or throws ringgrad::Error. Any
// other exception, a crash, a sanitizer report, a hang (-timeout) or a runaway allocation
// (-rss_limit_mb, -malloc_limit_mb) is a bug. tests/fuzz/README.md says how to run it longer.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include <ringgrad/core/base/error.h>
#include <ringgrad/nn/safetensors.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd = ::memfd_create("fuzz_safetensors", MFD_CLOEXEC);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (fd < 0 || ::ftruncate(fd, 0) != 0) std::abort();
  for (size_t done = 0; done < size;) {
    const ssize_t n = ::pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    if (n <= 0) std::abort();
    done += static_cast<size_t>(n);
  }
  try {
    std::map<std::string, std::string> metadata;
    const ringgrad::nn::StateDict tensors = ringgrad::nn::load_safetensors(path, &metadata);
    uint64_t total = 0;
    for (const auto& [name, t] : tensors) total += static_cast<uint64_t>(t.numel() * t.element_size());
    if (total > size) {
      std::fprintf(stderr, "fuzz_safetensors: loaded %llu bytes of tensors from a %zu-byte file\n",
                   static_cast<unsigned long long>(total), size);
      std::abort();
    }
  } catch (const ringgrad::Error&) {
    // A clean rejection: what a bad file must get.
  }
  return 0;
}
