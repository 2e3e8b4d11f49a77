// nn/data/fashion_mnist.cpp: finding, reading and checking the four Fashion-MNIST files.
#include <ringgrad/nn/data/fashion_mnist.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include <ringgrad/nn/data/idx.h>

namespace ringgrad {
namespace nn {
namespace data {
namespace {

constexpr const char* kHowToGet =
    "install the Debian package with `apt-get install dataset-fashion-mnist`, or set "
    "RINGGRAD_FASHION_MNIST_DIR to a folder holding the four *-ubyte.gz files of "
    "https://github.com/zalandoresearch/fashion-mnist";

std::string file_stem(Split split, const char* kind) {
  return std::string(split == Split::Train ? "train" : "t10k") + "-" + kind;
}

// The path of one file: the .gz if present, else its unpacked copy; empty when neither exists.
std::string find_file(const std::string& dir, const std::string& stem) {
  std::error_code ec;
  const std::filesystem::path base = std::filesystem::path(dir) / stem;
  std::string gz = base.string() + ".gz";
  if (std::filesystem::is_regular_file(gz, ec)) return gz;
  if (std::filesystem::is_regular_file(base, ec)) return base.string();
  return "";
}

std::string resolve_dir(const std::string& dir) { return dir.empty() ? FashionMNIST::default_dir() : dir; }

}  // namespace

std::string FashionMNIST::default_dir() {
  const char* env = std::getenv(kDirEnvVar);
  return env && *env ? std::string(env) : std::string(kDefaultDir);
}

bool FashionMNIST::available(const std::string& dir) {
  const std::string d = resolve_dir(dir);
  for (Split split : {Split::Train, Split::Test})
    for (const char* kind : {"images-idx3-ubyte", "labels-idx1-ubyte"})
      if (find_file(d, file_stem(split, kind)).empty()) return false;
  return true;
}

const std::array<std::string, FashionMNIST::kNumClasses>& FashionMNIST::class_names() {
  static const std::array<std::string, kNumClasses> names = {
      "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};
  return names;
}

FashionMNIST::FashionMNIST(Split split, const std::string& dir) : split_(split), dir_(resolve_dir(dir)) {
  // Says where the folder came from, so a wrong RINGGRAD_FASHION_MNIST_DIR is easy to spot.
  const char* env = std::getenv(kDirEnvVar);
  const std::string origin = !dir.empty()  ? "given to the constructor"
                             : env && *env ? std::string("from ") + kDirEnvVar
                                           : "the default location";
  auto locate = [&](const char* kind) {
    const std::string stem = file_stem(split, kind);
    std::string path = find_file(dir_, stem);
    RINGGRAD_CHECK(!path.empty(), "FashionMNIST: missing ", (std::filesystem::path(dir_) / stem).string(),
                   ".gz (looked in '", dir_, "', ", origin, "); ", kHowToGet);
    return path;
  };
  const std::string images_path = locate("images-idx3-ubyte");
  const std::string labels_path = locate("labels-idx1-ubyte");

  images_ = read_idx(images_path);
  const Tensor raw_labels = read_idx(labels_path);
  RINGGRAD_CHECK(images_.dim() == 3 && images_.size(1) == kImageSize && images_.size(2) == kImageSize,
                 "FashionMNIST: expected images of shape [N, 28, 28] in '", images_path, "', got ", images_.shape());
  RINGGRAD_CHECK(raw_labels.dim() == 1, "FashionMNIST: expected labels of shape [N] in '", labels_path, "', got ",
                 raw_labels.shape());
  RINGGRAD_CHECK(raw_labels.size(0) == images_.size(0), "FashionMNIST: '", images_path, "' holds ", images_.size(0),
                 " images but '", labels_path, "' holds ", raw_labels.size(0), " labels; expected the same count");

  // uint8 -> int64, the dtype cross_entropy takes, checking each label names a class.
  const int64_t n = raw_labels.numel();
  labels_ = empty({n}, DType::i64);
  const uint8_t* src = raw_labels.data<uint8_t>();
  auto* dst = labels_.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    RINGGRAD_CHECK(src[i] < kNumClasses, "FashionMNIST: label ", int{src[i]}, " at index ", i, " of '", labels_path,
                   "' is not a class index; expected 0 to ", kNumClasses - 1);
    dst[i] = src[i];
  }
}

}  // namespace data
}  // namespace nn
}  // namespace ringgrad
