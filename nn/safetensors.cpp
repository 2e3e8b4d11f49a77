// nn/safetensors.cpp: the safetensors reader and writer (format in nn/safetensors.h).
//
// The reader trusts nothing in the file. It checks the header length against the file size, parses
// the JSON, and checks every entry -- dtype, shape, offsets, byte count -- and that the entries tile
// the data buffer, all before it allocates a single tensor: every allocation is then bounded by the
// size of the file itself.
#include "nn/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <vector>

namespace ringgrad {
namespace nn {
namespace {

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "nn/safetensors.cpp copies tensor bytes as they are: safetensors is little-endian, this host is not"
#endif

using json = nlohmann::json;

constexpr char kMetadataKey[] = "__metadata__";
// The reference implementation refuses headers above 100 MB; a header that large would describe
// millions of tensors, so anything bigger is a corrupt length field, not a real file.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr size_t kWriteBufferBytes = size_t{1} << 20;

bool dtype_from_name(const std::string& name, DType* dtype) {
  static const std::pair<const char*, DType> kNames[] = {
      {"F32", DType::f32}, {"F64", DType::f64}, {"I64", DType::i64}, {"U8", DType::u8}, {"BF16", DType::bf16}};
  for (const auto& [n, dt] : kNames) {
    if (name == n) {
      *dtype = dt;
      return true;
    }
  }
  return false;
}

// --- reading -------------------------------------------------------------------------------------

// Everything the header says about one tensor, checked.
struct Entry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte range in the data buffer
};

class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  template <typename... Args>
  [[noreturn]] void fail(const Args&... args) const {
    throw Error(detail::str("load_safetensors: '", path_, "': ", args...));
  }

  // A JSON number that is a non-negative integer (not 2.0, not -1), or false.
  static bool as_uint(const json& j, uint64_t* out) {
    if (j.is_number_unsigned()) {
      *out = j.get<uint64_t>();
      return true;
    }
    if (j.is_number_integer() && j.get<int64_t>() >= 0) {
      *out = static_cast<uint64_t>(j.get<int64_t>());
      return true;
    }
    return false;
  }

  Entry parse_entry(const std::string& name, const json& value, uint64_t buffer_bytes) const {
    Entry e;
    e.name = name;
    if (!value.is_object()) fail("tensor '", name, "': expected a JSON object, got ", value.type_name());
    const auto dtype = value.find("dtype");
    const auto shape = value.find("shape");
    const auto offsets = value.find("data_offsets");
    if (dtype == value.end() || shape == value.end() || offsets == value.end())
      fail("tensor '", name, "': expected the fields \"dtype\", \"shape\" and \"data_offsets\", got ", value.dump());

    if (!dtype->is_string()) fail("tensor '", name, "': expected \"dtype\" to be a string, got ", dtype->dump());
    if (!dtype_from_name(dtype->get<std::string>(), &e.dtype))
      fail("tensor '", name, "': unsupported dtype ", dtype->dump(), " (ringgrad reads F32, F64, I64, U8 and BF16)");

    if (!shape->is_array()) fail("tensor '", name, "': expected \"shape\" to be an array, got ", shape->dump());
    if (shape->size() > static_cast<size_t>(kMaxDims))
      fail("tensor '", name, "': shape has ", shape->size(), " dimensions, ringgrad supports at most ", kMaxDims);
    // numel * itemsize must fit, and so must the product with zero sizes counted as 1 (the
    // largest stride a tensor of this shape gets): an empty [0, 2^40, 2^40] is still rejected.
    const uint64_t kLimit = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    uint64_t numel = 1, span = 1;
    for (const json& d : *shape) {
      uint64_t size = 0;
      if (!as_uint(d, &size)) fail("tensor '", name, "': expected non-negative integer sizes, got shape ", shape->dump());
      if (size > kLimit || (size > 0 && span > kLimit / size)) fail("tensor '", name, "': shape ", shape->dump(), " overflows");
      span *= std::max<uint64_t>(size, 1);
      numel *= size;
      e.shape.push_back(static_cast<int64_t>(size));
    }
    const uint64_t item = static_cast<uint64_t>(dtype_size(e.dtype));
    if (span > kLimit / item) fail("tensor '", name, "': shape ", shape->dump(), " overflows");

    if (!offsets->is_array() || offsets->size() != 2 || !as_uint((*offsets)[0], &e.begin) ||
        !as_uint((*offsets)[1], &e.end))
      fail("tensor '", name, "': expected \"data_offsets\" to be [begin, end] with non-negative integers, got ",
           offsets->dump());
    if (e.end < e.begin) fail("tensor '", name, "': data_offsets [", e.begin, ", ", e.end, "] end before they begin");
    if (e.end > buffer_bytes)
      fail("tensor '", name, "': data_offsets [", e.begin, ", ", e.end, "] run past the end of the data buffer (",
           buffer_bytes, " bytes)");
    if (e.end - e.begin != numel * item)
      fail("tensor '", name, "': shape ", shape->dump(), " of ", dtype->get<std::string>(), " needs ", numel * item,
           " bytes, but data_offsets [", e.begin, ", ", e.end, "] hold ", e.end - e.begin);
    return e;
  }

  StateDict load(std::map<std::string, std::string>* metadata_out) {
    // --- the file and its length prefix ----------------------------------------------------------
    std::ifstream in(path_, std::ios::binary);
    if (!in) fail("cannot open the file (", std::strerror(errno), ")");
    struct stat st {};
    if (::stat(path_.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) fail("not a regular file");
    const uint64_t file_bytes = static_cast<uint64_t>(st.st_size);
    if (file_bytes < 8)
      fail("the file is ", file_bytes, " bytes long, shorter than the 8-byte header length; it is truncated or not "
           "a safetensors file");
    unsigned char prefix[8];
    read_at(0, prefix, 8, in);
    uint64_t header_bytes = 0;
    for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | prefix[i];
    if (header_bytes > kMaxHeaderBytes)
      fail("header length ", header_bytes, " is beyond the ", kMaxHeaderBytes, "-byte limit; the file is corrupt "
           "or not a safetensors file");
    if (header_bytes > file_bytes - 8)
      fail("header length ", header_bytes, " runs past the end of the file (", file_bytes, " bytes)");
    const uint64_t buffer_bytes = file_bytes - 8 - header_bytes;

    // --- the JSON header -------------------------------------------------------------------------
    std::string text(header_bytes, '\0');
    read_at(8, text.data(), header_bytes, in);
    // nlohmann keeps the last of two equal keys; the callback sees each key first, so a duplicate
    // ("w" twice, or "dtype" twice in one entry) is caught and rejected rather than silently dropped.
    std::vector<std::set<std::string>> keys_at_depth;
    std::string duplicate;
    auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
      if (event == json::parse_event_t::object_start) {
        if (keys_at_depth.size() < static_cast<size_t>(depth) + 2) keys_at_depth.resize(depth + 2);
        keys_at_depth[depth + 1].clear();
      } else if (event == json::parse_event_t::key && parsed.is_string() && duplicate.empty() &&
                 static_cast<size_t>(depth) < keys_at_depth.size()) {
        if (!keys_at_depth[depth].insert(parsed.get<std::string>()).second) duplicate = parsed.get<std::string>();
      }
      return true;
    };
    json header;
    try {
      header = json::parse(text, on_event);
    } catch (const json::exception& e) {
      fail("the header is not valid JSON (", e.what(), ")");
    }
    if (!duplicate.empty()) fail("the header repeats the key \"", duplicate, "\"");
    if (!header.is_object()) fail("the header must be a JSON object, got ", header.type_name());

    std::map<std::string, std::string> metadata;
    std::vector<Entry> entries;
    for (const auto& [name, value] : header.items()) {
      if (name == kMetadataKey) {
        if (value.is_null()) continue;
        if (!value.is_object()) fail("\"__metadata__\" must be an object of strings, got ", value.type_name());
        for (const auto& [key, v] : value.items()) {
          if (!v.is_string()) fail("\"__metadata__\" entry '", key, "' must be a string, got ", v.dump());
          metadata[key] = v.get<std::string>();
        }
        continue;
      }
      entries.push_back(parse_entry(name, value, buffer_bytes));
    }

    // --- the entries must tile the data buffer ----------------------------------------------------
    std::vector<const Entry*> by_offset;
    for (const Entry& e : entries) by_offset.push_back(&e);
    std::sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) {
      return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
    });
    uint64_t cursor = 0;
    const Entry* previous = nullptr;
    for (const Entry* e : by_offset) {
      if (e->begin < cursor)
        fail("tensor '", e->name, "' at bytes [", e->begin, ", ", e->end, ") overlaps tensor '", previous->name,
             "' at [", previous->begin, ", ", previous->end, ")");
      if (e->begin > cursor)
        fail("bytes [", cursor, ", ", e->begin, ") of the data buffer belong to no tensor (a gap before tensor '",
             e->name, "'); tensors must be packed");
      cursor = e->end;
      previous = e;
    }
    if (cursor != buffer_bytes)
      fail("the data buffer has ", buffer_bytes, " bytes but the tensors cover ", cursor, "; ", buffer_bytes - cursor,
           " bytes are left over");

    // --- only now allocate: each size was checked against the file's ----------------------------
    StateDict tensors;
    for (const Entry* e : by_offset) {
      Tensor t = empty(e->shape, TensorOptions(e->dtype).device(Device::cpu()));
      if (e->end > e->begin) read_at(8 + header_bytes + e->begin, t.data(), e->end - e->begin, in);
      tensors.emplace(e->name, std::move(t));
    }
    if (metadata_out) *metadata_out = std::move(metadata);
    return tensors;
  }

 private:
  void read_at(uint64_t offset, void* dst, uint64_t n, std::ifstream& in) const {
    in.seekg(static_cast<std::streamoff>(offset));
    in.read(static_cast<char*>(dst), static_cast<std::streamsize>(n));
    if (!in || static_cast<uint64_t>(in.gcount()) != n)
      fail("could not read ", n, " bytes at offset ", offset, " (the file changed or is unreadable)");
  }

  std::string path_;
};

// --- writing -------------------------------------------------------------------------------------

// A file descriptor for the temporary file, with a buffer so that small rows of a gathered view
// do not cost one system call each. Every failure throws, naming the file and errno.
class FileWriter {
 public:
  FileWriter(std::string path, int fd) : path_(std::move(path)), fd_(fd) { buffer_.reserve(kWriteBufferBytes); }
  ~FileWriter() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  void write(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    if (buffer_.size() + n > kWriteBufferBytes) flush();
    if (n >= kWriteBufferBytes) {
      write_all(p, n);
    } else {
      buffer_.insert(buffer_.end(), p, p + n);
    }
  }

  // Flushes, makes the bytes durable and closes the file.
  void finish() {
    flush();
    if (::fsync(fd_) != 0) fail("fsync");
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("close");
  }

 private:
  void flush() {
    write_all(buffer_.data(), buffer_.size());
    buffer_.clear();
  }
  void write_all(const char* p, size_t n) {
    while (n > 0) {
      const ssize_t done = ::write(fd_, p, n);
      if (done < 0 && errno == EINTR) continue;
      if (done <= 0) fail("write");
      p += done;
      n -= static_cast<size_t>(done);
    }
  }
  [[noreturn]] void fail(const char* call) const {
    throw Error(detail::str("save_safetensors: ", call, " to '", path_, "' failed (", std::strerror(errno), ")"));
  }

  std::string path_;
  int fd_;
  std::vector<char> buffer_;
};

// Writes the elements of a host tensor in row-major order: one write for dense memory, a gather
// row by row for any other view (transposed, sliced, expanded).
void write_tensor(FileWriter& out, const Tensor& t) {
  const int64_t item = t.element_size();
  if (t.numel() == 0) return;
  const char* base = static_cast<const char*>(t.data());
  if (t.is_contiguous()) {
    out.write(base, static_cast<size_t>(t.numel() * item));
    return;
  }
  const Shape& shape = t.shape();
  const Shape& strides = t.strides();
  const int64_t last = t.dim() - 1;  // a non-contiguous tensor with elements has at least one dim
  const int64_t row = shape[last];
  std::vector<char> gathered(static_cast<size_t>(row * item));
  std::vector<int64_t> index(t.dim(), 0);
  for (int64_t r = 0, rows = t.numel() / row; r < rows; ++r) {
    int64_t offset = 0;
    for (int64_t d = 0; d < last; ++d) offset += index[d] * strides[d];
    for (int64_t j = 0; j < row; ++j)
      std::memcpy(gathered.data() + j * item, base + (offset + j * strides[last]) * item, item);
    out.write(gathered.data(), gathered.size());
    for (int64_t d = last - 1; d >= 0 && ++index[d] == shape[d]; --d) index[d] = 0;
  }
}

std::string temp_path_for(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  uint64_t noise = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  try {
    noise ^= static_cast<uint64_t>(std::random_device{}()) << 20;
  } catch (...) {  // no entropy source: the clock and the counter keep names apart
  }
  noise += counter.fetch_add(1) * 0x9E3779B97F4A7C15ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(noise));
  return detail::str(path, ".tmp.", ::getpid(), ".", hex);
}

// After the rename, the directory entry itself must reach the disk, or a crash can bring back
// the old file. Best effort: some file systems do not let a directory be opened this way.
void sync_directory_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

}  // namespace

const char* safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::i64: return "I64";
    case DType::u8: return "U8";
    case DType::bf16: return "BF16";
  }
  return "?";
}

void save_safetensors(const std::string& path, const StateDict& tensors,
                      const std::map<std::string, std::string>& metadata) {
  // The header first: it needs only shapes and dtypes, so nothing is copied yet.
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    RINGGRAD_CHECK(name != kMetadataKey, "save_safetensors: '", path, "': \"", kMetadataKey,
                   "\" is reserved for metadata and cannot name a tensor");
    RINGGRAD_CHECK(t.defined(), "save_safetensors: '", path, "': tensor '", name, "' is undefined");
    const uint64_t nbytes = static_cast<uint64_t>(t.numel() * t.element_size());
    header[name] = {{"dtype", safetensors_dtype_name(t.dtype())},
                    {"shape", t.shape().vec()},
                    {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {  // a name or metadata string that is not valid UTF-8
    throw Error(detail::str("save_safetensors: '", path, "': cannot encode the header (", e.what(), ")"));
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // the reference writer aligns the data to 8 bytes
  unsigned char prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<unsigned char>(static_cast<uint64_t>(text.size()) >> (8 * i));

  const std::string temp = temp_path_for(path);
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  RINGGRAD_CHECK(fd >= 0, "save_safetensors: cannot create the temporary file '", temp, "' (", std::strerror(errno),
                 "); does the directory exist and is it writable?");
  try {
    FileWriter out(temp, fd);
    out.write(prefix, 8);
    out.write(text.data(), text.size());
    for (const auto& [name, t] : tensors) {
      // One tensor on the host at a time: a model on a GPU is not copied out all at once.
      const Tensor host = t.device().is_cpu() ? t.detach() : t.detach().to(Device::cpu());
      write_tensor(out, host);
    }
    out.finish();
    RINGGRAD_CHECK(::rename(temp.c_str(), path.c_str()) == 0, "save_safetensors: cannot rename '", temp, "' to '",
                   path, "' (", std::strerror(errno), ")");
  } catch (...) {
    ::unlink(temp.c_str());
    throw;
  }
  sync_directory_of(path);
}

StateDict load_safetensors(const std::string& path, std::map<std::string, std::string>* metadata) {
  return Reader(path).load(metadata);
}

}  // namespace nn
}  // namespace ringgrad
