// tests/nn/test_data.cpp: the IDX reader (round trips and every malformed file), FashionMNIST (a fake
// dataset folder, then the real one when installed), and DataLoader (order, batching, normalisation,
// resuming, and the prefetch thread's shutdown and error paths).
#include <catch2/catch.hpp>

#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <ringgrad/core/base/error.h>
#include <ringgrad/core/tensor.h>
#include <ringgrad/core/base/philox.h>
#include <ringgrad/nn/data/dataloader.h>
#include <ringgrad/nn/data/fashion_mnist.h>
#include <ringgrad/nn/data/idx.h>
#include "test_util.h"

using namespace ringgrad;
using namespace ringgrad::nn::data;
using ringgrad::test::TempDir;
namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<uint8_t>;

// Sets an environment variable for one scope, restoring the old value (or its absence) after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_)
      ::setenv(name_, old_.c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

// An IDX file's bytes, written out by hand (not by write_idx), so the reader is checked against the
// format itself: 00 00 type ndims, big-endian sizes, payload.
Bytes idx_bytes(uint8_t type, const std::vector<uint32_t>& sizes, const Bytes& payload) {
  Bytes b = {0, 0, type, static_cast<uint8_t>(sizes.size())};
  for (uint32_t s : sizes)
    for (int shift = 24; shift >= 0; shift -= 8) b.push_back(static_cast<uint8_t>(s >> shift));
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

// Files are removed before being rewritten: on ext4, truncating a file that holds data and writing it
// again forces a flush to disk (auto_da_alloc), which made the fuzz loop below 100 times slower.
void write_plain(const std::string& path, const Bytes& bytes) {
  fs::remove(path);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

void write_gzip(const std::string& path, const Bytes& bytes) {
  fs::remove(path);
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  if (!bytes.empty()) REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == int(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

Bytes read_plain(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// n bytes that do not compress well (so a cut gzip file really loses payload).
Bytes noise(int64_t n, uint64_t seed) {
  Bytes b(n);
  for (int64_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(philox::philox_block(seed, i).w[0]);
  return b;
}

Tensor u8_tensor(const Bytes& values, const Shape& shape) { return from_vector(values, shape); }

// Images whose row i holds (i, i + 0.25, i + 0.5) and labels i: every batch says which samples it took.
struct Indexed {
  Tensor images, labels;
};
Indexed indexed_dataset(int64_t n) {
  std::vector<float> x(n * 3);
  std::vector<int64_t> y(n);
  for (int64_t i = 0; i < n; ++i) {
    x[3 * i] = float(i), x[3 * i + 1] = float(i) + 0.25f, x[3 * i + 2] = float(i) + 0.5f;
    y[i] = i;
  }
  return {from_vector(x, {n, 3}), from_vector(y, {n})};
}

// All the batches of one pass from the cursor.
std::vector<Batch> drain(DataLoader& loader) {
  std::vector<Batch> out;
  for (const Batch& b : loader) out.push_back(b);
  return out;
}

// The labels of a list of batches, concatenated: the sample order for an indexed dataset.
std::vector<int64_t> order_of(const std::vector<Batch>& batches) {
  std::vector<int64_t> out;
  for (const Batch& b : batches) {
    const auto y = b.y.to_vector<int64_t>();
    out.insert(out.end(), y.begin(), y.end());
  }
  return out;
}

bool same_values(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && a.to_vector<double>() == b.to_vector<double>();
}

}  // namespace

// ========================================= IDX reader ===========================================

TEST_CASE("read_idx: hand-written plain and gzipped files give the same tensor", "[data]") {
  TempDir dir;
  const Bytes payload = noise(2 * 3 * 5, 1);
  const Bytes file = idx_bytes(0x08, {2, 3, 5}, payload);
  write_plain(dir.file("a.idx"), file);
  write_gzip(dir.file("a.idx.gz"), file);
  for (const std::string& path : {dir.file("a.idx"), dir.file("a.idx.gz")}) {
    INFO(path);
    const Tensor t = read_idx(path);
    CHECK(t.dtype() == DType::u8);
    CHECK(t.shape() == Shape{2, 3, 5});
    CHECK(t.to_vector<uint8_t>() == payload);
  }
}

TEST_CASE("read_idx and write_idx: round trips over odd shapes, empty and one-element", "[data]") {
  TempDir dir;
  const std::vector<Shape> shapes = {{1}, {7}, {3, 1, 5}, {2, 28, 28}, {0}, {4, 0, 3}, {1, 1, 1, 1, 1, 1, 1, 1}};
  for (bool gzip : {false, true}) {
    for (const Shape& shape : shapes) {
      INFO("shape " << shape << " gzip " << gzip);
      const Tensor t = u8_tensor(noise(shape.numel(), 2), shape);
      const std::string path = dir.file(gzip ? "t.idx.gz" : "t.idx");
      write_idx(path, t, gzip);
      const Tensor back = read_idx(path);
      CHECK(back.shape() == shape);
      CHECK(back.to_vector<uint8_t>() == t.to_vector<uint8_t>());
      // write_idx's plain output is exactly the format, byte for byte.
      if (!gzip)
        CHECK(read_plain(path) ==
              idx_bytes(0x08, std::vector<uint32_t>(shape.begin(), shape.end()), t.to_vector<uint8_t>()));
    }
  }
  // A non-contiguous view is written in its logical order.
  const Tensor base = u8_tensor(noise(12, 3), {3, 4});
  write_idx(dir.file("t.idx"), base.t(), false);
  CHECK(read_idx(dir.file("t.idx")).to_vector<uint8_t>() == base.t().contiguous().to_vector<uint8_t>());
}

TEST_CASE("read_idx: missing files and folders name the path", "[data]") {
  TempDir dir;
  CHECK_ERROR(read_idx(dir.file("nope.gz")), "read_idx", "cannot open", dir.file("nope.gz"), "No such file");
  CHECK_ERROR(read_idx(dir.str()), "read_idx", dir.str(), "is a directory");
}

TEST_CASE("read_idx: a header cut short is reported as truncated", "[data]") {
  TempDir dir;
  const Bytes full = idx_bytes(0x08, {3, 4}, Bytes(12, 7));
  for (bool gzip : {false, true}) {
    for (size_t keep : {0, 2, 4, 7, 11}) {  // inside the magic, then inside the sizes
      INFO("keep " << keep << " bytes, gzip " << gzip);
      const std::string path = dir.file(gzip ? "h.gz" : "h");
      const Bytes cut(full.begin(), full.begin() + keep);
      gzip ? write_gzip(path, cut) : write_plain(path, cut);
      CHECK_ERROR(read_idx(path), "read_idx", path, "truncated header");
    }
  }
}

TEST_CASE("read_idx: bad magic, unsupported types and bad dimension counts are rejected", "[data]") {
  TempDir dir;
  const std::string path = dir.file("bad");
  write_plain(path, {0x01, 0x00, 0x08, 0x01, 0, 0, 0, 1, 9});
  CHECK_ERROR(read_idx(path), path, "not an IDX file", "0x01 0x00");
  // A PNG or similar: what one gets from pointing at the wrong file.
  write_plain(path, {0x89, 'P', 'N', 'G', 0, 0, 0, 0});
  CHECK_ERROR(read_idx(path), path, "not an IDX file", "0x89 0x50");
  // The other IDX types are real, but not what this reader returns.
  write_plain(path, idx_bytes(0x0D, {2}, Bytes(8, 0)));
  CHECK_ERROR(read_idx(path), path, "unsupported element type 0x0d", "float32", "only 0x08");
  write_plain(path, idx_bytes(0x0B, {2}, Bytes(4, 0)));
  CHECK_ERROR(read_idx(path), path, "0x0b", "int16");
  write_plain(path, idx_bytes(0x42, {2}, Bytes(2, 0)));
  CHECK_ERROR(read_idx(path), path, "0x42", "not an IDX type");
  write_plain(path, {0, 0, 0x08, 0});
  CHECK_ERROR(read_idx(path), path, "expected 1 to 8 dimensions, got 0");
  write_plain(path, idx_bytes(0x08, std::vector<uint32_t>(9, 1), Bytes(1, 0)));
  CHECK_ERROR(read_idx(path), path, "expected 1 to 8 dimensions, got 9");
  write_plain(path, {0, 0, 0x08, 255});
  CHECK_ERROR(read_idx(path), path, "got 255");
}

TEST_CASE("read_idx: a payload shorter than the sizes say is rejected, plain or gzipped", "[data]") {
  TempDir dir;
  const Bytes file = idx_bytes(0x08, {10, 7}, noise(63, 4));  // 70 promised, 63 given
  write_plain(dir.file("p"), file);
  CHECK_ERROR(read_idx(dir.file("p")), "payload too short", "[10, 7]", "70 bytes", "holds 63");
  write_gzip(dir.file("p.gz"), file);
  CHECK_ERROR(read_idx(dir.file("p.gz")), "payload too short", "[10, 7]", "70 bytes", "holds 63");
}

TEST_CASE("read_idx: bytes after the payload are trailing garbage, plain or gzipped", "[data]") {
  TempDir dir;
  const Bytes file = idx_bytes(0x08, {4, 2}, noise(8 + 3, 5));
  write_plain(dir.file("t"), file);
  CHECK_ERROR(read_idx(dir.file("t")), dir.file("t"), "trailing garbage", "[4, 2]", "3 more");
  write_gzip(dir.file("t.gz"), file);
  CHECK_ERROR(read_idx(dir.file("t.gz")), dir.file("t.gz"), "trailing garbage", "[4, 2]");
}

TEST_CASE("read_idx: absurd sizes are rejected before anything is allocated", "[data]") {
  TempDir dir;
  const std::string path = dir.file("huge");
  // 2^96 bytes: would overflow a 64-bit product; caught by the 4 GiB cap.
  write_plain(path, idx_bytes(0x08, {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, Bytes(16, 0)));
  CHECK_ERROR(read_idx(path), path, "4 GiB", "header is corrupt");
  // 2^32 bytes, exactly the cap: plausible on its own, but the file holds 16.
  write_plain(path, idx_bytes(0x08, {65536, 65536}, Bytes(16, 0)));
  CHECK_ERROR(read_idx(path), path, "payload too short", "4294967296 bytes", "holds 16");
  // A gzip file of a few dozen bytes cannot inflate to 1 GB (deflate's ratio is at most 1032:1).
  write_gzip(dir.file("huge.gz"), idx_bytes(0x08, {1000, 1000, 1000}, Bytes(16, 0)));
  CHECK_ERROR(read_idx(dir.file("huge.gz")), "payload too short", "1000000000 bytes", "gzip file can hold");
  // A zero size makes the payload empty whatever the other sizes say.
  write_plain(path, idx_bytes(0x08, {0xFFFFFFFFu, 0, 0xFFFFFFFFu}, {}));
  CHECK(read_idx(path).shape() == Shape{0xFFFFFFFFLL, 0, 0xFFFFFFFFLL});
}

TEST_CASE("read_idx: a cut or corrupted gzip stream is an error, not a crash", "[data]") {
  TempDir dir;
  const std::string good = dir.file("good.gz");
  write_gzip(good, idx_bytes(0x08, {50, 40}, noise(2000, 6)));
  const Bytes gz = read_plain(good);
  REQUIRE(gz.size() > 1000);  // noise does not compress

  // Cut in the middle of the deflate data.
  const std::string path = dir.file("bad.gz");
  write_plain(path, Bytes(gz.begin(), gz.begin() + gz.size() / 2));
  CHECK_ERROR(read_idx(path), path, "payload too short", "ends early");
  // Everything but the 8-byte trailer (CRC-32 and length): the payload is all there, the check is not.
  write_plain(path, Bytes(gz.begin(), gz.end() - 8));
  CHECK_ERROR(read_idx(path), path, "gzip stream");
  // A wrong CRC-32 in the trailer.
  Bytes bad_crc = gz;
  bad_crc[bad_crc.size() - 8] ^= 0xFF;
  write_plain(path, bad_crc);
  CHECK_ERROR(read_idx(path), path);
}

TEST_CASE("read_idx: randomly mutated files either load or throw Error", "[data]") {
  // A small fuzz loop: each mutant flips, inserts or deletes bytes of a valid file. Whatever comes out,
  // read_idx must return or throw ringgrad::Error -- never crash, hang or throw anything else. (CI
  // runs this under ASan, which also catches reads out of bounds.)
  TempDir dir;
  const Bytes plain = idx_bytes(0x08, {3, 5, 4}, noise(60, 7));
  write_gzip(dir.file("seed.gz"), plain);
  const Bytes gz = read_plain(dir.file("seed.gz"));
  const std::string path = dir.file("mutant");
  int loaded = 0, rejected = 0;
  for (uint64_t trial = 0; trial < 400; ++trial) {
    Bytes m = trial % 2 ? gz : plain;
    const philox::Block r = philox::philox_block(99, trial);
    const size_t pos = r.w[0] % m.size();
    switch (r.w[1] % 4) {
      case 0: m[pos] ^= static_cast<uint8_t>(1u << (r.w[2] % 8)); break;
      case 1: m[pos] = static_cast<uint8_t>(r.w[2]); break;
      case 2: m.insert(m.begin() + pos, static_cast<uint8_t>(r.w[2])); break;
      case 3: m.resize(pos); break;
    }
    write_plain(path, m);
    try {
      const Tensor t = read_idx(path);
      CHECK(t.numel() <= 4096);
      ++loaded;
    } catch (const Error&) {
      ++rejected;
    }
  }
  CHECK(loaded + rejected == 400);
  CHECK(rejected > 0);
}

TEST_CASE("write_idx: rejects tensors that IDX cannot hold", "[data]") {
  TempDir dir;
  CHECK_ERROR(write_idx(dir.file("f"), zeros({2, 2}), false), "write_idx", "uint8", "float32");
  CHECK_ERROR(write_idx(dir.file("f"), zeros({}, DType::u8), false), "write_idx", "0-d");
  CHECK_ERROR(write_idx(dir.file("no/such/dir/f"), zeros({2}, DType::u8), false), "write_idx", "cannot open");
}

// ========================================= FashionMNIST =========================================

namespace {

// A folder laid out like the real dataset, with n_train / n_test made-up images.
void write_fake_fashion_mnist(const TempDir& dir, int64_t n_train, int64_t n_test) {
  for (auto [prefix, n] : {std::pair<const char*, int64_t>{"train", n_train}, {"t10k", n_test}}) {
    Bytes labels(n);
    for (int64_t i = 0; i < n; ++i) labels[i] = static_cast<uint8_t>((3 * i + 1) % 10);
    write_idx(dir.file(std::string(prefix) + "-images-idx3-ubyte.gz"), u8_tensor(noise(n * 784, n), {n, 28, 28}), true);
    write_idx(dir.file(std::string(prefix) + "-labels-idx1-ubyte.gz"), u8_tensor(labels, {n}), true);
  }
}

}  // namespace

TEST_CASE("FashionMNIST: class names are the ten of the dataset, in label order", "[data]") {
  const auto& names = FashionMNIST::class_names();
  REQUIRE(names.size() == 10);
  CHECK(names[0] == "T-shirt/top");
  CHECK(names[5] == "Sandal");
  CHECK(names[9] == "Ankle boot");
}

TEST_CASE("FashionMNIST: a missing file says which one and how to get the dataset", "[data]") {
  TempDir dir;
  CHECK_FALSE(FashionMNIST::available(dir.str()));
  CHECK_ERROR(FashionMNIST(Split::Train, dir.str()), "FashionMNIST: missing", "train-images-idx3-ubyte.gz", dir.str(),
              "given to the constructor", "apt-get install dataset-fashion-mnist", "RINGGRAD_FASHION_MNIST_DIR");
  // Images present, labels not: the message names the labels file.
  write_idx(dir.file("t10k-images-idx3-ubyte.gz"), zeros({2, 28, 28}, DType::u8), true);
  CHECK_ERROR(FashionMNIST(Split::Test, dir.str()), "t10k-labels-idx1-ubyte.gz");
  // Through the environment variable, the message says where the folder came from.
  ScopedEnv env(FashionMNIST::kDirEnvVar, dir.str());
  CHECK_ERROR(FashionMNIST(Split::Train), "from RINGGRAD_FASHION_MNIST_DIR", dir.str());
}

TEST_CASE("FashionMNIST: loads a fake dataset folder, by argument or environment variable", "[data]") {
  TempDir dir;
  write_fake_fashion_mnist(dir, 13, 5);
  CHECK(FashionMNIST::available(dir.str()));

  const FashionMNIST train(Split::Train, dir.str());
  CHECK(train.size() == 13);
  CHECK(train.split() == Split::Train);
  CHECK(train.images().dtype() == DType::u8);
  CHECK(train.images().shape() == Shape{13, 28, 28});
  CHECK(train.labels().dtype() == DType::i64);
  CHECK(train.labels().shape() == Shape{13});
  CHECK(train.labels().to_vector<int64_t>()[4] == 3);  // (3 * 4 + 1) % 10
  CHECK(train.images().to_vector<uint8_t>() == noise(13 * 784, 13));

  ScopedEnv env(FashionMNIST::kDirEnvVar, dir.str());
  CHECK(FashionMNIST::default_dir() == dir.str());
  CHECK(FashionMNIST::available());
  const FashionMNIST test(Split::Test);
  CHECK(test.size() == 5);
  CHECK(test.dir() == dir.str());
}

TEST_CASE("FashionMNIST: unpacked files are read when the .gz ones are absent", "[data]") {
  TempDir dir;
  write_idx(dir.file("t10k-images-idx3-ubyte"), zeros({3, 28, 28}, DType::u8), false);
  write_idx(dir.file("t10k-labels-idx1-ubyte"), zeros({3}, DType::u8), false);
  CHECK(FashionMNIST(Split::Test, dir.str()).size() == 3);
}

TEST_CASE("FashionMNIST: mismatched counts, wrong image sizes and bad labels are rejected", "[data]") {
  TempDir dir;
  const std::string images = dir.file("t10k-images-idx3-ubyte.gz");
  const std::string labels = dir.file("t10k-labels-idx1-ubyte.gz");
  write_idx(images, zeros({4, 28, 28}, DType::u8), true);
  write_idx(labels, zeros({3}, DType::u8), true);
  CHECK_ERROR(FashionMNIST(Split::Test, dir.str()), "4 images", "3 labels", images, labels);
  write_idx(labels, zeros({4}, DType::u8), true);
  write_idx(images, zeros({4, 28, 27}, DType::u8), true);
  CHECK_ERROR(FashionMNIST(Split::Test, dir.str()), "[N, 28, 28]", "[4, 28, 27]");
  write_idx(images, zeros({4, 28, 28}, DType::u8), true);
  write_idx(labels, u8_tensor({1, 2, 10, 3}, {4}), true);
  CHECK_ERROR(FashionMNIST(Split::Test, dir.str()), "label 10 at index 2", "0 to 9");
  write_idx(labels, zeros({4, 1}, DType::u8), true);
  CHECK_ERROR(FashionMNIST(Split::Test, dir.str()), "labels of shape [N]", "[4, 1]");
}

TEST_CASE("FashionMNIST: the real test and training splits, when installed", "[data]") {
  const std::string dir = FashionMNIST::default_dir();  // honours RINGGRAD_FASHION_MNIST_DIR
  if (!FashionMNIST::available(dir)) {
    WARN("SKIPPED: Fashion-MNIST is not installed in " << dir << " (apt-get install dataset-fashion-mnist)");
    return;
  }
  const FashionMNIST test(Split::Test, dir);
  REQUIRE(test.size() == 10000);
  CHECK(test.images().shape() == Shape{10000, 28, 28});
  const auto labels = test.labels().to_vector<int64_t>();
  CHECK(*std::min_element(labels.begin(), labels.end()) == 0);
  CHECK(*std::max_element(labels.begin(), labels.end()) == 9);
  // Read independently with Python: gzip.open('t10k-labels-idx1-ubyte.gz').read()[8:13] is
  // [9, 2, 1, 1, 6] (an ankle boot, a pullover, two trousers, a shirt), and the first image's
  // 784 pixels sum to 33456.
  CHECK(std::vector<int64_t>(labels.begin(), labels.begin() + 5) == std::vector<int64_t>{9, 2, 1, 1, 6});
  const auto first = test.images().select(0, 0).contiguous().to_vector<uint8_t>();
  CHECK(std::accumulate(first.begin(), first.end(), int64_t{0}) == 33456);
  // Every class has exactly 1000 test images.
  std::vector<int> per_class(10, 0);
  for (int64_t l : labels) ++per_class[l];
  CHECK(per_class == std::vector<int>(10, 1000));

  const FashionMNIST train(Split::Train, dir);
  REQUIRE(train.size() == 60000);
  // Python: the training labels start [9, 0, 0, 3, 0]; the mean pixel over the set is 0.28604
  // (the 0.2860 the examples normalise with).
  const auto train_labels = train.labels().narrow(0, 0, 5).to_vector<int64_t>();
  CHECK(train_labels == std::vector<int64_t>{9, 0, 0, 3, 0});
  const uint8_t* px = train.images().data<uint8_t>();
  const double mean = std::accumulate(px, px + train.images().numel(), 0.0) / train.images().numel() / 255.0;
  CHECK(mean == Approx(0.28604).margin(1e-5));
}

// ========================================== DataLoader ==========================================

TEST_CASE("DataLoader: the order is a pure function of seed and epoch", "[data]") {
  const Indexed d = indexed_dataset(1003);
  DataLoader a(d.images, d.labels, DataLoaderOptions().seed(42));
  DataLoader b(d.images, d.labels, DataLoaderOptions().seed(42).batch_size(7).prefetch(false));
  DataLoader c(d.images, d.labels, DataLoaderOptions().seed(43));
  CHECK(a.permutation(0) == b.permutation(0));
  CHECK(a.permutation(5) == b.permutation(5));
  CHECK(a.permutation(0) != a.permutation(1));
  CHECK(a.permutation(0) != c.permutation(0));
  // Each is a permutation of 0 .. N-1.
  for (int64_t e : {0, 1, 1000000007}) {
    auto p = a.permutation(e);
    std::sort(p.begin(), p.end());
    std::vector<int64_t> iota(1003);
    std::iota(iota.begin(), iota.end(), int64_t{0});
    CHECK(p == iota);
  }
  // Iterating twice over one epoch, in two loaders, gives identical batches.
  a.set_epoch(3);
  b.set_epoch(3);
  CHECK(order_of(drain(a)) == a.permutation(3));
  CHECK(order_of(drain(b)) == a.permutation(3));
}

TEST_CASE("DataLoader: the shuffle matches an independent Philox and Lemire implementation", "[data]") {
  // The expected orders come from a separate Python implementation of Philox4x32-10 (checked against
  // Random123's known answer: counter 0, key 0 -> 6627e8d5 e169c58d bc57ac4c 9b00dbd8), Lemire's
  // bounded draw and Fisher-Yates. They must never change: a checkpoint's resume depends on them.
  const Indexed d10 = indexed_dataset(10);
  const DataLoader zero(d10.images, d10.labels, DataLoaderOptions().seed(0));
  CHECK(zero.permutation(0) == std::vector<int64_t>{6, 9, 0, 2, 1, 8, 4, 5, 7, 3});
  CHECK(zero.permutation(1) == std::vector<int64_t>{7, 2, 6, 1, 9, 4, 3, 0, 8, 5});
  const Indexed d13 = indexed_dataset(13);
  const DataLoader big_seed(d13.images, d13.labels, DataLoaderOptions().seed(12345678901234ULL));
  CHECK(big_seed.permutation(3) == std::vector<int64_t>{7, 6, 2, 9, 0, 4, 1, 3, 5, 12, 8, 11, 10});
  // Without shuffle, the identity.
  const DataLoader sequential(d10.images, d10.labels, DataLoaderOptions().shuffle(false));
  CHECK(sequential.permutation(4) == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
}

TEST_CASE("DataLoader: every sample appears exactly once per epoch", "[data]") {
  const Indexed d = indexed_dataset(1003);
  for (bool prefetch : {false, true}) {
    DataLoader loader(d.images, d.labels, DataLoaderOptions().batch_size(64).seed(9).prefetch(prefetch));
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      INFO("epoch " << epoch << " prefetch " << prefetch);
      loader.set_epoch(epoch);
      const auto batches = drain(loader);
      REQUIRE(batches.size() == 16);  // ceil(1003 / 64)
      auto order = order_of(batches);
      CHECK(order == loader.permutation(epoch));
      std::sort(order.begin(), order.end());
      CHECK(std::adjacent_find(order.begin(), order.end()) == order.end());
      CHECK(order.size() == 1003);
      // x rows belong to their labels: (i, i + 0.25, i + 0.5).
      for (const Batch& b : batches) {
        const auto x = b.x.to_vector<float>();
        const auto y = b.y.to_vector<int64_t>();
        for (size_t r = 0; r < y.size(); ++r) {
          CHECK(x[3 * r] == float(y[r]));
          CHECK(x[3 * r + 2] == float(y[r]) + 0.5f);
        }
      }
    }
  }
}

TEST_CASE("DataLoader: batch counts and sizes, with and without drop_last", "[data]") {
  struct Case {
    int64_t n, batch;
    bool drop_last;
    std::vector<int64_t> sizes;
  };
  const std::vector<Case> cases = {
      {10, 4, false, {4, 4, 2}}, {10, 4, true, {4, 4}}, {12, 4, false, {4, 4, 4}}, {12, 4, true, {4, 4, 4}},
      {3, 8, false, {3}},        {3, 8, true, {}},      {1, 1, false, {1}},        {0, 5, false, {}},
  };
  for (const Case& c : cases) {
    INFO("n " << c.n << " batch " << c.batch << " drop_last " << c.drop_last);
    const Indexed d = indexed_dataset(c.n);
    DataLoader loader(d.images, d.labels, DataLoaderOptions().batch_size(c.batch).drop_last(c.drop_last));
    CHECK(loader.size() == c.n);
    CHECK(loader.num_batches() == static_cast<int64_t>(c.sizes.size()));
    std::vector<int64_t> sizes;
    for (const Batch& b : loader) {
      CHECK(b.x.shape() == Shape{b.y.size(0), 3});
      sizes.push_back(b.y.size(0));
    }
    CHECK(sizes == c.sizes);
  }
  // drop_last drops the tail of this epoch's order: different samples each epoch.
  const Indexed d = indexed_dataset(10);
  DataLoader loader(d.images, d.labels, DataLoaderOptions().batch_size(4).drop_last(true));
  const auto p0 = loader.permutation(0);
  CHECK(order_of(drain(loader)) == std::vector<int64_t>(p0.begin(), p0.begin() + 8));
}

TEST_CASE("DataLoader: start_at resumes an epoch with the same batches, bit for bit", "[data]") {
  const Indexed d = indexed_dataset(203);
  for (bool prefetch : {false, true}) {
    INFO("prefetch " << prefetch);
    const auto options = DataLoaderOptions().batch_size(16).seed(5).normalize(0.3, 0.7).prefetch(prefetch);
    DataLoader full(d.images, d.labels, options);
    full.set_epoch(2);
    const auto all = drain(full);
    REQUIRE(all.size() == 13);
    for (int64_t k : {0, 1, 7, 12, 13}) {
      DataLoader resumed(d.images, d.labels, options);
      resumed.start_at(2, k);
      CHECK(resumed.position() == k);
      const auto tail = drain(resumed);
      REQUIRE(tail.size() == all.size() - k);
      for (size_t i = 0; i < tail.size(); ++i) {
        CHECK(same_values(tail[i].x, all[k + i].x));
        CHECK(same_values(tail[i].y, all[k + i].y));
      }
      CHECK(resumed.epoch() == 3);  // finishing the epoch moved the cursor on
      CHECK(resumed.position() == 0);
    }
  }
  DataLoader loader(d.images, d.labels, DataLoaderOptions().batch_size(16));
  CHECK_ERROR(loader.start_at(0, 14), "start_at", "[0, 13]", "got 14");
  CHECK_ERROR(loader.start_at(-1, 0), "start_at", "epoch >= 0");
}

TEST_CASE("DataLoader: the cursor moves to the next epoch, and a break keeps its place", "[data]") {
  const Indexed d = indexed_dataset(50);
  DataLoader loader(d.images, d.labels, DataLoaderOptions().batch_size(8).seed(1));
  // Without set_epoch, consecutive passes are consecutive epochs.
  CHECK(order_of(drain(loader)) == loader.permutation(0));
  CHECK(loader.epoch() == 1);
  CHECK(order_of(drain(loader)) == loader.permutation(1));

  // Break after two batches: the next loop continues with batch 2 of the same epoch.
  loader.set_epoch(4);
  std::vector<Batch> seen;
  for (const Batch& b : loader) {
    seen.push_back(b);
    if (seen.size() == 2) break;
  }
  CHECK(loader.epoch() == 4);
  CHECK(loader.position() == 2);
  for (const Batch& b : loader) seen.push_back(b);
  CHECK(order_of(seen) == loader.permutation(4));

  // reset() goes back to batch 0 of the current epoch; next() is the loop without the sugar.
  loader.set_epoch(6);
  Batch b;
  REQUIRE(loader.next(b));
  REQUIRE(loader.next(b));
  loader.reset();
  CHECK(loader.position() == 0);
  std::vector<Batch> again;
  while (loader.next(b)) again.push_back(b);
  CHECK(order_of(again) == loader.permutation(6));
  CHECK(loader.epoch() == 7);
}

TEST_CASE("DataLoader: prefetching and not prefetching give identical batches", "[data]") {
  const Indexed d = indexed_dataset(77);
  DataLoader on(d.images, d.labels, DataLoaderOptions().batch_size(10).seed(3).prefetch(true));
  DataLoader off(d.images, d.labels, DataLoaderOptions().batch_size(10).seed(3).prefetch(false));
  const auto a = drain(on), b = drain(off);
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(same_values(a[i].x, b[i].x));
    CHECK(same_values(a[i].y, b[i].y));
  }
}

TEST_CASE("DataLoader: batches are prepared on a background thread", "[data]") {
  const Indexed d = indexed_dataset(40);
  std::vector<std::thread::id> ids;  // written by the prefetch thread, read after the loop joined it
  std::mutex mu;
  DataLoader loader(d.images, d.labels, DataLoaderOptions().batch_size(8).transform([&](Batch&, int64_t, int64_t) {
    std::lock_guard<std::mutex> lock(mu);
    ids.push_back(std::this_thread::get_id());
  }));
  CHECK(drain(loader).size() == 5);
  std::lock_guard<std::mutex> lock(mu);
  REQUIRE(ids.size() == 5);
  for (auto id : ids) CHECK(id != std::this_thread::get_id());
}

TEST_CASE("DataLoader: breaking early or destroying the loader mid-epoch stops the thread promptly", "[data]") {
  const Indexed d = indexed_dataset(1000);
  std::atomic<int> prepared{0};
  // Each batch takes 20 ms to prepare, so the thread is always busy or waiting for room.
  auto slow = [&](Batch&, int64_t, int64_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ++prepared;
  };
  const auto start = std::chrono::steady_clock::now();
  {
    DataLoader loader(d.images, d.labels, DataLoaderOptions().batch_size(10).transform(slow));
    int taken = 0;
    for (const Batch& b : loader) {
      (void)b;
      if (++taken == 3) break;
    }
    // The thread prepares at most kPrefetchDepth batches ahead, then waits: it does not run on.
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    CHECK(prepared.load() <= 3 + DataLoader::kPrefetchDepth + 1);
  }  // destroyed here with the thread still alive
  {
    DataLoader loader(d.images, d.labels, DataLoaderOptions().batch_size(10).transform(slow));
    Batch b;
    REQUIRE(loader.next(b));
  }  // destroyed while preparing
  {
    // Moving the cursor mid-epoch stops the old thread; the new position is served correctly.
    DataLoader loader(d.images, d.labels, DataLoaderOptions().batch_size(10).transform(slow));
    Batch b;
    REQUIRE(loader.next(b));
    loader.start_at(1, 98);
    REQUIRE(loader.next(b));
    const auto p = loader.permutation(1);
    CHECK(b.y.to_vector<int64_t>() == std::vector<int64_t>(p.begin() + 980, p.begin() + 990));
  }
  const double elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Running each loader to its end would take 3 x 100 x 20 ms = 6 s; stopping early costs a few batches.
  CHECK(elapsed_s < 3.0);
}

TEST_CASE("DataLoader: an exception while preparing a batch reaches the caller", "[data]") {
  const Indexed d = indexed_dataset(60);
  for (bool prefetch : {true, false}) {
    INFO("prefetch " << prefetch);
    auto failing = [](Batch&, int64_t epoch, int64_t index) {
      if (index == 3) throw Error(detail::str("augment: cannot process batch ", index, " of epoch ", epoch));
    };
    DataLoader loader(d.images, d.labels, DataLoaderOptions().batch_size(10).prefetch(prefetch).transform(failing));
    int taken = 0;
    CHECK_ERROR(
        [&] {
          for (const Batch& b : loader) {
            (void)b;
            ++taken;
          }
        }(),
        "augment: cannot process batch 3 of epoch 0");
    CHECK(taken == 3);
    CHECK(loader.position() == 3);  // the cursor stays on the batch that failed
    // A non-ringgrad exception keeps its type across the thread.
    DataLoader other(d.images, d.labels,
                     DataLoaderOptions().batch_size(10).prefetch(prefetch).transform(
                         [](Batch&, int64_t, int64_t) { throw std::out_of_range("custom"); }));
    Batch b;
    CHECK_THROWS_AS(other.next(b), std::out_of_range);
  }
}

TEST_CASE("DataLoader: uint8 pixels are scaled to 0..1 and normalised", "[data]") {
  const Bytes pixels = {0, 1, 128, 255, 17, 200, 64, 3};
  const Tensor images = u8_tensor(pixels, {2, 2, 2});
  const Tensor labels = from_vector(std::vector<int64_t>{4, 7});
  const double mean = 0.2860, std = 0.3530;

  DataLoader plain(images, labels, DataLoaderOptions().shuffle(false));
  Batch b;
  REQUIRE(plain.next(b));
  CHECK(b.x.dtype() == DType::f32);
  CHECK(b.x.shape() == Shape{2, 4});
  CHECK(b.y.to_vector<int64_t>() == std::vector<int64_t>{4, 7});
  auto x = b.x.to_vector<float>();
  for (size_t i = 0; i < pixels.size(); ++i) CHECK(x[i] == static_cast<float>(pixels[i] / 255.0));

  DataLoader normalized(images, labels, DataLoaderOptions().shuffle(false).normalize(mean, std).flatten(false));
  REQUIRE(normalized.next(b));
  CHECK(b.x.shape() == Shape{2, 2, 2});
  x = b.x.to_vector<float>();
  for (size_t i = 0; i < pixels.size(); ++i) {
    INFO("pixel " << int(pixels[i]));
    CHECK(x[i] == static_cast<float>((pixels[i] / 255.0 - mean) / std));
  }
  CHECK(x[0] == Approx(-0.810198).epsilon(1e-6));  // (0 - 0.286) / 0.353
  CHECK(x[3] == Approx(2.022662).epsilon(1e-6));   // (1 - 0.286) / 0.353

  // Floating images are not scaled by 1/255, only normalised.
  const Tensor floats = from_vector(std::vector<double>{0.5, -1.0, 2.0, 0.0}, {4, 1});
  DataLoader f(floats, from_vector(std::vector<int64_t>{0, 1, 2, 3}),
               DataLoaderOptions().shuffle(false).normalize(0.5, 2.0).batch_size(4));
  REQUIRE(f.next(b));
  CHECK(b.x.shape() == Shape{4, 1});
  const auto fx = b.x.to_vector<float>();
  const std::vector<float> expected = {0.0f, -0.75f, 0.75f, -0.25f};
  for (size_t i = 0; i < 4; ++i) CHECK(fx[i] == Approx(expected[i]).margin(1e-7));
}

TEST_CASE("DataLoader: bad inputs and options are rejected with what was expected", "[data]") {
  const Indexed d = indexed_dataset(8);
  CHECK_ERROR(DataLoader(d.images, d.labels.to(DType::f32)), "DataLoader", "int64 labels", "float32");
  CHECK_ERROR(DataLoader(d.images, from_vector(std::vector<int64_t>{1, 2, 3})), "DataLoader", "as many labels",
              "3 labels", "[8, 3]");
  CHECK_ERROR(DataLoader(d.images.to(DType::i64), d.labels), "DataLoader", "uint8, float32 or float64", "int64");
  CHECK_ERROR(DataLoader(d.images, d.labels, DataLoaderOptions().batch_size(0)), "batch_size >= 1", "got 0");
  CHECK_ERROR(DataLoader(d.images, d.labels, DataLoaderOptions().normalize(0.5, 0.0)), "std > 0", "std 0");
  CHECK_ERROR(DataLoader(Tensor(), d.labels), "DataLoader", "defined");
}

TEST_CASE("DataLoader: batches of the real Fashion-MNIST test split, when installed", "[data]") {
  if (!FashionMNIST::available()) {
    WARN("SKIPPED: Fashion-MNIST is not installed in " << FashionMNIST::default_dir()
                                                       << " (apt-get install dataset-fashion-mnist)");
    return;
  }
  const FashionMNIST test(Split::Test);
  DataLoader loader(test, DataLoaderOptions().batch_size(256).seed(1).normalize(0.2860, 0.3530));
  CHECK(loader.num_batches() == 40);  // 39 * 256 + 16
  int64_t samples = 0;
  double sum = 0, sum_sq = 0;
  for (const Batch& b : loader) {
    CHECK(b.x.size(1) == 784);
    const float* x = b.x.data<float>();
    for (int64_t i = 0; i < b.x.numel(); ++i) sum += x[i], sum_sq += double(x[i]) * x[i];
    samples += b.y.size(0);
  }
  CHECK(samples == 10000);
  // Normalised with the training set's statistics, the test set comes out near mean 0, std 1.
  const double mean = sum / (samples * 784.0);
  CHECK(std::abs(mean) < 0.01);
  CHECK(std::sqrt(sum_sq / (samples * 784.0) - mean * mean) == Approx(1.0).margin(0.02));
}
