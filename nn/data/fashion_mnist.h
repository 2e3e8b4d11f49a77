/// @file
/// nn/data/fashion_mnist.h: the Fashion-MNIST dataset (Zalando's 28x28 grey clothing images).
///
/// 60000 training and 10000 test images, 10 classes, in the IDX files of the original release:
/// @code
///   train-images-idx3-ubyte.gz  train-labels-idx1-ubyte.gz  t10k-images-idx3-ubyte.gz  t10k-labels-idx1-ubyte.gz
/// @endcode
/// The unpacked copies (same names without .gz) are read as well.
///
/// Where the files are looked for, first match wins:
/// @code
///   1. the `dir` given to the constructor,
///   2. the environment variable RINGGRAD_FASHION_MNIST_DIR,
///   3. /usr/share/datasets/fashion-mnist, where the Debian package dataset-fashion-mnist installs them.
/// @endcode
///
/// @code
///   data::FashionMNIST train(data::Split::Train);
///   data::DataLoader loader(train, data::DataLoaderOptions().batch_size(256).normalize(0.2860, 0.3530));
/// @endcode
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include <ringgrad/core/tensor.h>

namespace ringgrad {
namespace nn {
namespace data {

/// Which part of the dataset: the 60000 training images or the 10000 test images.
enum class Split { Train, Test };

/// One split of Fashion-MNIST, loaded into memory (see the top of this file for where it is found).
class FashionMNIST {
 public:
  /// The third place the files are looked for (the Debian package's folder).
  static constexpr const char* kDefaultDir = "/usr/share/datasets/fashion-mnist";
  /// The environment variable that names a folder to look in first.
  static constexpr const char* kDirEnvVar = "RINGGRAD_FASHION_MNIST_DIR";
  static constexpr int64_t kImageSize = 28;   ///< images are kImageSize x kImageSize
  static constexpr int64_t kNumClasses = 10;  ///< labels are 0 .. kNumClasses - 1

  /// Loads one split (about 0.3 s for the training set: most of it is inflating 26 MB of gzip).
  /// Throws ringgrad::Error naming the missing or malformed file and how to get the dataset.
  explicit FashionMNIST(Split split, const std::string& dir = "");

  const Tensor& images() const { return images_; }  ///< uint8 [N, 28, 28], pixels 0 (background) .. 255
  const Tensor& labels() const { return labels_; }  ///< int64 [N], class indices 0 .. 9
  int64_t size() const { return images_.size(0); }  ///< N, the number of images
  Split split() const { return split_; }            ///< as given
  const std::string& dir() const { return dir_; }   ///< the folder the files came from

  /// "T-shirt/top", "Trouser", ..., "Ankle boot": the name of each class index.
  static const std::array<std::string, kNumClasses>& class_names();
  /// The folder used when none is given: $RINGGRAD_FASHION_MNIST_DIR if set and non-empty, else kDefaultDir.
  static std::string default_dir();
  /// Whether all four files are present in `dir` (default_dir() when empty). Checks existence only;
  /// the constructor still validates the contents.
  static bool available(const std::string& dir = "");

 private:
  Split split_;
  std::string dir_;
  Tensor images_;
  Tensor labels_;
};

}  // namespace data
}  // namespace nn
}  // namespace ringgrad
