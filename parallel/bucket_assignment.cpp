// parallel/bucket_assignment.cpp: the DDP bucket layout (the rules are in bucket_assignment.h).
#include <ringgrad/parallel/bucket_assignment.h>

#include <cmath>
#include <limits>
#include <utility>

namespace ringgrad {
namespace parallel {

std::vector<std::vector<size_t>> assign_buckets(const std::vector<BucketParam>& params, int64_t first_bucket_cap_bytes,
                                                int64_t bucket_cap_bytes) {
  std::vector<std::vector<size_t>> buckets;
  std::vector<size_t> open;
  int64_t open_bytes = 0;
  auto close_bucket = [&] {
    if (open.empty()) return;
    buckets.push_back(std::move(open));
    open.clear();
    open_bytes = 0;
  };
  for (size_t i = params.size(); i-- > 0;) {
    if (!open.empty() && params[open.front()].dtype != params[i].dtype) close_bucket();
    open.push_back(i);
    open_bytes += params[i].bytes;
    const int64_t cap = bucket_cap_bytes == 0 ? 0 : buckets.empty() ? first_bucket_cap_bytes : bucket_cap_bytes;
    if (open_bytes >= cap) close_bucket();
  }
  close_bucket();
  return buckets;
}

int64_t bucket_cap_bytes_from_mb(double mb) {
  const double bytes = std::ceil(mb * 1024.0 * 1024.0);
  // 2^63 is exact as a double; converting anything at or past it to int64 is undefined.
  if (bytes >= 9223372036854775808.0) return std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(bytes);
}

}  // namespace parallel
}  // namespace ringgrad
