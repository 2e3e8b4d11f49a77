/// @file
/// nn/safetensors.h: reading and writing the safetensors format, the weights format of PyTorch,
/// Hugging Face and most other tools.
///
/// A file is three parts:
///
/// @code
///   8 bytes   N, the header length, little-endian unsigned
///   N bytes   JSON: {"fc1.weight": {"dtype": "F32", "shape": [256, 784], "data_offsets": [0, 802816]},
///                    ..., "__metadata__": {"format": "pt"}}   (padded with spaces to a multiple of 8)
///   the rest  the raw little-endian bytes of every tensor, row-major; data_offsets count from here
/// @endcode
///
/// ringgrad reads and writes the dtypes it has: F32, F64, I64, U8, BF16 and F16. The tensors must tile
/// the byte buffer exactly -- no gaps, no overlaps, nothing left over -- which is what the reference
/// loader requires too.
///
/// @code
///   nn::save_safetensors("mlp.safetensors", model->state_dict(), {{"epoch", "3"}});
///   nn::StateDict weights = nn::load_safetensors("mlp.safetensors");
/// @endcode
#pragma once

#include <map>
#include <string>

#include <ringgrad/nn/module.h>

namespace ringgrad {
namespace nn {

/// Writes `tensors` (each may be a view, on any device: it is copied to the host densely) and
/// string `metadata` to `path`. The file is written to a temporary file next to `path`
/// (`"<path>.tmp.<host>.<pid>.<random>"`), flushed to disk and renamed over `path`, so a crash or an
/// error never leaves a half-written file at `path` and never destroys the file that was there
/// before. A symlink is written through: its target (the end of the chain) is replaced, the link
/// stays. A FIFO, device, socket or directory at `path` is refused, never replaced. Temporaries that
/// dead writers left beside the target are removed (nn/file_io.h says which ones exactly).
void save_safetensors(const std::string& path, const StateDict& tensors,
                      const std::map<std::string, std::string>& metadata = {});

/// Reads every tensor of `path` onto the CPU. The whole header is checked before any tensor is
/// allocated, and any problem -- not a regular file (a FIFO fails at once, it is never waited on),
/// a truncated file, a header that is not JSON, a repeated key, nesting deeper than 4 levels, an
/// unknown dtype, offsets out of range or overlapping, a shape that does not match its byte count --
/// throws ringgrad::Error naming the file and the problem, quoting at most ~100 chars of a value.
/// `metadata`, when given, receives the "__metadata__" entries (it is only written when the whole
/// file loaded).
StateDict load_safetensors(const std::string& path, std::map<std::string, std::string>* metadata = nullptr);

/// The safetensors names of ringgrad's dtypes: "F32", "F64", "I64", "U8", "BF16", "F16".
const char* safetensors_dtype_name(DType dtype);

}  // namespace nn
}  // namespace ringgrad
