// parallel/gloo/gloo_store.cpp: the adapter of gloo_store.h -- bytes as they are, keys prefixed.
#include "parallel/gloo/gloo_store.h"

#include <ringgrad/core/base/error.h>

namespace ringgrad {
namespace parallel {

std::vector<std::string> GlooStore::prefixed(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const std::string& key : keys) out.push_back(prefix_ + key);
  return out;
}

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  store_.set(prefix_ + key, std::vector<uint8_t>(data.begin(), data.end()));
}

std::vector<char> GlooStore::get(const std::string& key) {
  const std::vector<uint8_t> value = store_.get(prefix_ + key);
  return std::vector<char>(value.begin(), value.end());
}

void GlooStore::wait(const std::vector<std::string>& keys) { store_.wait(prefixed(keys)); }

void GlooStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  const std::vector<std::string> missing = store_.wait_for(prefixed(keys), timeout);
  if (missing.empty()) return;
  std::string names;
  for (const std::string& key : missing) names += (names.empty() ? "'" : ", '") + key + "'";
  throw Error(detail::str("gloo: timed out after ", timeout.count(), " ms waiting for store keys ", names,
                          " (the ranks that publish them have not arrived)"));
}

}  // namespace parallel
}  // namespace ringgrad
