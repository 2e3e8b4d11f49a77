/// @file
/// nn/data/idx.h: the IDX file format of MNIST and Fashion-MNIST, read (gzipped or plain) and written.
///
/// An IDX file is a 4-byte magic number, one big-endian uint32 per dimension, then the elements in
/// row-major order:
///
/// @code
///   byte 0, 1   0x00 0x00
///   byte 2      element type: 0x08 unsigned byte (the only one used by the MNIST family and the only
///               one read here); 0x09 signed byte, 0x0B int16, 0x0C int32, 0x0D float32, 0x0E float64
///   byte 3      number of dimensions D
///   4*D bytes   the sizes, big-endian uint32 each
///   payload     prod(sizes) elements
/// @endcode
///
/// Files are read through zlib's gzread, which inflates a gzip file and passes a plain one through,
/// so "train-images-idx3-ubyte.gz" and its unpacked copy read the same. A malformed file -- bad magic,
/// another element type, a header or payload cut short, bytes after the payload, sizes too large to
/// be real -- throws ringgrad::Error naming the file and what is wrong; nothing is allocated until
/// the sizes have been checked against the file's own size.
#pragma once

#include <cstdint>
#include <string>

#include <ringgrad/core/tensor.h>

namespace ringgrad {
namespace nn {
namespace data {

/// The largest payload read_idx accepts: 4 GiB, about 90 times Fashion-MNIST's training images.
constexpr int64_t kMaxIdxPayloadBytes = int64_t{1} << 32;

/// Reads an IDX file of unsigned bytes (type 0x08) into a uint8 CPU tensor of the file's shape:
/// [N, 28, 28] for an images file, [N] for a labels file.
Tensor read_idx(const std::string& path);

/// Writes a uint8 tensor (1 to 8 dimensions, each below 2^32) as an IDX file, gzip-compressed when
/// `gzip` is true. Lets a program save a subset in the format read_idx (and torchvision) reads.
void write_idx(const std::string& path, const Tensor& data, bool gzip = false);

}  // namespace data
}  // namespace nn
}  // namespace ringgrad
