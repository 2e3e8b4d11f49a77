// core/generator.cpp: counter reservation for the Philox generator.
#include "core/generator.h"

#include <mutex>

namespace ringgrad {
namespace {
std::mutex g_generator_mutex;  // one lock for all generators: draws are rare next to the kernels
}

uint64_t Generator::reserve(uint64_t n) {
  std::lock_guard<std::mutex> lock(g_generator_mutex);
  const uint64_t first = offset_;
  offset_ += n;
  return first;
}

Generator& default_generator() {
  static Generator generator(0);
  return generator;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace ringgrad
