// nn/data/idx.cpp: read_idx and write_idx over zlib's gz* functions.
#include <ringgrad/nn/data/idx.h>

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

namespace ringgrad {
namespace nn {
namespace data {
namespace {

constexpr uint8_t kTypeUnsignedByte = 0x08;

// deflate's largest compression ratio (zlib's FAQ: 1032:1, a long run of one byte). A gzip file of
// S bytes therefore inflates to at most 1032 * S: a header whose sizes need more is lying, and is
// rejected before anything is allocated.
constexpr int64_t kMaxInflateRatio = 1032;

const char* type_name(uint8_t type) {
  switch (type) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return nullptr;
  }
}

std::string hex_byte(uint8_t b) {
  static const char* digits = "0123456789abcdef";
  return std::string("0x") + digits[b >> 4] + digits[b & 15];
}

// Closes the file however the reader leaves (return or throw).
struct GzFile {
  gzFile file = nullptr;
  ~GzFile() {
    if (file) gzclose(file);
  }
};

// The library's last error on `file`, for messages: "incorrect data check", "unexpected end of file".
std::string gz_message(gzFile file) {
  int code = Z_OK;
  const char* msg = gzerror(file, &code);
  if (code == Z_ERRNO) return std::strerror(errno);
  return msg ? msg : "unknown zlib error";
}

bool gz_failed(gzFile file) {
  int code = Z_OK;
  gzerror(file, &code);
  return code != Z_OK;
}

// Reads up to n bytes; returns how many arrived (fewer only at the end of the data). A read error
// or corrupt compressed data throws.
int64_t read_some(gzFile file, const std::string& where, void* dst, int64_t n) {
  auto* out = static_cast<unsigned char*>(dst);
  int64_t got = 0;
  while (got < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<int64_t>(n - got, int64_t{1} << 30));
    const int r = gzread(file, out + got, chunk);
    if (r < 0) throw Error(detail::str(where, ": cannot read the data (", gz_message(file), ")"));
    if (r == 0) break;
    got += r;
  }
  return got;
}

// " (the gzip stream ends early: unexpected end of file)" when zlib saw a cut-off stream, else "".
std::string early_end_note(gzFile file) {
  return gz_failed(file) ? " (the gzip stream ends early: " + gz_message(file) + ")" : "";
}

}  // namespace

Tensor read_idx(const std::string& path) {
  const std::string where = "read_idx: '" + path + "'";

  // The file's size bounds what its header may claim. Unknown (a pipe) leaves only the 4 GiB cap.
  std::error_code ec;
  RINGGRAD_CHECK(!std::filesystem::is_directory(path, ec), where, " is a directory, expected an IDX file");
  int64_t file_bytes = -1;
  if (std::filesystem::is_regular_file(path, ec)) {
    const auto size = std::filesystem::file_size(path, ec);
    if (!ec) file_bytes = static_cast<int64_t>(size);
  }

  errno = 0;
  GzFile in{gzopen(path.c_str(), "rb")};
  RINGGRAD_CHECK(in.file != nullptr, "read_idx: cannot open '", path,
                 "': ", errno ? std::strerror(errno) : "out of memory");
  gzbuffer(in.file, 1 << 18);  // fewer, larger reads; the default 8 KiB costs syscalls

  // --- header ---------------------------------------------------------------------------------------
  uint8_t magic[4] = {};
  const int64_t magic_got = read_some(in.file, where, magic, 4);
  RINGGRAD_CHECK(magic_got == 4, where, ": truncated header: expected 4 magic bytes, the file holds ", magic_got,
                 early_end_note(in.file));
  RINGGRAD_CHECK(magic[0] == 0 && magic[1] == 0, where,
                 ": not an IDX file: expected the magic number to start with 0x00 0x00, got ", hex_byte(magic[0]), " ",
                 hex_byte(magic[1]));
  const uint8_t type = magic[2];
  if (type != kTypeUnsignedByte) {
    const char* name = type_name(type);
    throw Error(detail::str(where, ": unsupported element type ", hex_byte(type),
                            name ? std::string(" (") + name + ")" : std::string(" (not an IDX type)"),
                            "; only 0x08 (unsigned byte) is supported"));
  }
  const int ndims = magic[3];
  RINGGRAD_CHECK(ndims >= 1 && ndims <= kMaxDims, where, ": expected 1 to ", kMaxDims, " dimensions, got ", ndims);

  uint8_t size_bytes[4 * kMaxDims] = {};
  const int64_t sizes_got = read_some(in.file, where, size_bytes, int64_t{4} * ndims);
  RINGGRAD_CHECK(sizes_got == int64_t{4} * ndims, where, ": truncated header: expected ", ndims, " dimension sizes (",
                 4 * ndims, " bytes), the file holds ", sizes_got, " bytes after the magic number",
                 early_end_note(in.file));
  Shape shape;
  for (int d = 0; d < ndims; ++d) {
    const uint8_t* b = size_bytes + int64_t{4} * d;
    shape.push_back((int64_t{b[0]} << 24) | (int64_t{b[1]} << 16) | (int64_t{b[2]} << 8) | int64_t{b[3]});
  }

  // --- sizes against the limits, before allocating ------------------------------------------------
  // Each size is below 2^32, so checking the running product against the cap before every multiply
  // keeps it below 2^64 / 2: no overflow. A zero size makes the payload empty whatever the others say.
  int64_t payload_bytes = 1;
  const bool empty_payload = std::find(shape.begin(), shape.end(), 0) != shape.end();
  if (empty_payload) {
    payload_bytes = 0;
  } else {
    for (int64_t size : shape) {
      RINGGRAD_CHECK(payload_bytes <= kMaxIdxPayloadBytes / size, where, ": sizes ", shape,
                     " describe more than the 4 GiB limit (kMaxIdxPayloadBytes) of data; the header is corrupt");
      payload_bytes *= size;
    }
  }
  const int64_t header_bytes = 4 + 4 * int64_t{ndims};
  if (file_bytes >= 0) {
    if (gzdirect(in.file)) {
      // A plain file must hold exactly header + payload.
      const int64_t held = file_bytes - header_bytes;
      RINGGRAD_CHECK(held >= payload_bytes, where, ": payload too short: sizes ", shape, " call for ", payload_bytes,
                     " bytes, the file holds ", held);
      RINGGRAD_CHECK(held == payload_bytes, where, ": trailing garbage: sizes ", shape, " call for ", payload_bytes,
                     " bytes, the file holds ", held - payload_bytes, " more after them");
    } else {
      RINGGRAD_CHECK(payload_bytes + header_bytes <= kMaxInflateRatio * file_bytes, where,
                     ": payload too short: sizes ", shape, " call for ", payload_bytes, " bytes, more than a ",
                     file_bytes, "-byte gzip file can hold (deflate expands at most ", kMaxInflateRatio, "x)");
    }
  }

  // --- payload ----------------------------------------------------------------------------------------
  Tensor out = empty(shape, DType::u8);
  const int64_t got = read_some(in.file, where, out.data(), payload_bytes);
  RINGGRAD_CHECK(got == payload_bytes, where, ": payload too short: sizes ", shape, " call for ", payload_bytes,
                 " bytes, the file holds ", got, early_end_note(in.file));
  // One more byte must not exist. (zlib itself skips non-gzip bytes after the last gzip member, so
  // "trailing" means inside the compressed data.)
  uint8_t extra = 0;
  const int64_t extra_got = read_some(in.file, where, &extra, 1);
  RINGGRAD_CHECK(extra_got == 0, where, ": trailing garbage: sizes ", shape, " call for ", payload_bytes,
                 " bytes, but the data goes on after them");
  // A gzip stream that stops right after the payload, before its CRC trailer, is cut short too.
  RINGGRAD_CHECK(!gz_failed(in.file), where, ": the gzip stream is damaged after the payload (", gz_message(in.file),
                 ")");
  return out;
}

void write_idx(const std::string& path, const Tensor& data, bool gzip) {
  RINGGRAD_CHECK(data.dtype() == DType::u8, "write_idx: expected a uint8 tensor, got ", data.dtype());
  RINGGRAD_CHECK(data.dim() >= 1, "write_idx: expected 1 to ", kMaxDims, " dimensions, got a 0-d tensor");
  std::vector<uint8_t> header = {0, 0, kTypeUnsignedByte, static_cast<uint8_t>(data.dim())};
  for (int64_t size : data.shape()) {
    RINGGRAD_CHECK(size <= int64_t{UINT32_MAX}, "write_idx: dimension sizes must fit in 32 bits, got shape ",
                   data.shape());
    for (int shift = 24; shift >= 0; shift -= 8) header.push_back(static_cast<uint8_t>(size >> shift));
  }
  const Tensor dense = data.to(Device::cpu()).contiguous();

  errno = 0;
  // "T" writes the bytes through uncompressed ("transparent"), so one code path serves both kinds.
  GzFile out{gzopen(path.c_str(), gzip ? "wb6" : "wbT")};
  RINGGRAD_CHECK(out.file != nullptr, "write_idx: cannot open '", path,
                 "' for writing: ", errno ? std::strerror(errno) : "out of memory");
  auto write_all = [&](const void* src, int64_t n) {
    const auto* p = static_cast<const unsigned char*>(src);
    while (n > 0) {
      const unsigned chunk = static_cast<unsigned>(std::min<int64_t>(n, int64_t{1} << 30));
      const int w = gzwrite(out.file, p, chunk);
      RINGGRAD_CHECK(w > 0, "write_idx: cannot write '", path, "' (", gz_message(out.file), ")");
      p += w;
      n -= w;
    }
  };
  write_all(header.data(), static_cast<int64_t>(header.size()));
  write_all(dense.data(), dense.numel());
  const int rc = gzclose(out.file);
  out.file = nullptr;
  RINGGRAD_CHECK(rc == Z_OK, "write_idx: cannot finish writing '", path, "' (zlib error ", rc, ")");
}

}  // namespace data
}  // namespace nn
}  // namespace ringgrad
