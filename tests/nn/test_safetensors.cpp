// tests/nn/test_safetensors.cpp: the safetensors reader and writer.
//
// Round trips of every dtype and of views, the exact byte layout, a file written by the reference
// library (tests/data/golden.safetensors), every kind of bad file with its error message, saves
// that fail without harming the previous file, and a fuzz loop over mutated files (CI runs it under
// AddressSanitizer, which turns any out-of-bounds read into a failure).
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <ringgrad/core/base/error.h>
#include <ringgrad/core/ops.h>
#include <ringgrad/core/tensor.h>
#include <ringgrad/nn/safetensors.h>
#include "test_util.h"

using namespace ringgrad;
using Catch::Matchers::Contains;
using ringgrad::test::TempDir;
namespace fs = std::filesystem;

namespace {

using ringgrad::test::read_file;
using ringgrad::test::write_file;

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// A safetensors file from its parts: the length prefix is computed, nothing is checked.
std::string make_file(const std::string& header, size_t buffer_bytes) {
  return le64(header.size()) + header + std::string(buffer_bytes, '\x5a');
}

// The tensor's elements in row-major order, as raw bytes (gathered by hand so bfloat16 works too).
std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor cpu = t.to(Device::cpu());
  const int64_t item = cpu.element_size();
  std::vector<uint8_t> out(static_cast<size_t>(cpu.numel() * item));
  if (cpu.numel() == 0) return out;
  const auto* base = static_cast<const uint8_t*>(cpu.data());
  std::vector<int64_t> index(cpu.dim(), 0);
  for (int64_t n = 0; n < cpu.numel(); ++n) {
    int64_t offset = 0;
    for (int64_t d = 0; d < cpu.dim(); ++d) offset += index[d] * cpu.stride(d);
    std::memcpy(out.data() + n * item, base + offset * item, item);
    for (int64_t d = cpu.dim() - 1; d >= 0 && ++index[d] == cpu.size(d); --d) index[d] = 0;
  }
  return out;
}

// A 2-byte tensor (bfloat16 or float16) from its bits: the host computes nothing in either.
Tensor from_bits(const std::vector<uint16_t>& bits, const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  REQUIRE(static_cast<size_t>(t.numel()) == bits.size());
  if (!bits.empty()) std::memcpy(t.data(), bits.data(), bits.size() * 2);
  return t;
}
Tensor bf16_from_bits(const std::vector<uint16_t>& bits, const Shape& shape) {
  return from_bits(bits, shape, DType::bf16);
}
Tensor f16_from_bits(const std::vector<uint16_t>& bits, const Shape& shape) {
  return from_bits(bits, shape, DType::f16);
}

void check_same(const Tensor& got, const Tensor& expected) {
  CHECK(got.dtype() == expected.dtype());
  CHECK(got.shape() == expected.shape());
  CHECK(got.device() == Device::cpu());
  if (got.numel() > 0) CHECK(got.is_contiguous());  // core's is_contiguous() says false for some empty shapes
  CHECK(bytes_of(got) == bytes_of(expected));
}

// The file that the fuzz loop and some bad-file cases start from.
nn::StateDict sample_tensors() {
  nn::StateDict s;
  s["weight"] = randn({3, 4}, DType::f32, /*seed=*/3);
  s["bias"] = randn({4}, DType::f64, /*seed=*/4);
  s["labels"] = from_vector<int64_t>({5, -6, 7});
  s["pixels"] = from_vector<uint8_t>({0, 128, 255, 9, 1}, {5, 1});
  s["half"] = bf16_from_bits({0x3f80, 0xc020}, {2});
  s["scalar"] = scalar_tensor(2.5);
  s["nothing"] = empty({0, 7}, DType::f32);
  return s;
}

}  // namespace

TEST_CASE("safetensors: every dtype round-trips bit-exactly", "[safetensors]") {
  TempDir dir;
  nn::StateDict tensors;
  tensors["f32"] = randn({3, 5}, DType::f32, /*seed=*/11);
  tensors["f64"] = randn({7}, DType::f64, /*seed=*/12);
  tensors["i64"] = from_vector<int64_t>({0, -1, INT64_MAX, INT64_MIN, 42, 7}, {2, 3});
  tensors["u8"] = from_vector<uint8_t>({0, 1, 127, 128, 254, 255, 3, 4, 5, 6, 7, 8}, {4, 1, 3});
  tensors["bf16"] = bf16_from_bits({0x3f80, 0xc020, 0x7f80, 0x0001}, {2, 2});
  tensors["f16"] =
      f16_from_bits({0x3c00, 0xc100, 0x7bff, 0x0001, 0x8000, 0x7e00}, {3, 2});  // 1 -2.5 65504 2^-24 -0 NaN
  tensors["scalar f32"] = scalar_tensor(-0.0);
  tensors["scalar i64"] = scalar_tensor(9, DType::i64);
  tensors["empty f64"] = empty({0, 4}, DType::f64);
  tensors["empty i64"] = empty({0}, DType::i64);
  tensors["empty bf16"] = empty({2, 0, 3}, DType::bf16);
  tensors["empty f16"] = empty({0}, DType::f16);
  tensors["nan and inf"] = from_vector<float>({NAN, INFINITY, -INFINITY, 1e-45f});
  const std::string path = dir.file("all.safetensors");
  nn::save_safetensors(path, tensors);

  const nn::StateDict loaded = nn::load_safetensors(path);
  REQUIRE(loaded.size() == tensors.size());
  for (const auto& [name, t] : tensors) {
    INFO("tensor " << name);
    REQUIRE(loaded.count(name));
    check_same(loaded.at(name), t);
  }
  CHECK(loaded.at("scalar f32").dim() == 0);
  CHECK(loaded.at("empty bf16").shape() == Shape{2, 0, 3});
  CHECK(loaded.at("f16").dtype() == DType::f16);
}

TEST_CASE("safetensors: views are written densely in row-major order", "[safetensors]") {
  TempDir dir;
  const Tensor base = arange(0.0, 24.0, 1.0, DType::f32).reshape({4, 6});
  const Tensor bits = bf16_from_bits({1, 2, 3, 4, 5, 6}, {2, 3});
  nn::StateDict views;
  views["transposed"] = base.t();
  views["narrowed"] = base.narrow(1, 2, 3);
  views["strided"] = base.slice(0, 0, 4, 2).slice(1, 1, 6, 2);
  views["selected column"] = base.select(1, 4);
  views["expanded"] = from_vector<int64_t>({1, 2, 3}, {3, 1}).expand({3, 5});
  views["permuted"] = arange(0.0, 24.0, 1.0, DType::f64).reshape({2, 3, 4}).permute({2, 0, 1});
  views["bf16 transposed"] = bits.t();
  views["f16 transposed"] = f16_from_bits({1, 2, 3, 4, 5, 6}, {2, 3}).t();
  for (const auto& [name, v] : views) {
    INFO(name);
    CHECK_FALSE(v.is_contiguous());
  }
  const std::string path = dir.file("views.safetensors");
  nn::save_safetensors(path, views);
  const nn::StateDict loaded = nn::load_safetensors(path);
  for (const auto& [name, v] : views) {
    INFO(name);
    check_same(loaded.at(name), v);
  }
  CHECK(loaded.at("transposed").to_vector<float>() ==
        std::vector<float>({0, 6, 12, 18, 1, 7, 13, 19, 2, 8, 14, 20, 3, 9, 15, 21, 4, 10, 16, 22, 5, 11, 17, 23}));
  CHECK(bytes_of(loaded.at("bf16 transposed")) == std::vector<uint8_t>({1, 0, 4, 0, 2, 0, 5, 0, 3, 0, 6, 0}));
  CHECK(bytes_of(loaded.at("f16 transposed")) == std::vector<uint8_t>({1, 0, 4, 0, 2, 0, 5, 0, 3, 0, 6, 0}));
  // The file holds exactly the elements of the views, not their bases' storage.
  const std::string bytes = read_file(path);
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes.data(), 8);
  int64_t expected = 0;
  for (const auto& [name, v] : views) expected += v.numel() * v.element_size();
  CHECK(static_cast<int64_t>(bytes.size() - 8 - header_bytes) == expected);
}

TEST_CASE("safetensors: metadata round-trips and is only written on success", "[safetensors]") {
  TempDir dir;
  const std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                       {"empty", ""},
                                                       {"quotes \"and\" \\ slashes", "line\nbreak\ttab"},
                                                       {"unicode", "\xc3\xa9t\xc3\xa9"}};
  const std::string path = dir.file("meta.safetensors");
  nn::save_safetensors(path, {{"x", scalar_tensor(1.0)}}, metadata);
  std::map<std::string, std::string> got = {{"stale", "entry"}};
  nn::load_safetensors(path, &got);
  CHECK(got == metadata);

  nn::save_safetensors(path, {{"x", scalar_tensor(1.0)}});
  nn::load_safetensors(path, &got);
  CHECK(got.empty());
  CHECK(read_file(path).find("__metadata__") == std::string::npos);  // as the reference: absent, not {}

  // A file that fails to load leaves the caller's map alone.
  write_file(path, make_file(R"({"__metadata__":{"a":"b"},"x":{"dtype":"I32","shape":[],"data_offsets":[0,4]}})", 4));
  got = {{"kept", "yes"}};
  CHECK_THROWS_AS(nn::load_safetensors(path, &got), Error);
  CHECK(got == std::map<std::string, std::string>{{"kept", "yes"}});
}

TEST_CASE("safetensors: the header is JSON padded to 8 bytes and tensors are packed in key order", "[safetensors]") {
  TempDir dir;
  const std::string path = dir.file("layout.safetensors");
  nn::StateDict tensors;
  tensors["b"] = from_vector<float>({1.0f});
  tensors["a"] = from_vector<uint8_t>({7, 8, 9});
  nn::save_safetensors(path, tensors);
  const std::string header =
      R"({"a":{"data_offsets":[0,3],"dtype":"U8","shape":[3]},"b":{"data_offsets":[3,7],"dtype":"F32","shape":[1]}})";
  const std::string padded = header + std::string((8 - header.size() % 8) % 8, ' ');
  const float one = 1.0f;
  std::string expected = le64(padded.size()) + padded + "\x07\x08\x09";
  expected.append(reinterpret_cast<const char*>(&one), 4);
  CHECK(read_file(path) == expected);
  CHECK(padded.size() % 8 == 0);
}

TEST_CASE("safetensors: reads a file written by the reference library bit-exactly", "[safetensors]") {
  // tests/data/golden.safetensors was written once by the official `safetensors` package (0.8.0,
  // safetensors.torch.save_file) with tests/data/make_golden_safetensors.py. That writer orders the
  // tensors by alignment, not by name, and places the empty tensor at the same offset as the next
  // one: both must load.
  const fs::path data_dir = RINGGRAD_TEST_DATA_DIR;  // tests/data, from CMake (__FILE__ may be relative)
  const std::string path = (data_dir / "golden.safetensors").string();
  REQUIRE(fs::exists(path));
  std::map<std::string, std::string> metadata;
  const nn::StateDict t = nn::load_safetensors(path, &metadata);
  CHECK(metadata == std::map<std::string, std::string>{{"format", "pt"}, {"producer", "safetensors 0.8.0"}});
  REQUIRE(t.size() == 7);

  const float f32[] = {0.0f, 1.5f, -2.25f, 3.4028235e38f, 1e-45f, -0.0f};
  CHECK(t.at("f32").shape() == Shape{2, 3});
  CHECK(std::memcmp(t.at("f32").data(), f32, sizeof f32) == 0);
  const double f64[] = {1.0 / 3.0, -1e300, 5e-324};
  CHECK(t.at("f64").shape() == Shape{3});
  CHECK(std::memcmp(t.at("f64").data(), f64, sizeof f64) == 0);
  CHECK(t.at("i64").shape() == Shape{2, 2});
  CHECK(t.at("i64").to_vector<int64_t>() == std::vector<int64_t>({0, -1, int64_t{1} << 62, INT64_MIN}));
  CHECK(t.at("u8").to_vector<uint8_t>() == std::vector<uint8_t>({0, 1, 127, 128, 255}));
  CHECK(t.at("bf16").dtype() == DType::bf16);
  const uint16_t bf16[] = {0x3f80, 0xc020, 0x3c00, 0x477f};  // 1, -2.5, 2^-7, 65280
  CHECK(std::memcmp(t.at("bf16").data(), bf16, sizeof bf16) == 0);
  CHECK(t.at("scalar").dim() == 0);
  CHECK(t.at("scalar").item() == 7.0);
  CHECK(t.at("empty").shape() == Shape{0, 3});
  CHECK(t.at("empty").dtype() == DType::f32);

  // And what ringgrad writes from it reads back the same.
  TempDir dir;
  nn::save_safetensors(dir.file("again.safetensors"), t, metadata);
  std::map<std::string, std::string> metadata_again;
  const nn::StateDict again = nn::load_safetensors(dir.file("again.safetensors"), &metadata_again);
  CHECK(metadata_again == metadata);
  for (const auto& [name, x] : t) check_same(again.at(name), x);
}

TEST_CASE("safetensors: reads F16 as IEEE half in little-endian order, and writes it back the same", "[safetensors]") {
  // golden.safetensors predates float16 in ringgrad; this file is what the reference writes for
  // torch.tensor([1.0, -2.5, 65504.0, 2**-24], dtype=torch.float16): IEEE binary16, little-endian.
  TempDir dir;
  const std::string header = R"({"h":{"dtype":"F16","shape":[2,2],"data_offsets":[0,8]}})";
  const std::string data("\x00\x3c\x00\xc1\xff\x7b\x01\x00", 8);
  const std::string path = dir.file("f16.safetensors");
  write_file(path, le64(header.size()) + header + data);
  const nn::StateDict t = nn::load_safetensors(path);
  const Tensor& h = t.at("h");
  CHECK(h.dtype() == DType::f16);
  CHECK(h.shape() == Shape{2, 2});
  CHECK(h.select(0, 0).select(0, 0).item() == 1.0);
  CHECK(h.select(0, 0).select(0, 1).item() == -2.5);
  CHECK(h.select(0, 1).select(0, 0).item() == 65504.0);
  CHECK(h.select(0, 1).select(0, 1).item() == std::ldexp(1.0, -24));
  nn::save_safetensors(dir.file("again.safetensors"), t);
  const std::string again = read_file(dir.file("again.safetensors"));
  CHECK(again.find(R"("dtype":"F16")") != std::string::npos);
  CHECK(again.substr(again.size() - 8) == data);
}

TEST_CASE("safetensors: each kind of bad file is rejected with a message naming the file and the problem",
          "[safetensors]") {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  struct Case {
    const char* what;
    std::string bytes;
    const char* message;
  };
  const std::string f32x1 = R"("dtype":"F32","shape":[1])";
  const std::vector<Case> cases = {
      {"empty file", "", "shorter than the 8-byte header length"},
      {"5-byte file", std::string("\x10\0\0\0\0", 5), "shorter than the 8-byte header length"},
      {"header length beyond the file", le64(1000) + "{}", "header length 1000 runs past the end of the file"},
      {"header length just past the file", le64(3) + "{}", "runs past the end of the file (10 bytes)"},
      {"absurd header length", le64(uint64_t{1} << 63) + "{}", "beyond the 100000000-byte limit"},
      {"not JSON", make_file("{not json}", 0), "not valid JSON"},
      {"truncated JSON", make_file(R"({"a":{"dtype":"F32")", 0), "not valid JSON"},
      {"binary header", make_file(std::string("\0\xff\xfe{", 4), 0), "not valid JSON"},
      {"JSON array", make_file("[1, 2]", 0), "must be a JSON object, got array"},
      {"JSON string", make_file(R"("hello")", 0), "must be a JSON object, got string"},
      {"entry not an object", make_file(R"({"a":3})", 0), "tensor 'a': expected a JSON object, got number"},
      {"missing data_offsets", make_file(R"({"a":{)" + f32x1 + "}}", 4), "expected the fields"},
      {"missing dtype", make_file(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", 4), "expected the fields"},
      {"dtype not a string", make_file(R"({"a":{"dtype":5,"shape":[1],"data_offsets":[0,4]}})", 4),
       "expected \"dtype\" to be a string"},
      {"unknown dtype", make_file(R"({"a":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})", 4),
       "unsupported dtype \"I32\" (ringgrad reads F32, F64, I64, U8, BF16 and F16)"},
      {"shape not an array", make_file(R"({"a":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", 4),
       "expected \"shape\" to be an array"},
      {"negative size", make_file(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
       "expected non-negative integer sizes"},
      {"fractional size", make_file(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4),
       "expected non-negative integer sizes"},
      {"overflowing shape",
       make_file(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,4]}})", 4), "overflows"},
      {"overflowing empty shape",
       make_file(R"({"a":{"dtype":"U8","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})", 0), "overflows"},
      {"size beyond uint64", make_file(R"({"a":{"dtype":"U8","shape":[1e30],"data_offsets":[0,0]}})", 0),
       "expected non-negative integer sizes"},
      {"too many dimensions", make_file(R"({"a":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}})", 1),
       "at most 8"},
      {"one offset", make_file(R"({"a":{)" + f32x1 + R"(,"data_offsets":[0]}})", 4),
       "\"data_offsets\" to be [begin, end]"},
      {"negative offset", make_file(R"({"a":{)" + f32x1 + R"(,"data_offsets":[-4,0]}})", 4), "[begin, end]"},
      {"offsets out of range", make_file(R"({"a":{)" + f32x1 + R"(,"data_offsets":[0,400]}})", 4),
       "data_offsets [0, 400] run past the end of the data buffer (4 bytes)"},
      {"huge offsets",
       make_file(R"({"a":{)" + f32x1 + R"(,"data_offsets":[18446744073709551612,18446744073709551615]}})", 4),
       "run past the end of the data buffer"},
      {"end before begin", make_file(R"({"a":{)" + f32x1 + R"(,"data_offsets":[4,0]}})", 4), "end before they begin"},
      {"shape and bytes disagree", make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4),
       "needs 8 bytes, but data_offsets [0, 4] hold 4"},
      {"overlapping tensors",
       make_file(
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
           12),
       "tensor 'b' at bytes [4, 12) overlaps tensor 'a' at [0, 8)"},
      {"two tensors on the same bytes",
       make_file(R"({"a":{)" + f32x1 + R"(,"data_offsets":[0,4]},"b":{)" + f32x1 + R"(,"data_offsets":[0,4]}})", 4),
       "overlaps"},
      {"gap between tensors",
       make_file(R"({"a":{)" + f32x1 + R"(,"data_offsets":[0,4]},"b":{)" + f32x1 + R"(,"data_offsets":[8,12]}})", 12),
       "bytes [4, 8) of the data buffer belong to no tensor"},
      {"gap at the start", make_file(R"({"a":{)" + f32x1 + R"(,"data_offsets":[4,8]}})", 8), "belong to no tensor"},
      {"leftover bytes", make_file(R"({"a":{)" + f32x1 + R"(,"data_offsets":[0,4]}})", 9), "5 bytes are left over"},
      {"duplicate tensor",
       make_file(R"({"a":{)" + f32x1 + R"(,"data_offsets":[0,4]},"a":{)" + f32x1 + R"(,"data_offsets":[4,8]}})", 8),
       "repeats the key \"a\""},
      {"duplicate field", make_file(R"({"a":{"dtype":"F64","dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4),
       "repeats the key \"dtype\""},
      {"metadata not an object", make_file(R"({"__metadata__":[1]})", 0), "\"__metadata__\" must be an object"},
      {"metadata value not a string", make_file(R"({"__metadata__":{"epoch":3}})", 0),
       "\"__metadata__\" entry 'epoch' must be a string"},
  };
  for (const Case& c : cases) {
    INFO("case: " << c.what);
    write_file(path, c.bytes);
    CHECK_THROWS_WITH(nn::load_safetensors(path), Contains(c.message) && Contains("load_safetensors: '" + path + "'"));
  }

  CHECK_THROWS_WITH(nn::load_safetensors(dir.file("missing.safetensors")),
                    Contains("missing.safetensors") && Contains("cannot open the file"));
  fs::create_directory(dir.file("a_directory"));
  CHECK_THROWS_WITH(nn::load_safetensors(dir.file("a_directory")), Contains("a_directory"));
}

TEST_CASE("safetensors: a valid hand-made file loads, with tensors in any order and trailing spaces", "[safetensors]") {
  TempDir dir;
  const std::string path = dir.file("ok.safetensors");
  std::string data(12, '\0');
  const float a = 1.5f;
  const float b[] = {2.0f, -3.0f};
  std::memcpy(&data[0], b, 8);
  std::memcpy(&data[8], &a, 4);
  const std::string header =
      R"({"a":{"dtype":"F32","shape":[],"data_offsets":[8,12]},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"z":{"dtype":"I64","shape":[0,5],"data_offsets":[12,12]}}   )";
  write_file(path, le64(header.size()) + header + data);
  const nn::StateDict t = nn::load_safetensors(path);
  CHECK(t.at("a").item() == 1.5);
  CHECK(t.at("b").to_vector<float>() == std::vector<float>({2.0f, -3.0f}));
  CHECK(t.at("z").shape() == Shape{0, 5});
}

TEST_CASE("safetensors: saving rejects what cannot be written", "[safetensors]") {
  TempDir dir;
  const std::string path = dir.file("x.safetensors");
  CHECK_THROWS_WITH(nn::save_safetensors(path, {{"__metadata__", scalar_tensor(1.0)}}), Contains("reserved"));
  CHECK_THROWS_WITH(nn::save_safetensors(path, {{"w", Tensor()}}), Contains("tensor 'w' is undefined"));
  CHECK_THROWS_WITH(nn::save_safetensors(path, {{std::string("bad\xff utf8"), scalar_tensor(1.0)}}),
                    Contains("cannot encode the header"));
  CHECK(dir.entries().empty());
}

TEST_CASE("safetensors: a save replaces the file through a renamed temporary", "[safetensors]") {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  nn::save_safetensors(path, {{"x", from_vector<float>({1.0f})}});
  nn::save_safetensors(path, {{"x", from_vector<float>({2.0f, 3.0f})}});
  CHECK(nn::load_safetensors(path).at("x").to_vector<float>() == std::vector<float>({2.0f, 3.0f}));
  CHECK(dir.entries() == std::vector<std::string>{"model.safetensors"});  // no temporary left behind
}

TEST_CASE("safetensors: a failed save leaves the previous file intact", "[safetensors]") {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  nn::save_safetensors(path, {{"x", from_vector<float>({1.0f, 2.0f})}}, {{"version", "old"}});
  const std::string before = read_file(path);

  SECTION("the input is invalid") {
    CHECK_THROWS_AS(nn::save_safetensors(path, {{"x", scalar_tensor(1.0)}, {"y", Tensor()}}), Error);
  }
  SECTION("the directory does not exist") {
    const std::string elsewhere = dir.file("no/such/dir/ckpt.safetensors");
    CHECK_THROWS_WITH(nn::save_safetensors(elsewhere, {{"x", scalar_tensor(1.0)}}),
                      Contains("cannot create the temporary file") && Contains("no/such/dir/ckpt.safetensors.tmp."));
  }
  SECTION("the disk fills up halfway through the data") {
    // RLIMIT_FSIZE makes write() fail with EFBIG past 64 KiB, as a full disk would; the new file
    // is 4 MiB, so the failure comes in the middle of the tensor data. Root is not exempt from it.
    struct rlimit old_limit {};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &old_limit) == 0);
    struct rlimit small = old_limit;
    small.rlim_cur = 64 * 1024;
    auto old_handler = ::signal(SIGXFSZ, SIG_IGN);  // or the kernel kills the process instead
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
    bool threw = false;
    std::string message;
    try {
      nn::save_safetensors(path, {{"x", zeros({1024, 1024})}}, {{"version", "new"}});
    } catch (const Error& e) {
      threw = true;
      message = e.what();
    }
    ::setrlimit(RLIMIT_FSIZE, &old_limit);
    ::signal(SIGXFSZ, old_handler);
    CHECK(threw);
    CHECK_THAT(message, Contains("write to '" + path + ".tmp."));
  }
  SECTION("the target is a directory") {
    // Refused before anything is written (tests/nn/test_file_io.cpp has the FIFOs and devices).
    const std::string blocked = dir.file("blocked");
    fs::create_directories(blocked + "/inside");
    CHECK_THROWS_WITH(nn::save_safetensors(blocked, {{"x", scalar_tensor(1.0)}}), Contains("is a directory"));
    CHECK(fs::is_directory(blocked + "/inside"));
    fs::remove_all(blocked);
  }

  CHECK(read_file(path) == before);
  std::map<std::string, std::string> metadata;
  CHECK(nn::load_safetensors(path, &metadata).at("x").to_vector<float>() == std::vector<float>({1.0f, 2.0f}));
  CHECK(metadata.at("version") == "old");
  CHECK(dir.entries() == std::vector<std::string>{"ckpt.safetensors"});
}

TEST_CASE("safetensors: mutated files either load or throw ringgrad::Error", "[safetensors]") {
  TempDir dir;
  const std::string good_path = dir.file("good.safetensors");
  nn::save_safetensors(good_path, sample_tensors(), {{"format", "pt"}, {"step", "12"}});
  const std::string good = read_file(good_path);
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, good.data(), 8);
  const std::vector<std::string> fragments = {"{",
                                              "}",
                                              "[",
                                              "]",
                                              "\"",
                                              ",",
                                              ":",
                                              "-1",
                                              "0",
                                              "1e999",
                                              "18446744073709551615",
                                              "9223372036854775807",
                                              "\"F16\"",
                                              "\"I32\"",
                                              "\"BF16\"",
                                              "\"U8\"",
                                              "\"data_offsets\":[0,0]",
                                              "\"shape\":[",
                                              "null",
                                              "true",
                                              "\"__metadata__\"",
                                              "\\u0000",
                                              "\\ud800",
                                              "\xff",
                                              "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}",
                                              " ",
                                              "[[[[[[[[[[[[[[[[[[[[",
                                              "\"dtype\":\"I64\""};

  std::mt19937_64 rng(20240611);
  auto below = [&](uint64_t n) { return n == 0 ? uint64_t{0} : rng() % n; };
  const std::string path = dir.file("mutated.safetensors");
  int loaded = 0, rejected = 0;
  for (int iteration = 0; iteration < 2000; ++iteration) {
    std::string bytes = good;
    const int mutations = 1 + static_cast<int>(below(3));
    for (int m = 0; m < mutations; ++m) {
      switch (below(7)) {
        case 0: {  // flip bits anywhere
          if (!bytes.empty()) bytes[below(bytes.size())] ^= static_cast<char>(1 + below(255));
          break;
        }
        case 1: {  // flip bits in the header, where they matter most
          const uint64_t end = std::min<uint64_t>(bytes.size(), 8 + header_bytes);
          if (end > 8) bytes[8 + below(end - 8)] ^= static_cast<char>(1 + below(255));
          break;
        }
        case 2:  // truncate
          bytes.resize(below(bytes.size() + 1));
          break;
        case 3:  // extend
          for (uint64_t n = 1 + below(64); n > 0; --n) bytes.push_back(static_cast<char>(rng()));
          break;
        case 4: {  // a new header length: nearby, a multiple of 8, or anything
          if (bytes.size() < 8) break;
          uint64_t n = 0;
          switch (below(3)) {
            case 0: n = header_bytes + below(33) - 16; break;
            case 1: n = 8 * below(64); break;
            default: n = rng(); break;
          }
          const std::string prefix = le64(n);
          std::copy(prefix.begin(), prefix.end(), bytes.begin());
          break;
        }
        case 5: {  // splice a JSON fragment into the header, keeping the length field honest or not
          const uint64_t end = std::min<uint64_t>(bytes.size(), 8 + header_bytes);
          if (end <= 8) break;
          const std::string& f = fragments[below(fragments.size())];
          const uint64_t at = 8 + below(end - 8);
          if (below(2)) {
            bytes.insert(at, f);
            const std::string prefix = le64(header_bytes + f.size());
            std::copy(prefix.begin(), prefix.end(), bytes.begin());
          } else {
            bytes.replace(at, std::min<uint64_t>(f.size(), end - at), f);
          }
          break;
        }
        default: {  // rewrite one digit of the header (shapes and offsets)
          std::vector<size_t> digits;
          for (size_t i = 8; i < std::min<uint64_t>(bytes.size(), 8 + header_bytes); ++i)
            if (bytes[i] >= '0' && bytes[i] <= '9') digits.push_back(i);
          if (!digits.empty()) bytes[digits[below(digits.size())]] = static_cast<char>('0' + below(10));
          break;
        }
      }
    }
    write_file(path, bytes);
    try {
      std::map<std::string, std::string> metadata;
      const nn::StateDict tensors = nn::load_safetensors(path, &metadata);
      int64_t total = 0;
      for (const auto& [name, t] : tensors) total += t.numel() * t.element_size();
      REQUIRE(total <= static_cast<int64_t>(bytes.size()));  // never more data than the file holds
      ++loaded;
    } catch (const Error&) {
      ++rejected;
    } catch (const std::exception& e) {
      FAIL("iteration " << iteration << ": expected ringgrad::Error, got another exception: " << e.what());
    }
  }
  CHECK(rejected > 0);
  CHECK(loaded > 0);  // flips in the data buffer leave a valid file
  CHECK(loaded + rejected == 2000);
}

// A header of `count` one-byte U8 tensors "t0", "t1", ... packed in order, with `tail` spliced in
// before the closing brace.
std::string many_tensors_header(int count, const std::string& tail = "") {
  std::string header = "{";
  for (int i = 0; i < count; ++i)
    header += "\"t" + std::to_string(i) + "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[" + std::to_string(i) +
              "," + std::to_string(i + 1) + "]},";
  header.pop_back();
  return header + tail + "}";
}

TEST_CASE("safetensors: a key repeated at the end of a 100000-tensor header is found", "[safetensors]") {
  // One pass with one hash set per object: the parser this replaced was quadratic (40k entries
  // took 19 s). bench_safetensors_header times it; this checks the results. The repeat is only
  // seen at the very end, so the whole header is parsed (the full load of 100000 tiny tensors is
  // left to the benchmark: it costs 5 s under ASan).
  TempDir dir;
  const std::string path = dir.file("many.safetensors");
  const int n = 100000;
  write_file(path, make_file(many_tensors_header(n, R"(,"t17":{"dtype":"U8","shape":[0],"data_offsets":[0,0]})"), n));
  CHECK_THROWS_WITH(nn::load_safetensors(path), Contains("repeats the key \"t17\""));
  const int loaded = 20000;
  write_file(path, make_file(many_tensors_header(loaded), loaded));
  const nn::StateDict t = nn::load_safetensors(path);
  CHECK(t.size() == static_cast<size_t>(loaded));
  CHECK(t.at("t19999").shape() == Shape{1});

  // In the metadata too.
  write_file(path, make_file(R"({"__metadata__":{"a":"1","b":"2","a":"3"}})", 0));
  CHECK_THROWS_WITH(nn::load_safetensors(path), Contains("repeats the key \"a\""));
  // The same name in two different objects is no repeat.
  write_file(path, make_file(R"({"dtype":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1));
  CHECK(nn::load_safetensors(path).count("dtype") == 1);
}

// The high-water mark of this process's resident memory (VmHWM), in KiB.
int64_t peak_resident_kib() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6));
  return -1;
}

TEST_CASE("safetensors: parsing a 200000-tensor header takes about 100 bytes per tensor", "[safetensors]") {
#if defined(__SANITIZE_ADDRESS__)
  WARN("skipped under AddressSanitizer: its redzones and quarantine change every allocation's size");
  return;
#endif
  // The parser used to build a DOM of the whole header plus a set of every name, ~900 bytes per
  // tensor (a 1M-tensor header took 1.37 GB). It now keeps an Entry (~130 bytes) per tensor.
  // The repeat at the end makes the load fail after the whole parse, before any tensor exists, so
  // the growth of the peak is the parser's alone; it is measured in a child, whose peak starts at
  // what it inherits. Old parser: 149 MB here; this one: 28 MB (header text 14 MB, entries 26 MB, some
  // freed before the entries peak).
  TempDir dir;
  const std::string path = dir.file("many.safetensors");
  const int n = 200000;
  write_file(path, make_file(many_tensors_header(n, R"(,"t17":{"dtype":"U8","shape":[0],"data_offsets":[0,0]})"), n));
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const int64_t before = peak_resident_kib();
    bool refused = false;
    try {
      nn::load_safetensors(path);
    } catch (const Error&) {
      refused = true;
    }
    const int64_t grown_kib = refused && before >= 0 ? peak_resident_kib() - before : -1;
    ::_exit(::write(fds[1], &grown_kib, sizeof grown_kib) == sizeof grown_kib ? 0 : 1);
  }
  ::close(fds[1]);
  int64_t grown_kib = -1;
  const ssize_t got = ::read(fds[0], &grown_kib, sizeof grown_kib);
  ::close(fds[0]);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(got == static_cast<ssize_t>(sizeof grown_kib));
  INFO("peak resident memory grew by " << grown_kib << " KiB for " << n << " tensors");
  CHECK(grown_kib >= 0);
  CHECK(grown_kib < 80 * 1024);  // 400 bytes per tensor: room for malloc's slack, far below the DOM's
}

TEST_CASE("safetensors: a deeply nested header is rejected cleanly before it is built", "[safetensors]") {
  // A million levels: the error message used to dump() the value, one stack frame per level.
  TempDir dir;
  const std::string path = dir.file("deep.safetensors");
  const size_t depth = 1000000;
  const std::string deep = std::string(depth, '[') + std::string(depth, ']');
  const std::vector<std::string> headers = {
      R"({"a":{"dtype":"F32","shape":)" + deep + R"(,"data_offsets":[0,4]}})",
      R"({"__metadata__":{"k":)" + deep + "}}",
      [&] {  // {"a":{"a":{"a":... never closed: refused before the end is seen
        std::string open;
        for (size_t i = 0; i < depth; ++i) open += "{\"a\":";
        return open;
      }(),
      deep,
  };
  for (const std::string& header : headers) {
    write_file(path, make_file(header, 4));
    CHECK_THROWS_WITH(nn::load_safetensors(path), Contains("nests arrays and objects deeper than 4 levels"));
  }
  // Four levels still load (an entry's extra field is ignored); five do not.
  const std::string entry = R"("dtype":"F32","shape":[1],"data_offsets":[0,4])";
  write_file(path, make_file(R"({"a":{)" + entry + R"(,"extra":{"x":[1]}}})", 4));
  CHECK(nn::load_safetensors(path).count("a") == 1);
  write_file(path, make_file(R"({"a":{)" + entry + R"(,"extra":{"x":[[1]]}}})", 4));
  CHECK_THROWS_WITH(nn::load_safetensors(path), Contains("deeper than 4 levels"));
}

TEST_CASE("safetensors: a tensor name from the file is escaped in an error", "[safetensors]") {
  // An ESC sequence and a newline in a name (JSON's \u escapes) must not reach a terminal or a log raw.
  TempDir dir;
  const std::string path = dir.file("escape.safetensors");
  write_file(path, make_file(R"({"a\u001b[2J\nERROR: x":3})", 4));
  std::string message;
  try {
    nn::load_safetensors(path);
  } catch (const Error& e) {
    message = e.what();
  }
  CHECK_THAT(message, Contains("tensor 'a\\x1b[2J\\x0aERROR: x': expected a JSON object"));
  CHECK(message.find('\x1b') == std::string::npos);
  CHECK(message.find('\n') == std::string::npos);
}

TEST_CASE("safetensors: an error quotes at most about 100 characters of what the file holds", "[safetensors]") {
  TempDir dir;
  const std::string path = dir.file("long.safetensors");
  const std::string huge(120000, 'v');
  struct Case {
    const char* what;
    std::string header;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"a huge value", R"({"a":{"dtype":"F32","shape":")" + huge + R"(","data_offsets":[0,4]}})",
       "expected \"shape\" to be an array, got \"vvvv"},
      {"a huge array", R"({"a":{"dtype":"F32","shape":[")" + huge + R"(",1],"data_offsets":[0,4]}})",
       "expected non-negative integer sizes, got shape [\"vvvv"},
      {"huge offsets", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,")" + huge + R"("]}})",
       "to be [begin, end] with non-negative integers, got [0,\"vvvv"},
      {"a huge tensor name", R"({")" + huge + R"(":3})", "tensor 'vvvv"},
      {"a huge repeated key", R"({")" + huge + R"(":3,")" + huge + R"(":3})", "repeats the key \"vvvv"},
      {"a huge metadata value", R"({"__metadata__":{")" + huge + R"(":[")" + huge + R"("]}})", "entry 'vvvv"},
      {"an unterminated huge string", R"({"a":")" + huge, "not valid JSON"},
  };
  for (const Case& c : cases) {
    INFO("case: " << c.what);
    write_file(path, make_file(c.header, 4));
    std::string message;
    try {
      nn::load_safetensors(path);
    } catch (const Error& e) {
      message = e.what();
    }
    CHECK_THAT(message, Contains(c.message) && Contains(" bytes)"));
    CHECK(message.size() < 700);
  }
}
