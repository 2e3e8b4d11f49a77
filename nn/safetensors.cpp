// nn/safetensors.cpp: the safetensors reader and writer (format in nn/safetensors.h).
//
// The reader trusts nothing in the file. It checks the header length against the file size, parses
// the JSON, and checks every entry -- dtype, shape, offsets, byte count -- and that the entries tile
// the data buffer, all before it allocates a single tensor: every allocation is then bounded by the
// size of the file itself. The JSON is parsed in one linear pass that refuses deep nesting as it
// goes and never builds a DOM of the whole header, only of one entry at a time (HeaderParser);
// repeated keys are refused too. Every value quoted in an error is escaped and cut to ~100 chars.
//
// The writer goes through nn/file_io.h's AtomicFile: a temporary beside the target, renamed over
// it, never over anything but a regular file.
#include <ringgrad/nn/safetensors.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <vector>

#include <ringgrad/nn/file_io.h>

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
// The format needs three levels (the header, an entry, its shape); one more is allowed for fields
// ringgrad ignores. Deeper is refused while parsing, before it is built: dump() recurses once per
// level, and a header of 50 MB of '[' would overflow the stack.
constexpr int kMaxHeaderDepth = 4;
// How much of a string from the file an error message quotes.
constexpr size_t kMaxQuotedChars = 100;

// `s` itself when short, else its first kMaxQuotedChars bytes and its length: a message stays
// readable when a file holds a 100 kB name or value.
std::string bounded(const std::string& s, size_t max_chars = kMaxQuotedChars) {
  return detail::printable(s, max_chars);  // a name from the file: escaped, and cut when long
}
std::string quoted(const json& j) { return bounded(j.dump()); }

bool dtype_from_name(const std::string& name, DType* dtype) {
  static const std::pair<const char*, DType> kNames[] = {{"F32", DType::f32},   {"F64", DType::f64},
                                                         {"I64", DType::i64},   {"U8", DType::u8},
                                                         {"BF16", DType::bf16}, {"F16", DType::f16}};
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

// A SAX handler for json::sax_parse that never holds the whole header as a DOM. Only one entry's
// value is built at a time (by nlohmann's own DOM builder) and handed to `on_entry` as soon as it
// closes; the caller checks it and keeps an Entry, a few dozen bytes. A DOM of the whole header
// costs ~700 bytes per tensor -- most of the 1.37 GB a 1M-tensor header used to take.
//
// As the text streams past, it refuses what json::parse would accept silently or dangerously:
//   a repeated key   nlohmann keeps the last of two equal keys, so "dtype" twice in one entry would
//                    hide which one counts. Inside an entry this is checked here, with one set of
//                    keys per open object; the root's keys (the tensor names, a million of them)
//                    are not copied into a set: the caller keeps every name anyway and looks for
//                    a repeat once the parse is done (see Reader::load).
//   deep nesting     see kMaxHeaderDepth
class HeaderParser {
 public:
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;
  // Called with each top-level key and its value, in file order. It may take both (std::move).
  using OnEntry = std::function<void(std::string& name, json& value)>;

  explicit HeaderParser(OnEntry on_entry) : on_entry_(std::move(on_entry)) {}

  bool null() {
    return scalar("null", [](Dom& d) { return d.null(); });
  }
  bool boolean(bool v) {
    return scalar("boolean", [&](Dom& d) { return d.boolean(v); });
  }
  bool number_integer(number_integer_t v) {
    return scalar("number", [&](Dom& d) { return d.number_integer(v); });
  }
  bool number_unsigned(number_unsigned_t v) {
    return scalar("number", [&](Dom& d) { return d.number_unsigned(v); });
  }
  bool number_float(number_float_t v, const string_t& text) {
    return scalar("number", [&](Dom& d) { return d.number_float(v, text); });
  }
  bool string(string_t& v) {
    return scalar("string", [&](Dom& d) { return d.string(v); });
  }
  bool binary(binary_t& v) {
    return scalar("binary", [&](Dom& d) { return d.binary(v); });
  }

  bool start_object(std::size_t n) {
    if (!enter()) return false;
    if (depth_ == 1) {  // the root: its keys are tensor names, checked by the caller
      root_is_object_ = true;
      return true;
    }
    keys_.emplace_back();
    return start_container([&](Dom& d) { return d.start_object(n); });
  }
  bool key(string_t& k) {
    if (root_is_object_ && depth_ == 1) {
      if (k == kMetadataKey && std::exchange(seen_metadata_, true)) return repeated(k);
      name_ = std::move(k);  // the lexer clears its buffer before the next token
      return true;
    }
    if (!keys_.back().insert(k).second) return repeated(k);
    return !dom_ || dom_->key(k);
  }
  bool end_object() {
    if (--depth_ == 0) return true;  // the root object
    keys_.pop_back();
    return end_container([](Dom& d) { return d.end_object(); });
  }
  bool start_array(std::size_t n) {
    if (!enter()) return false;
    if (depth_ == 1) {
      root_type_ = "array";  // refused after the parse, so that bad JSON is reported as such first
      return true;
    }
    return start_container([&](Dom& d) { return d.start_array(n); });
  }
  bool end_array() {
    if (--depth_ == 0) return true;
    return end_container([](Dom& d) { return d.end_array(); });
  }
  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/, const json::exception& e) {
    // nlohmann's message quotes the token it stopped in, which may be a 50 MB string.
    problem_ = "the header is not valid JSON (" + bounded(e.what(), 3 * kMaxQuotedChars) + ")";
    return false;
  }

  // Why sax_parse returned false.
  const std::string& problem() const { return problem_; }
  // After a successful parse: the JSON type of the root when it is not an object, else empty.
  const char* root_type() const { return root_is_object_ ? "" : root_type_; }

 private:
  using Dom = nlohmann::detail::json_sax_dom_parser<json>;

  bool enter() {
    if (++depth_ <= kMaxHeaderDepth) return true;
    problem_ = detail::str("the header nests arrays and objects deeper than ", kMaxHeaderDepth,
                           " levels; a safetensors header needs 3 (the file is corrupt or not a safetensors file)");
    return false;
  }
  bool repeated(const std::string& k) {
    problem_ = "the header repeats the key \"" + bounded(k) + "\"";
    return false;
  }
  // An entry's value starts when a value begins directly inside the root object.
  void begin_value() {
    value_ = json();
    dom_.emplace(value_, /*allow_exceptions=*/false);
  }
  bool finish_value() {
    dom_.reset();
    on_entry_(name_, value_);
    value_ = json();  // frees what on_entry left
    return true;
  }
  template <typename Event>
  bool scalar(const char* type, Event&& event) {
    if (depth_ == 0) {  // the whole header is one scalar
      root_type_ = type;
      return true;
    }
    if (root_is_object_ && depth_ == 1) {
      begin_value();
      event(*dom_);
      return finish_value();
    }
    return !dom_ || event(*dom_);  // no DOM inside a root that is not an object: only checked
  }
  template <typename Event>
  bool start_container(Event&& event) {  // depth_ already counts the new container
    if (root_is_object_ && depth_ == 2) begin_value();
    return !dom_ || event(*dom_);
  }
  template <typename Event>
  bool end_container(Event&& event) {  // depth_ already excludes the closed container
    if (!dom_) return true;
    event(*dom_);
    return depth_ == 1 ? finish_value() : true;
  }

  OnEntry on_entry_;
  std::string name_;        // the root key whose value is being read
  json value_;              // that value, while dom_ builds it
  std::optional<Dom> dom_;  // set while inside an entry's value
  bool root_is_object_ = false;
  bool seen_metadata_ = false;
  const char* root_type_ = "null";
  // std::set, not a hash set: std::hash has a fixed seed, so keys crafted to collide would make
  // the check quadratic; a tree is O(n log n) whatever the keys. Only objects below the root.
  std::vector<std::set<std::string>> keys_;
  int depth_ = 0;
  std::string problem_;
};

class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}
  ~Reader() {
    if (fd_ >= 0) ::close(fd_);
  }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  template <typename... Args>
  [[noreturn]] void fail(const Args&... args) const {
    throw Error(detail::str("load_safetensors: '", path_, "': ", args...));
  }

  // Runs a check; the first failure's message goes to `problem` instead of out as an exception.
  template <typename Check>
  static void try_check(Check&& check, std::string& problem) {
    try {
      check();
    } catch (const Error& e) {
      problem = e.what();
    }
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

  // Checks one entry and fills `e` (whose name is set) from it.
  void parse_entry(const json& value, uint64_t buffer_bytes, Entry& e) const {
    const std::string shown = bounded(e.name);
    if (!value.is_object()) fail("tensor '", shown, "': expected a JSON object, got ", value.type_name());
    const auto dtype = value.find("dtype");
    const auto shape = value.find("shape");
    const auto offsets = value.find("data_offsets");
    if (dtype == value.end() || shape == value.end() || offsets == value.end())
      fail("tensor '", shown, R"(': expected the fields "dtype", "shape" and "data_offsets", got )", quoted(value));

    if (!dtype->is_string()) fail("tensor '", shown, "': expected \"dtype\" to be a string, got ", quoted(*dtype));
    if (!dtype_from_name(dtype->get<std::string>(), &e.dtype))
      fail("tensor '", shown, "': unsupported dtype ", quoted(*dtype),
           " (ringgrad reads F32, F64, I64, U8, BF16 and F16)");

    if (!shape->is_array()) fail("tensor '", shown, "': expected \"shape\" to be an array, got ", quoted(*shape));
    if (shape->size() > static_cast<size_t>(kMaxDims))
      fail("tensor '", shown, "': shape has ", shape->size(), " dimensions, ringgrad supports at most ", kMaxDims);
    // numel * itemsize must fit, and so must the product with zero sizes counted as 1 (the
    // largest stride a tensor of this shape gets): an empty [0, 2^40, 2^40] is still rejected.
    const auto kLimit = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    uint64_t numel = 1, span = 1;
    for (const json& d : *shape) {
      uint64_t size = 0;
      if (!as_uint(d, &size))
        fail("tensor '", shown, "': expected non-negative integer sizes, got shape ", quoted(*shape));
      if (size > kLimit || (size > 0 && span > kLimit / size))
        fail("tensor '", shown, "': shape ", quoted(*shape), " overflows");
      span *= std::max<uint64_t>(size, 1);
      numel *= size;
      e.shape.push_back(static_cast<int64_t>(size));
    }
    const auto item = static_cast<uint64_t>(dtype_size(e.dtype));
    if (span > kLimit / item) fail("tensor '", shown, "': shape ", quoted(*shape), " overflows");

    if (!offsets->is_array() || offsets->size() != 2 || !as_uint((*offsets)[0], &e.begin) ||
        !as_uint((*offsets)[1], &e.end))
      fail("tensor '", shown, "': expected \"data_offsets\" to be [begin, end] with non-negative integers, got ",
           quoted(*offsets));
    if (e.end < e.begin) fail("tensor '", shown, "': data_offsets [", e.begin, ", ", e.end, "] end before they begin");
    if (e.end > buffer_bytes)
      fail("tensor '", shown, "': data_offsets [", e.begin, ", ", e.end, "] run past the end of the data buffer (",
           buffer_bytes, " bytes)");
    if (e.end - e.begin != numel * item)
      fail("tensor '", shown, "': shape ", quoted(*shape), " of ", dtype->get<std::string>(), " needs ", numel * item,
           " bytes, but data_offsets [", e.begin, ", ", e.end, "] hold ", e.end - e.begin);
  }

  void parse_metadata(const json& value, std::map<std::string, std::string>& metadata) const {
    if (value.is_null()) return;
    if (!value.is_object()) fail("\"__metadata__\" must be an object of strings, got ", value.type_name());
    for (const auto& [key, v] : value.items()) {
      if (!v.is_string()) fail("\"__metadata__\" entry '", bounded(key), "' must be a string, got ", quoted(v));
      metadata[key] = v.get<std::string>();
    }
  }

  StateDict load(std::map<std::string, std::string>* metadata_out) {
    // --- the file and its length prefix ----------------------------------------------------------
    uint64_t file_bytes = 0;
    fd_ = open_regular_file("load_safetensors", path_, &file_bytes);  // refuses a FIFO without blocking
    if (file_bytes < 8)
      fail("the file is ", file_bytes,
           " bytes long, shorter than the 8-byte header length; it is truncated or not "
           "a safetensors file");
    unsigned char prefix[8];
    read_at(0, prefix, 8);
    uint64_t header_bytes = 0;
    for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | prefix[i];
    if (header_bytes > kMaxHeaderBytes)
      fail("header length ", header_bytes, " is beyond the ", kMaxHeaderBytes,
           "-byte limit; the file is corrupt "
           "or not a safetensors file");
    if (header_bytes > file_bytes - 8)
      fail("header length ", header_bytes, " runs past the end of the file (", file_bytes, " bytes)");
    const uint64_t buffer_bytes = file_bytes - 8 - header_bytes;

    // --- the JSON header -------------------------------------------------------------------------
    // Each entry is checked as soon as its value closes, but a failed check is only reported after
    // the whole parse: invalid JSON and a repeated key are the first things to say about a file.
    // A std::deque, not a vector: no copy of a million entries each time it grows.
    std::deque<Entry> entries;
    std::map<std::string, std::string> metadata;
    std::string entry_problem;
    HeaderParser parser([&](std::string& name, json& value) {
      if (name == kMetadataKey) {
        if (entry_problem.empty()) try_check([&] { parse_metadata(value, metadata); }, entry_problem);
        return;
      }
      Entry& e = entries.emplace_back();
      e.name = std::move(name);  // kept even after a failed check: the repeat check needs them all
      if (entry_problem.empty()) try_check([&] { parse_entry(value, buffer_bytes, e); }, entry_problem);
    });
    {
      std::string text(header_bytes, '\0');
      read_at(8, text.data(), header_bytes);
      bool parsed = false;
      try {
        parsed = json::sax_parse(text, &parser);
      } catch (const json::exception& e) {  // not expected (errors reach parse_error), but never a crash
        fail("the header is not valid JSON (", bounded(e.what(), 3 * kMaxQuotedChars), ")");
      }
      if (!parsed) fail(parser.problem().empty() ? std::string("the header is not valid JSON") : parser.problem());
    }  // a 100 MB header is not held while the tensors are read
    if (*parser.root_type() != '\0') fail("the header must be a JSON object, got ", parser.root_type());

    // A repeated tensor name: the parser keeps no set of the names, so sort pointers to them.
    std::vector<Entry*> sorted;
    sorted.reserve(entries.size());
    for (Entry& e : entries) sorted.push_back(&e);
    std::sort(sorted.begin(), sorted.end(), [](const Entry* a, const Entry* b) { return a->name < b->name; });
    for (size_t i = 1; i < sorted.size(); ++i)
      if (sorted[i]->name == sorted[i - 1]->name) fail("the header repeats the key \"", bounded(sorted[i]->name), "\"");
    if (!entry_problem.empty()) throw Error(entry_problem);

    // --- the entries must tile the data buffer ----------------------------------------------------
    std::vector<Entry*> by_offset = std::move(sorted);
    std::sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) {
      return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
    });
    uint64_t cursor = 0;
    const Entry* previous = nullptr;
    for (const Entry* e : by_offset) {
      if (e->begin < cursor)
        fail("tensor '", bounded(e->name), "' at bytes [", e->begin, ", ", e->end, ") overlaps tensor '",
             bounded(previous->name), "' at [", previous->begin, ", ", previous->end, ")");
      if (e->begin > cursor)
        fail("bytes [", cursor, ", ", e->begin, ") of the data buffer belong to no tensor (a gap before tensor '",
             bounded(e->name), "'); tensors must be packed");
      cursor = e->end;
      previous = e;
    }
    if (cursor != buffer_bytes)
      fail("the data buffer has ", buffer_bytes, " bytes but the tensors cover ", cursor, "; ", buffer_bytes - cursor,
           " bytes are left over");

    // --- only now allocate: each size was checked against the file's ----------------------------
    StateDict tensors;
    for (Entry* e : by_offset) {
      Tensor t = empty(e->shape, TensorOptions(e->dtype).device(Device::cpu()));
      if (e->end > e->begin) read_at(8 + header_bytes + e->begin, t.data(), e->end - e->begin);
      tensors.emplace(std::move(e->name), std::move(t));  // the name moves: not held twice
    }
    if (metadata_out) *metadata_out = std::move(metadata);
    return tensors;
  }

 private:
  void read_at(uint64_t offset, void* dst, uint64_t n) const {
    read_exactly("load_safetensors", path_, fd_, offset, dst, n);
  }

  std::string path_;
  int fd_ = -1;
};

// --- writing -------------------------------------------------------------------------------------

// Writes the elements of a host tensor in row-major order: one write for dense memory, a gather
// row by row for any other view (transposed, sliced, expanded).
void write_tensor(AtomicFile& out, const Tensor& t) {
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
  Shape index = shape;  // the row being gathered: an index per dimension, the last one unused
  std::fill(index.begin(), index.end(), int64_t{0});
  for (int64_t r = 0, rows = t.numel() / row; r < rows; ++r) {
    int64_t offset = 0;
    for (int64_t d = 0; d < last; ++d) offset += index[d] * strides[d];
    for (int64_t j = 0; j < row; ++j)
      std::memcpy(gathered.data() + j * item, base + (offset + j * strides[last]) * item, static_cast<size_t>(item));
    out.write(gathered.data(), gathered.size());
    for (int64_t d = last - 1; d >= 0 && ++index[d] == shape[d]; --d) index[d] = 0;
  }
}

}  // namespace

const char* safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::i64: return "I64";
    case DType::u8: return "U8";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
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
    const auto nbytes = static_cast<uint64_t>(t.numel() * t.element_size());
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

  AtomicFile out("save_safetensors", path);  // refuses a FIFO, device or directory; follows symlinks
  out.write(prefix, 8);
  out.write(text.data(), text.size());
  for (const auto& [name, t] : tensors) {
    // One tensor on the host at a time: a model on a GPU is not copied out all at once.
    const Tensor host = t.device().is_cpu() ? t.detach() : t.detach().to(Device::cpu());
    write_tensor(out, host);
  }
  out.commit();  // until here, an error leaves the target as it was and removes the temporary
}

StateDict load_safetensors(const std::string& path, std::map<std::string, std::string>* metadata) {
  return Reader(path).load(metadata);
}

}  // namespace nn
}  // namespace ringgrad
