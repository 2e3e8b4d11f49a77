// tests/parallel/test_bucket_assignment.cpp: DDP's bucket layout as a pure function -- reverse order,
// caps, the first bucket's own cap, dtype splits -- without a process group or tensors.
#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <vector>

#include <ringgrad/parallel/bucket_assignment.h>

using namespace ringgrad;
using parallel::assign_buckets;
using parallel::BucketParam;
using Layout = std::vector<std::vector<size_t>>;

namespace {

std::vector<BucketParam> f32_params(const std::vector<int64_t>& bytes) {
  std::vector<BucketParam> params;
  for (const int64_t b : bytes) params.push_back({b, DType::f32});
  return params;
}

}  // namespace

TEST_CASE("ddp buckets: no parameters, no buckets", "[ddp][bucket]") { CHECK(assign_buckets({}, 100, 100).empty()); }

TEST_CASE("ddp buckets: parameters go in reverse registration order", "[ddp][bucket]") {
  // Caps far above the total: one bucket, last parameter first.
  CHECK(assign_buckets(f32_params({4, 8, 12, 16}), 1000, 1000) == Layout{{3, 2, 1, 0}});
}

TEST_CASE("ddp buckets: a bucket closes once it reaches its cap, the first with a cap of its own", "[ddp][bucket]") {
  // First cap 10: {5 (index 5)} stays open at 5 bytes, closes at 10 with index 4. Then cap 20.
  const std::vector<BucketParam> params = f32_params({5, 5, 5, 5, 5, 5});
  CHECK(assign_buckets(params, 10, 20) == Layout{{5, 4}, {3, 2, 1, 0}});
  // Reaching the cap exactly closes the bucket; one byte short does not.
  CHECK(assign_buckets(f32_params({1, 10, 10}), 20, 20) == Layout{{2, 1}, {0}});
  CHECK(assign_buckets(f32_params({1, 10, 9}), 20, 20) == Layout{{2, 1, 0}});
  // Every bucket but the last holds at least its cap, and passes it only by its last parameter.
  const std::vector<BucketParam> many = f32_params({3, 7, 1, 9, 4, 4, 6, 2, 8, 5, 3, 3});
  const Layout layout = assign_buckets(many, 6, 12);
  size_t seen = 0;
  for (size_t b = 0; b < layout.size(); ++b) {
    const int64_t cap = b == 0 ? 6 : 12;
    int64_t bytes = 0;
    for (const size_t i : layout[b]) bytes += many[i].bytes;
    if (b + 1 < layout.size()) CHECK(bytes >= cap);
    CHECK(bytes - many[layout[b].back()].bytes < cap);
    seen += layout[b].size();
  }
  CHECK(seen == many.size());
}

TEST_CASE("ddp buckets: a parameter larger than the cap closes the bucket it joins", "[ddp][bucket]") {
  // Alone when it comes first in a bucket...
  CHECK(assign_buckets(f32_params({1, 1, 100}), 10, 10) == Layout{{2}, {1, 0}});
  // ... and the last of its bucket otherwise: the next parameter starts a new one.
  CHECK(assign_buckets(f32_params({1, 100, 1}), 10, 10) == Layout{{2, 1}, {0}});
}

TEST_CASE("ddp buckets: a cap of 0 gives every parameter a bucket of its own", "[ddp][bucket]") {
  CHECK(assign_buckets(f32_params({4, 4, 4}), 1000, 0) == Layout{{2}, {1}, {0}});
  // A first cap of 0 only closes the first bucket at once.
  CHECK(assign_buckets(f32_params({4, 4, 4}), 0, 1000) == Layout{{2}, {1, 0}});
}

TEST_CASE("ddp buckets: a change of dtype closes the bucket", "[ddp][bucket]") {
  const std::vector<BucketParam> params = {{4, DType::f32}, {8, DType::f64}, {8, DType::f64}, {4, DType::f32}};
  CHECK(assign_buckets(params, 1000, 1000) == Layout{{3}, {2, 1}, {0}});
}

TEST_CASE("ddp buckets: caps in MiB round up to whole bytes and saturate", "[ddp][bucket]") {
  CHECK(parallel::bucket_cap_bytes_from_mb(0) == 0);
  CHECK(parallel::bucket_cap_bytes_from_mb(25) == 25 * 1024 * 1024);
  CHECK(parallel::bucket_cap_bytes_from_mb(0.0001) == 105);  // 104.8576 bytes
  CHECK(parallel::bucket_cap_bytes_from_mb(1e30) == std::numeric_limits<int64_t>::max());
}
