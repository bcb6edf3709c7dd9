// GgufWriter (gguf_writer.h).
#include "io/gguf_writer.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "core/check.h"

namespace tessera {

namespace {

void put_le(std::vector<uint8_t>& out, uint64_t value, uint64_t bytes) {
  for (uint64_t i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(value >> (8 * i)));
}
void put_string(std::vector<uint8_t>& out, std::string_view text) {
  put_le(out, text.size(), 8);
  out.insert(out.end(), text.begin(), text.end());
}
void put_type(std::vector<uint8_t>& out, GgufType type) { put_le(out, static_cast<uint32_t>(type), 4); }

// A value's bytes after its type: scalars as their low bytes, strings, arrays.
void put_value(std::vector<uint8_t>& out, const GgufValue& value) {
  switch (value.type) {
    case GgufType::kString: put_string(out, value.string); return;
    case GgufType::kArray:
      put_type(out, value.element_type);
      put_le(out, value.count, 8);
      if (value.element_type == GgufType::kString) {
        for (const std::string_view s : value.strings) put_string(out, s);
      } else if (value.element_type == GgufType::kArray) {
        for (const GgufValue& a : value.arrays) put_value(out, a);  // element type, count, elements
      } else {
        out.insert(out.end(), value.raw.begin(), value.raw.end());
      }
      return;
    default: put_le(out, value.bits, gguf_scalar_size(value.type)); return;
  }
}

uint64_t padded(uint64_t offset, uint64_t alignment) { return (offset + alignment - 1) / alignment * alignment; }

}  // namespace

GgufWriter::~GgufWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void GgufWriter::put(std::string_view key, std::vector<uint8_t> encoded) {
  for (Entry& e : entries_) {
    if (e.key == key) {
      e.encoded = std::move(encoded);
      return;
    }
  }
  entries_.push_back({std::string(key), std::move(encoded)});
}

void GgufWriter::set_u32(std::string_view key, uint32_t value) {
  std::vector<uint8_t> e;
  put_type(e, GgufType::kU32);
  put_le(e, value, 4);
  put(key, std::move(e));
  if (key == "general.alignment") alignment_ = value;
}

void GgufWriter::set_f32(std::string_view key, float value) {
  std::vector<uint8_t> e;
  put_type(e, GgufType::kF32);
  put_le(e, std::bit_cast<uint32_t>(value), 4);
  put(key, std::move(e));
}

void GgufWriter::set_bool(std::string_view key, bool value) {
  std::vector<uint8_t> e;
  put_type(e, GgufType::kBool);
  put_le(e, value ? 1 : 0, 1);
  put(key, std::move(e));
}

void GgufWriter::set_string(std::string_view key, std::string_view value) {
  std::vector<uint8_t> e;
  put_type(e, GgufType::kString);
  put_string(e, value);
  put(key, std::move(e));
}

void GgufWriter::set_string_array(std::string_view key, const std::vector<std::string>& values) {
  std::vector<uint8_t> e;
  put_type(e, GgufType::kArray);
  put_type(e, GgufType::kString);
  put_le(e, values.size(), 8);
  for (const std::string& s : values) put_string(e, s);
  put(key, std::move(e));
}

void GgufWriter::set_f32_array(std::string_view key, std::span<const float> values) {
  std::vector<uint8_t> e;
  put_type(e, GgufType::kArray);
  put_type(e, GgufType::kF32);
  put_le(e, values.size(), 8);
  for (const float v : values) put_le(e, std::bit_cast<uint32_t>(v), 4);
  put(key, std::move(e));
}

void GgufWriter::set_i32_array(std::string_view key, std::span<const int32_t> values) {
  std::vector<uint8_t> e;
  put_type(e, GgufType::kArray);
  put_type(e, GgufType::kI32);
  put_le(e, values.size(), 8);
  for (const int32_t v : values) put_le(e, static_cast<uint32_t>(v), 4);
  put(key, std::move(e));
}

void GgufWriter::copy(std::string_view key, const GgufValue& value) {
  std::vector<uint8_t> e;
  put_type(e, value.type);
  put_value(e, value);
  put(key, std::move(e));
  if (key == "general.alignment" && value.type == GgufType::kU32) alignment_ = value.bits;
}

void GgufWriter::remove(std::string_view key) {
  std::erase_if(entries_, [&](const Entry& e) { return e.key == key; });
}

Status GgufWriter::add_tensor(std::string_view name, std::vector<uint64_t> dims, GgmlType type) {
  if (name.size() > kMaxGgufNameBytes)
    return Status::invalid_input("GGUF tensor name '" + std::string(name) + "' is longer than 63 bytes");
  for (const Tensor& t : tensors_)
    if (t.name == name) return Status::invalid_input("GGUF tensor '" + std::string(name) + "' declared twice");
  if (dims.empty() || dims.size() > kMaxGgufDims || dims[0] % ggml_block_size(type) != 0)
    return Status::invalid_input("GGUF tensor '" + std::string(name) + "': dims do not fit " +
                                 std::string(ggml_type_name(type)));
  uint64_t elements = 1;
  for (const uint64_t d : dims) elements *= d;
  const uint64_t bytes = elements / ggml_block_size(type) * ggml_type_size(type);
  const uint64_t offset = padded(data_bytes_, alignment_);
  tensors_.push_back({std::string(name), std::move(dims), type, offset, bytes});
  data_bytes_ = offset + bytes;
  return {};
}

Status GgufWriter::write_bytes(const void* data, size_t size) {
  if (size != 0 && std::fwrite(data, 1, size, file_) != size)
    return Status::invalid_input("cannot write " + path_ + ": " + std::strerror(errno));
  return {};
}

Status GgufWriter::open(const std::string& path) {
  TS_CHECK(file_ == nullptr, "GgufWriter::open twice");
  path_ = path;
  file_ = std::fopen(path.c_str(), "wb");
  if (file_ == nullptr) return Status::invalid_input("cannot create " + path + ": " + std::strerror(errno));
  std::vector<uint8_t> header;
  put_le(header, kGgufMagic, 4);
  put_le(header, 3, 4);
  put_le(header, tensors_.size(), 8);
  put_le(header, entries_.size(), 8);
  for (const Entry& e : entries_) {
    put_string(header, e.key);
    header.insert(header.end(), e.encoded.begin(), e.encoded.end());
  }
  for (const Tensor& t : tensors_) {
    put_string(header, t.name);
    put_le(header, t.dims.size(), 4);
    for (const uint64_t d : t.dims) put_le(header, d, 8);
    put_le(header, static_cast<uint32_t>(t.type), 4);
    put_le(header, t.offset, 8);
  }
  header.resize(padded(header.size(), alignment_), 0);
  return write_bytes(header.data(), header.size());
}

Status GgufWriter::write_tensor(std::span<const uint8_t> bytes) {
  TS_CHECK(file_ != nullptr && next_tensor_ < tensors_.size(), "GgufWriter::write_tensor beyond the declared");
  const Tensor& t = tensors_[next_tensor_];
  TS_CHECK(bytes.size() == t.bytes, "tensor ", t.name, ": ", bytes.size(), " bytes for ", t.bytes);
  const std::vector<uint8_t> zeros(t.offset - written_, 0);
  TS_RETURN_IF_ERROR(write_bytes(zeros.data(), zeros.size()));
  TS_RETURN_IF_ERROR(write_bytes(bytes.data(), bytes.size()));
  written_ = t.offset + t.bytes;
  ++next_tensor_;
  return {};
}

Status GgufWriter::finish() {
  TS_CHECK(next_tensor_ == tensors_.size(), "GgufWriter::finish after ", next_tensor_, " of ", tensors_.size(),
           " tensors");
  // Pad the data section to the alignment, as gguf-py and ggml do.
  const std::vector<uint8_t> zeros(padded(written_, alignment_) - written_, 0);
  TS_RETURN_IF_ERROR(write_bytes(zeros.data(), zeros.size()));
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  if (!closed) return Status::invalid_input("cannot write " + path_ + ": " + std::strerror(errno));
  return {};
}

}  // namespace tessera
