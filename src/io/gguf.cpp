// GGUF reader (layout in gguf.h). parse_gguf treats the file as hostile: a
// Cursor hands out bytes only after checking, in u64, that they remain; every
// count is bounded by the bytes its entries need at least before anything is
// reserved; every product and sum on sizes is overflow-checked.
#include "io/gguf.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>

#include "core/check.h"

namespace tessera {

namespace {

constexpr uint64_t kMaxI64 = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
// Bytes a kv needs at least: key length, a 1-byte key, value type, a 1-byte value.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;
// Bytes a tensor info needs at least: name length, n_dims, type, offset.
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;
constexpr uint64_t kMinStringBytes = 8;
constexpr uint64_t kMinArrayBytes = 4 + 8;
// A string with no limit of its own is still bounded by the bytes that remain.
constexpr uint64_t kNoLimit = std::numeric_limits<uint64_t>::max();

std::string hex32(uint32_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out = "0x";
  for (int shift = 28; shift >= 0; shift -= 4) out += kDigits[(v >> shift) & 0xf];
  return out;
}

// Fixed byte size of a scalar type; 0 for string and array.
uint64_t scalar_size(GgufType type) {
  switch (type) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool: return 1;
    case GgufType::kU16:
    case GgufType::kI16: return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32: return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64: return 8;
    case GgufType::kString:
    case GgufType::kArray: return 0;
  }
  return 0;
}

bool is_signed(GgufType type) {
  return type == GgufType::kI8 || type == GgufType::kI16 || type == GgufType::kI32 || type == GgufType::kI64;
}
bool is_integer(GgufType type) {
  return is_signed(type) || type == GgufType::kU8 || type == GgufType::kU16 || type == GgufType::kU32 ||
         type == GgufType::kU64;
}

uint64_t load_le(const uint8_t* p, uint64_t n) {
  uint64_t v = 0;
  for (uint64_t i = n; i-- > 0;) v = v << 8 | p[i];
  return v;
}

// Reads forward through the file; every read checks what remains first.
// Names are built only for errors: a vocabulary of 150k strings makes none.
class Cursor {
 public:
  explicit Cursor(std::span<const uint8_t> file) : file_(file) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return file_.size() - pos_; }

  // `name()` names what is read; it is called only to build an error.
  template <typename Name>
  Result<std::span<const uint8_t>> take(uint64_t n, const Name& name) {
    if (n > remaining()) {
      return Status::invalid_input(name() + " needs " + std::to_string(n) + " bytes at offset " + std::to_string(pos_) +
                                   " but the file has " + std::to_string(remaining()) + " left");
    }
    const std::span<const uint8_t> out = file_.subspan(pos_, n);
    pos_ += n;
    return out;
  }
  template <typename Name>
  Result<uint64_t> uint(uint64_t n, const Name& name) {
    TS_ASSIGN_OR_RETURN(const std::span<const uint8_t> bytes, take(n, name));
    return load_le(bytes.data(), n);
  }
  template <typename Name>
  Result<std::string_view> string(uint64_t max_len, const Name& name) {
    TS_ASSIGN_OR_RETURN(const uint64_t len, uint(8, [&] { return name() + " length"; }));
    if (len > max_len) {
      return Status::invalid_input(name() + " is " + std::to_string(len) + " bytes, more than the limit of " +
                                   std::to_string(max_len));
    }
    TS_ASSIGN_OR_RETURN(const std::span<const uint8_t> bytes, take(len, name));
    return std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }

  // Takes count x each bytes from the metadata's allocation budget: string and
  // nested arrays are the only metadata that allocates, and a file of zeros
  // parses as empty strings, so the file's size alone does not bound them.
  template <typename Name>
  Status charge(uint64_t count, uint64_t each, const Name& name) {
    if (count > allocation_left_ / each) {
      return Status::invalid_input(name() + ": " + std::to_string(count) + " elements of " + std::to_string(each) +
                                   " bytes exceed what is left of the " +
                                   std::to_string(kMaxGgufMetadataAllocation >> 20) + " MiB metadata budget");
    }
    allocation_left_ -= count * each;
    return {};
  }

 private:
  std::span<const uint8_t> file_;
  uint64_t pos_ = 0;
  uint64_t allocation_left_ = kMaxGgufMetadataAllocation;
};

template <typename Name>
Result<GgufType> read_type(Cursor& cursor, const Name& name) {
  TS_ASSIGN_OR_RETURN(const uint64_t type, cursor.uint(4, name));
  if (type >= kGgufTypeCount) return Status::invalid_input(name() + " " + std::to_string(type) + " is not a GGUF type");
  return static_cast<GgufType>(type);
}

Result<GgufValue> read_value(Cursor& cursor, GgufType type, const std::string& what, uint64_t depth);

Result<GgufValue> read_array(Cursor& cursor, const std::string& what, uint64_t depth) {
  if (depth >= kMaxGgufArrayDepth) {
    return Status::invalid_input(what + ": arrays nested deeper than " + std::to_string(kMaxGgufArrayDepth));
  }
  GgufValue value;
  value.type = GgufType::kArray;
  TS_ASSIGN_OR_RETURN(value.element_type, read_type(cursor, [&] { return what + " element type"; }));
  TS_ASSIGN_OR_RETURN(value.count, cursor.uint(8, [&] { return what + " count"; }));
  const uint64_t size = scalar_size(value.element_type);
  if (size == 0) {
    const uint64_t each = value.element_type == GgufType::kString ? sizeof(std::string_view) : sizeof(GgufValue);
    TS_RETURN_IF_ERROR(cursor.charge(value.count, each, [&] { return what; }));
  }
  const uint64_t min_size = value.element_type == GgufType::kString  ? kMinStringBytes
                            : value.element_type == GgufType::kArray ? kMinArrayBytes
                                                                     : size;
  if (value.count > cursor.remaining() / min_size) {
    return Status::invalid_input(what + ": array of " + std::to_string(value.count) + " " +
                                 std::string(gguf_type_name(value.element_type)) + " needs at least " +
                                 std::to_string(min_size) + " bytes each but the file has " +
                                 std::to_string(cursor.remaining()) + " left");
  }
  if (size != 0) {
    TS_ASSIGN_OR_RETURN(value.raw, cursor.take(value.count * size, [&] { return what; }));
    if (value.element_type == GgufType::kBool) {
      for (uint64_t i = 0; i < value.count; ++i) {
        if (value.raw[i] > 1) {
          return Status::invalid_input(what + "[" + std::to_string(i) + "]: bool is " + std::to_string(value.raw[i]));
        }
      }
    }
    return value;
  }
  // The budget and count <= remaining / min_size bound these reserves.
  if (value.element_type == GgufType::kString) {
    value.strings.reserve(value.count);
    for (uint64_t i = 0; i < value.count; ++i) {
      TS_ASSIGN_OR_RETURN(const std::string_view s,
                          cursor.string(kNoLimit, [&] { return what + "[" + std::to_string(i) + "]"; }));
      value.strings.push_back(s);
    }
    return value;
  }
  value.arrays.reserve(value.count);
  for (uint64_t i = 0; i < value.count; ++i) {
    TS_ASSIGN_OR_RETURN(GgufValue item,
                        read_value(cursor, GgufType::kArray, what + "[" + std::to_string(i) + "]", depth + 1));
    value.arrays.push_back(std::move(item));
  }
  return value;
}

Result<GgufValue> read_value(Cursor& cursor, GgufType type, const std::string& what, uint64_t depth) {
  if (type == GgufType::kArray) return read_array(cursor, what, depth);
  GgufValue value;
  value.type = type;
  if (type == GgufType::kString) {
    TS_ASSIGN_OR_RETURN(value.string, cursor.string(kNoLimit, [&] { return what; }));
    return value;
  }
  const uint64_t size = scalar_size(type);
  TS_ASSIGN_OR_RETURN(value.bits, cursor.uint(size, [&] { return what; }));
  if (type == GgufType::kBool && value.bits > 1) {
    return Status::invalid_input(what + ": bool is " + std::to_string(value.bits));
  }
  if (is_signed(type) && size < 8 && (value.bits >> (8 * size - 1)) != 0) {
    value.bits |= ~uint64_t{0} << (8 * size);  // sign-extend
  }
  return value;
}

struct GgmlTypeInfo {
  uint32_t id;
  std::string_view name;
  uint64_t block_size;  // 0: a ggml type tessera does not load
  uint64_t type_size;
};

// ggml's type numbers (gguf-py constants.py GGMLQuantizationType); the sizes of
// the ones tessera loads are GGML_QUANT_SIZES.
constexpr std::array<GgmlTypeInfo, 35> kGgmlTypes = {{
    {0, "F32", 1, 4},       {1, "F16", 1, 2},       {2, "Q4_0", 32, 18},    {3, "Q4_1", 0, 0},    {6, "Q5_0", 0, 0},
    {7, "Q5_1", 0, 0},      {8, "Q8_0", 32, 34},    {9, "Q8_1", 0, 0},      {10, "Q2_K", 0, 0},   {11, "Q3_K", 0, 0},
    {12, "Q4_K", 256, 144}, {13, "Q5_K", 256, 176}, {14, "Q6_K", 256, 210}, {15, "Q8_K", 0, 0},   {16, "IQ2_XXS", 0, 0},
    {17, "IQ2_XS", 0, 0},   {18, "IQ3_XXS", 0, 0},  {19, "IQ1_S", 0, 0},    {20, "IQ4_NL", 0, 0}, {21, "IQ3_S", 0, 0},
    {22, "IQ2_S", 0, 0},    {23, "IQ4_XS", 0, 0},   {24, "I8", 0, 0},       {25, "I16", 0, 0},    {26, "I32", 0, 0},
    {27, "I64", 0, 0},      {28, "F64", 0, 0},      {29, "IQ1_M", 0, 0},    {30, "BF16", 1, 2},   {34, "TQ1_0", 0, 0},
    {35, "TQ2_0", 0, 0},    {39, "MXFP4", 0, 0},    {40, "NVFP4", 0, 0},    {41, "Q1_0", 0, 0},   {42, "Q2_0", 0, 0},
}};

const GgmlTypeInfo* find_ggml_type(uint64_t id) {
  for (const GgmlTypeInfo& t : kGgmlTypes)
    if (t.id == id) return &t;
  return nullptr;
}

std::string dims_string(const std::vector<uint64_t>& dims) {
  std::string out = "[";
  for (size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
  return out + "]";
}

Result<GgufTensorInfo> read_tensor_info(Cursor& cursor, uint64_t index) {
  GgufTensorInfo info;
  TS_ASSIGN_OR_RETURN(info.name,
                      cursor.string(kMaxGgufNameBytes, [&] { return "tensor " + std::to_string(index) + " name"; }));
  const std::string what = "tensor '" + std::string(info.name) + "'";
  TS_ASSIGN_OR_RETURN(const uint64_t n_dims, cursor.uint(4, [&] { return what + " n_dims"; }));
  if (n_dims > kMaxGgufDims) {
    return Status::invalid_input(what + ": n_dims " + std::to_string(n_dims) + " is more than " +
                                 std::to_string(kMaxGgufDims));
  }
  uint64_t numel = 1;
  bool overflow = false;
  for (uint64_t i = 0; i < n_dims; ++i) {
    TS_ASSIGN_OR_RETURN(const uint64_t dim, cursor.uint(8, [&] { return what + " dims[" + std::to_string(i) + "]"; }));
    info.dims.push_back(dim);
    overflow |= __builtin_mul_overflow(numel, dim, &numel);
  }
  if (overflow || numel > kMaxI64) {
    return Status::invalid_input(what + ": dims " + dims_string(info.dims) + " hold more than 2^63-1 elements");
  }
  TS_ASSIGN_OR_RETURN(const uint64_t type_id, cursor.uint(4, [&] { return what + " type"; }));
  const GgmlTypeInfo* type = find_ggml_type(type_id);
  if (type == nullptr) return Status::invalid_input(what + ": ggml type " + std::to_string(type_id) + " is unknown");
  if (type->block_size == 0) {
    return Status::unsupported(what + ": ggml type " + std::string(type->name) +
                               " is not supported (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K are)");
  }
  info.type = static_cast<GgmlType>(type->id);
  const uint64_t row = n_dims == 0 ? 1 : info.dims[0];
  if (row % type->block_size != 0) {
    return Status::invalid_input(what + ": dims[0] = " + std::to_string(row) + " is not a multiple of " +
                                 std::string(type->name) + "'s block of " + std::to_string(type->block_size));
  }
  if (__builtin_mul_overflow(numel / type->block_size, type->type_size, &info.nbytes)) {
    return Status::invalid_input(what + ": dims " + dims_string(info.dims) + " of " + std::string(type->name) +
                                 " overflow a 64-bit byte count");
  }
  TS_ASSIGN_OR_RETURN(info.offset, cursor.uint(8, [&] { return what + " offset"; }));
  return info;
}

Result<uint64_t> read_alignment(const GgufMetadata& metadata) {
  const GgufValue* value = metadata.find("general.alignment");
  if (value == nullptr) return uint64_t{32};
  if (value->type != GgufType::kU32) {
    return Status::invalid_input("key 'general.alignment' is " + std::string(gguf_type_name(value->type)) +
                                 ", not u32");
  }
  const uint64_t a = value->bits;
  if (a == 0 || (a & (a - 1)) != 0 || a > kMaxGgufAlignment) {
    return Status::invalid_input("key 'general.alignment' = " + std::to_string(a) + " is not a power of two at most " +
                                 std::to_string(kMaxGgufAlignment));
  }
  return a;
}

Status check_tensors(const GgufHeader& header, uint64_t data_size) {
  std::vector<const GgufTensorInfo*> sorted;
  for (const GgufTensorInfo& t : header.tensors) {
    const std::string what = "tensor '" + std::string(t.name) + "'";
    if (t.offset % header.alignment != 0) {
      return Status::invalid_input(what + ": offset " + std::to_string(t.offset) +
                                   " is not a multiple of the alignment " + std::to_string(header.alignment));
    }
    if (t.offset > data_size || t.nbytes > data_size - t.offset) {
      return Status::invalid_input(what + ": " + std::to_string(t.nbytes) + " bytes at offset " +
                                   std::to_string(t.offset) + " lie outside the data section of " +
                                   std::to_string(data_size) + " bytes");
    }
    if (t.nbytes > 0) sorted.push_back(&t);
  }
  std::sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i]->offset < sorted[i - 1]->offset + sorted[i - 1]->nbytes) {
      return Status::invalid_input("tensors '" + std::string(sorted[i - 1]->name) + "' and '" +
                                   std::string(sorted[i]->name) + "' overlap");
    }
  }
  return {};
}

std::string type_mismatch(std::string_view key, const GgufValue& value, std::string_view wanted) {
  std::string stored(gguf_type_name(value.type));
  if (value.type == GgufType::kArray) stored += " of " + std::string(gguf_type_name(value.element_type));
  return "key '" + std::string(key) + "' is " + stored + ", not " + std::string(wanted);
}

Result<const GgufValue*> find_array(const GgufMetadata& metadata, std::string_view key, GgufType element) {
  const GgufValue* value = metadata.find(key);
  if (value == nullptr) return Status::not_found("no key '" + std::string(key) + "'");
  if (value->type != GgufType::kArray || value->element_type != element) {
    return Status::invalid_input(type_mismatch(key, *value, "array of " + std::string(gguf_type_name(element))));
  }
  return value;
}

}  // namespace

std::string_view gguf_type_name(GgufType type) {
  static constexpr std::array<std::string_view, kGgufTypeCount> kNames = {
      "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(type);
  return i < kGgufTypeCount ? kNames[i] : "?";
}

std::string_view ggml_type_name(GgmlType type) {
  const GgmlTypeInfo* info = find_ggml_type(static_cast<uint32_t>(type));
  return info ? info->name : "?";
}
uint64_t ggml_block_size(GgmlType type) {
  const GgmlTypeInfo* info = find_ggml_type(static_cast<uint32_t>(type));
  TS_CHECK(info != nullptr && info->block_size != 0, "ggml type ", static_cast<uint32_t>(type));
  return info->block_size;
}
uint64_t gguf_scalar_size(GgufType type) { return scalar_size(type); }

DType dtype_of_ggml(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return DType::kF32;
    case GgmlType::kF16: return DType::kF16;
    case GgmlType::kBF16: return DType::kBF16;
    case GgmlType::kQ8_0: return DType::kQ8_0;
    case GgmlType::kQ4_0: return DType::kQ4_0;
    case GgmlType::kQ4_K: return DType::kQ4_K;
    case GgmlType::kQ5_K: return DType::kQ5_K;
    case GgmlType::kQ6_K: return DType::kQ6_K;
  }
  TS_CHECK(false, "ggml type ", static_cast<uint32_t>(type));
  return DType::kF32;
}

std::optional<GgmlType> ggml_type_of(DType dtype) {
  for (const GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0, GgmlType::kQ4_0,
                           GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K})
    if (dtype_of_ggml(t) == dtype) return t;
  return std::nullopt;
}

uint64_t ggml_type_size(GgmlType type) {
  const GgmlTypeInfo* info = find_ggml_type(static_cast<uint32_t>(type));
  TS_CHECK(info != nullptr && info->block_size != 0, "ggml type ", static_cast<uint32_t>(type));
  return info->type_size;
}

const GgufValue* GgufMetadata::find(std::string_view key) const {
  const auto it = index_.find(key);
  return it == index_.end() ? nullptr : &entries_[it->second].value;
}

Status GgufMetadata::add(GgufKeyValue entry) {
  if (!index_.emplace(entry.key, entries_.size()).second) {
    return Status::invalid_input("key '" + std::string(entry.key) + "' appears twice");
  }
  entries_.push_back(std::move(entry));
  return {};
}

Result<uint64_t> GgufMetadata::get_uint(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) return Status::not_found("no key '" + std::string(key) + "'");
  if (!is_integer(value->type)) return Status::invalid_input(type_mismatch(key, *value, "an unsigned integer"));
  if (is_signed(value->type) && static_cast<int64_t>(value->bits) < 0) {
    return Status::invalid_input("key '" + std::string(key) +
                                 "' = " + std::to_string(static_cast<int64_t>(value->bits)) + " is negative");
  }
  return value->bits;
}

Result<int64_t> GgufMetadata::get_int(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) return Status::not_found("no key '" + std::string(key) + "'");
  if (!is_integer(value->type)) return Status::invalid_input(type_mismatch(key, *value, "an integer"));
  if (!is_signed(value->type) && value->bits > kMaxI64) {
    return Status::invalid_input("key '" + std::string(key) + "' = " + std::to_string(value->bits) +
                                 " does not fit in i64");
  }
  return static_cast<int64_t>(value->bits);
}

Result<double> GgufMetadata::get_float(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) return Status::not_found("no key '" + std::string(key) + "'");
  if (value->type == GgufType::kF32) return double{std::bit_cast<float>(static_cast<uint32_t>(value->bits))};
  if (value->type == GgufType::kF64) return std::bit_cast<double>(value->bits);
  return Status::invalid_input(type_mismatch(key, *value, "f32 or f64"));
}

Result<bool> GgufMetadata::get_bool(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) return Status::not_found("no key '" + std::string(key) + "'");
  if (value->type != GgufType::kBool) return Status::invalid_input(type_mismatch(key, *value, "bool"));
  return value->bits != 0;
}

Result<std::string_view> GgufMetadata::get_string(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) return Status::not_found("no key '" + std::string(key) + "'");
  if (value->type != GgufType::kString) return Status::invalid_input(type_mismatch(key, *value, "string"));
  return value->string;
}

Result<std::vector<std::string_view>> GgufMetadata::get_string_array(std::string_view key) const {
  TS_ASSIGN_OR_RETURN(const GgufValue* value, find_array(*this, key, GgufType::kString));
  return value->strings;
}

Result<std::vector<float>> GgufMetadata::get_f32_array(std::string_view key) const {
  TS_ASSIGN_OR_RETURN(const GgufValue* value, find_array(*this, key, GgufType::kF32));
  std::vector<float> out(value->count);
  for (uint64_t i = 0; i < value->count; ++i) {
    out[i] = std::bit_cast<float>(static_cast<uint32_t>(load_le(value->raw.data() + 4 * i, 4)));
  }
  return out;
}

Result<std::vector<int32_t>> GgufMetadata::get_i32_array(std::string_view key) const {
  TS_ASSIGN_OR_RETURN(const GgufValue* value, find_array(*this, key, GgufType::kI32));
  std::vector<int32_t> out(value->count);
  for (uint64_t i = 0; i < value->count; ++i) {
    out[i] = static_cast<int32_t>(static_cast<uint32_t>(load_le(value->raw.data() + 4 * i, 4)));
  }
  return out;
}

Result<GgufHeader> parse_gguf(std::span<const uint8_t> file) {
  Cursor cursor(file);
  GgufHeader header;
  TS_ASSIGN_OR_RETURN(const uint64_t magic, cursor.uint(4, [] { return std::string("magic"); }));
  if (magic != kGgufMagic) {
    return Status::invalid_input("magic " + hex32(static_cast<uint32_t>(magic)) + " is not \"GGUF\"");
  }
  TS_ASSIGN_OR_RETURN(const uint64_t version, cursor.uint(4, [] { return std::string("version"); }));
  if (version != 2 && version != 3) {
    const bool big_endian = version == 0x02000000 || version == 0x03000000;
    return Status::unsupported("GGUF version " + std::to_string(version) + (big_endian ? " (a big-endian file)" : "") +
                               " is not supported (2 and 3 are)");
  }
  header.version = static_cast<uint32_t>(version);
  TS_ASSIGN_OR_RETURN(const uint64_t tensor_count, cursor.uint(8, [] { return std::string("tensor count"); }));
  TS_ASSIGN_OR_RETURN(const uint64_t kv_count, cursor.uint(8, [] { return std::string("key-value count"); }));
  if (kv_count > cursor.remaining() / kMinKvBytes) {
    return Status::invalid_input("key-value count " + std::to_string(kv_count) + " needs at least " +
                                 std::to_string(kMinKvBytes) + " bytes each but the file has " +
                                 std::to_string(cursor.remaining()) + " left");
  }
  for (uint64_t i = 0; i < kv_count; ++i) {
    TS_ASSIGN_OR_RETURN(const std::string_view key, cursor.string(kMaxGgufKeyBytes, [&] {
      return "key " + std::to_string(i) + " of " + std::to_string(kv_count);
    }));
    const std::string what = "key '" + std::string(key) + "'";
    if (key.empty()) return Status::invalid_input("key " + std::to_string(i) + " is empty");
    TS_ASSIGN_OR_RETURN(const GgufType type, read_type(cursor, [&] { return what + " value type"; }));
    TS_ASSIGN_OR_RETURN(GgufValue value, read_value(cursor, type, what, 0));
    TS_RETURN_IF_ERROR(header.metadata.add({key, std::move(value)}));
  }
  if (tensor_count > cursor.remaining() / kMinTensorInfoBytes) {
    return Status::invalid_input("tensor count " + std::to_string(tensor_count) + " needs at least " +
                                 std::to_string(kMinTensorInfoBytes) + " bytes each but the file has " +
                                 std::to_string(cursor.remaining()) + " left");
  }
  header.tensors.reserve(tensor_count);
  std::map<std::string_view, uint64_t> names;
  for (uint64_t i = 0; i < tensor_count; ++i) {
    TS_ASSIGN_OR_RETURN(GgufTensorInfo info, read_tensor_info(cursor, i));
    if (!names.emplace(info.name, i).second) {
      return Status::invalid_input("tensor '" + std::string(info.name) + "' appears twice");
    }
    header.tensors.push_back(std::move(info));
  }
  TS_ASSIGN_OR_RETURN(header.alignment, read_alignment(header.metadata));
  // pos <= file size < 2^63 and alignment <= 2^16, so the sum cannot wrap.
  header.data_offset = (cursor.pos() + header.alignment - 1) / header.alignment * header.alignment;
  if (header.data_offset > file.size()) {
    if (!header.tensors.empty()) {
      return Status::invalid_input("data section at offset " + std::to_string(header.data_offset) + " (aligned to " +
                                   std::to_string(header.alignment) + ") starts past the end of the " +
                                   std::to_string(file.size()) + "-byte file");
    }
    header.data_offset = file.size();  // no tensors: the padding may be absent
  }
  TS_RETURN_IF_ERROR(check_tensors(header, file.size() - header.data_offset));
  return header;
}

Result<GgufFile> GgufFile::open(const std::string& path) {
  GgufFile result;
  TS_ASSIGN_OR_RETURN(result.file_, MappedFile::open(path));
  Result<GgufHeader> header = parse_gguf(result.file_.bytes());
  if (!header.ok()) return header.status().with_context(path);
  result.header_ = std::move(header).value();
  for (size_t i = 0; i < result.header_.tensors.size(); ++i) result.index_.emplace(result.header_.tensors[i].name, i);
  return result;
}

const GgufTensorInfo* GgufFile::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

std::span<const uint8_t> GgufFile::bytes(const GgufTensorInfo& tensor) const {
  const std::span<const uint8_t> file = file_.bytes();
  TS_CHECK(header_.data_offset <= file.size() && tensor.offset <= file.size() - header_.data_offset &&
               tensor.nbytes <= file.size() - header_.data_offset - tensor.offset,
           "tensor ", tensor.name, " offset=", tensor.offset, " nbytes=", tensor.nbytes);
  return file.subspan(header_.data_offset + tensor.offset, tensor.nbytes);
}

}  // namespace tessera
