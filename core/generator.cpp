// core/generator.cpp: the Philox generator's state, behind one lock.
#include <ringgrad/core/generator.h>

#include <mutex>

namespace ringgrad {
namespace {
std::mutex g_generator_mutex;  // one lock for all generators: draws are rare next to the kernels
}

void Generator::manual_seed(uint64_t seed) { set_state(seed, 0); }

uint64_t Generator::seed() const {
  std::lock_guard<std::mutex> lock(g_generator_mutex);
  return seed_;
}

uint64_t Generator::offset() const {
  std::lock_guard<std::mutex> lock(g_generator_mutex);
  return offset_;
}

void Generator::set_state(uint64_t seed, uint64_t offset) {
  std::lock_guard<std::mutex> lock(g_generator_mutex);
  seed_ = seed;
  offset_ = offset;
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
