// safetensors reader and writer (layout in safetensors.h). parse_safetensors
// treats the file as hostile: every size is checked against the file before it
// is used, arithmetic on sizes is checked u64, and nlohmann::json runs with
// exceptions disabled. Pure functions; SafetensorsFile is immutable after open.
#include "io/safetensors.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/check.h"
#include "core/text_file.h"

namespace tessera {

namespace {

using json = nlohmann::json;

constexpr size_t kMaxRank = 8;
constexpr uint64_t kMaxDim = uint64_t{1} << 40;

Status tensor_error(const std::string& name, const std::string& what) {
  return Status::invalid_input("tensor '" + name + "': " + what);
}

std::string offsets_string(uint64_t begin, uint64_t end) {
  std::string out = "[";  // appended piecewise: g++ 12 -Wrestrict misfires on "[" + std::string
  out += std::to_string(begin);
  out += ", ";
  out += std::to_string(end);
  return out + "]";
}

// Validates one header entry (everything that does not involve other tensors).
Result<SafetensorsEntry> parse_entry(const std::string& name, const json& value, uint64_t data_size) {
  if (!value.is_object()) return tensor_error(name, "entry is not a JSON object");
  SafetensorsEntry entry;
  entry.name = name;

  const auto dtype_it = value.find("dtype");
  if (dtype_it == value.end()) return tensor_error(name, "missing field 'dtype'");
  if (!dtype_it->is_string()) return tensor_error(name, "field 'dtype' is not a string");
  const std::string& dtype_name = dtype_it->get_ref<const std::string&>();
  const std::optional<DType> dtype = dtype_from_safetensors(dtype_name);
  if (!dtype) return tensor_error(name, "unknown dtype '" + dtype_name + "'");
  entry.dtype = *dtype;

  const auto shape_it = value.find("shape");
  if (shape_it == value.end()) return tensor_error(name, "missing field 'shape'");
  if (!shape_it->is_array()) return tensor_error(name, "field 'shape' is not an array");
  if (shape_it->size() > kMaxRank) {
    return tensor_error(
        name, "shape has rank " + std::to_string(shape_it->size()) + ", more than " + std::to_string(kMaxRank));
  }
  for (size_t i = 0; i < shape_it->size(); ++i) {
    const json& dim = (*shape_it)[i];
    const std::string field = "shape[" + std::to_string(i) + "]";
    if (dim.is_number_integer() && !dim.is_number_unsigned()) {
      return tensor_error(name, field + " is negative (" + std::to_string(dim.get<int64_t>()) + ")");
    }
    if (!dim.is_number_unsigned()) return tensor_error(name, field + " is not a non-negative integer");
    const uint64_t d = dim.get<uint64_t>();
    if (d > kMaxDim) return tensor_error(name, field + " = " + std::to_string(d) + " is above 2^40");
    entry.shape.push_back(static_cast<int64_t>(d));
  }

  const auto offsets_it = value.find("data_offsets");
  if (offsets_it == value.end()) return tensor_error(name, "missing field 'data_offsets'");
  const json& offsets = *offsets_it;
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    return tensor_error(name, "field 'data_offsets' is not two unsigned integers [begin, end]");
  }
  entry.begin = offsets[0].get<uint64_t>();
  entry.end = offsets[1].get<uint64_t>();
  if (entry.begin > entry.end) {
    return tensor_error(name, "data_offsets " + offsets_string(entry.begin, entry.end) + " decrease");
  }
  if (entry.end > data_size) {
    return tensor_error(name, "data_offsets " + offsets_string(entry.begin, entry.end) +
                                  " outside the data section of " + std::to_string(data_size) + " bytes");
  }

  const std::optional<uint64_t> nbytes = tensor_bytes(entry.dtype, entry.shape);
  const std::string described = "dtype " + dtype_name + " shape " + shape_string(entry.shape);
  if (!nbytes) {
    const std::string blocks =
        " is not rows of whole blocks of " + std::to_string(dtype_block_elements(entry.dtype)) + " elements, or";
    return tensor_error(name,
                        described + (dtype_is_quantized(entry.dtype) ? blocks : "") + " overflows a 64-bit byte count");
  }
  if (*nbytes != entry.end - entry.begin) {
    return tensor_error(name, described + " needs " + std::to_string(*nbytes) + " bytes but data_offsets span " +
                                  std::to_string(entry.end - entry.begin));
  }
  return entry;
}

Status parse_metadata(const json& value, std::map<std::string, std::string>& metadata) {
  if (!value.is_object()) return Status::invalid_input("'__metadata__' is not a JSON object");
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string()) return Status::invalid_input("'__metadata__' value of '" + key + "' is not a string");
    metadata.emplace(key, item.get<std::string>());
  }
  return {};
}

// Rejects any two tensors with a non-empty byte range in common. Sorted by begin,
// an overlap always shows between neighbours.
Status check_overlaps(const std::vector<SafetensorsEntry>& tensors) {
  std::vector<const SafetensorsEntry*> sorted;
  for (const auto& t : tensors)
    if (t.end > t.begin) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(),
            [](const auto* a, const auto* b) { return a->begin != b->begin ? a->begin < b->begin : a->end < b->end; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i]->begin < sorted[i - 1]->end) {
      return Status::invalid_input("tensors '" + sorted[i - 1]->name + "' and '" + sorted[i]->name + "' overlap");
    }
  }
  return {};
}

}  // namespace

Result<SafetensorsHeader> parse_safetensors(std::span<const uint8_t> file) {
  const uint64_t file_size = file.size();
  if (file_size < 8) {
    return Status::invalid_input("file is " + std::to_string(file_size) +
                                 " bytes, shorter than the 8-byte header length");
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | file[static_cast<size_t>(i)];
  if (header_len > kMaxSafetensorsHeaderBytes) {
    return Status::invalid_input("header length " + std::to_string(header_len) + " exceeds the limit of " +
                                 std::to_string(kMaxSafetensorsHeaderBytes) + " bytes");
  }
  if (header_len > file_size - 8) {
    return Status::invalid_input("header length " + std::to_string(header_len) + " exceeds file size " +
                                 std::to_string(file_size));
  }

  // nlohmann keeps the last of duplicate keys and sorts the rest, so the callback
  // records the top-level keys in file order.
  std::vector<std::string> names;
  const json::parser_callback_t record_keys = [&names](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key) names.push_back(parsed.get<std::string>());
    return true;
  };
  const std::string_view text(reinterpret_cast<const char*>(file.data()) + 8, header_len);
  TS_ASSIGN_OR_RETURN(const json root, parse_json(text, "header", {.observe = record_keys}));
  if (!root.is_object()) return Status::invalid_input("header is not a JSON object");

  std::vector<std::string> sorted_names = names;
  std::sort(sorted_names.begin(), sorted_names.end());
  const auto duplicate = std::adjacent_find(sorted_names.begin(), sorted_names.end());
  if (duplicate != sorted_names.end()) return tensor_error(*duplicate, "name appears twice in the header");

  SafetensorsHeader header;
  header.data_offset = 8 + header_len;
  const uint64_t data_size = file_size - header.data_offset;
  header.tensors.reserve(names.size());
  for (const std::string& name : names) {
    const auto it = root.find(name);
    TS_CHECK(it != root.end(), "key ", name, " recorded but not in the parsed header");
    const json& value = *it;
    if (name == "__metadata__") {
      TS_RETURN_IF_ERROR(parse_metadata(value, header.metadata));
      continue;
    }
    TS_ASSIGN_OR_RETURN(SafetensorsEntry entry, parse_entry(name, value, data_size));
    header.tensors.push_back(std::move(entry));
  }
  TS_RETURN_IF_ERROR(check_overlaps(header.tensors));
  return header;
}

std::vector<uint8_t> encode_safetensors(const std::vector<NamedTensor>& tensors,
                                        const std::map<std::string, std::string>& metadata) {
  // Entries are joined in the given order (nlohmann's object would sort them).
  std::string header = "{";
  if (!metadata.empty()) header += "\"__metadata__\":" + json(metadata).dump();
  uint64_t offset = 0;
  for (const NamedTensor& t : tensors) {
    const std::optional<uint64_t> bytes = tensor_bytes(t.dtype, t.shape);
    TS_CHECK(bytes && *bytes == t.bytes.size(), "tensor '", t.name, "': ", t.bytes.size(), " bytes");
    const json entry = {{"dtype", dtype_safetensors_name(t.dtype)},
                        {"shape", t.shape},
                        {"data_offsets", {offset, offset + t.bytes.size()}}};
    if (header.size() > 1) header += ",";
    header += json(t.name).dump() + ":" + entry.dump();
    offset += t.bytes.size();
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');  // as the reference writer pads

  std::vector<uint8_t> out;
  out.reserve(8 + header.size() + offset);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(uint64_t{header.size()} >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  for (const NamedTensor& t : tensors) out.insert(out.end(), t.bytes.begin(), t.bytes.end());
  return out;
}

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  SafetensorsFile result;
  TS_ASSIGN_OR_RETURN(result.file_, MappedFile::open(path));
  Result<SafetensorsHeader> header = parse_safetensors(result.file_.bytes());
  if (!header.ok()) return header.status().with_context(path);
  result.header_ = std::move(header).value();
  for (size_t i = 0; i < result.header_.tensors.size(); ++i) result.index_.emplace(result.header_.tensors[i].name, i);
  return result;
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

TensorView SafetensorsFile::view(const SafetensorsEntry& entry) const {
  const std::span<const uint8_t> bytes = file_.bytes();
  TS_CHECK(header_.data_offset + entry.end <= bytes.size(), "tensor ", entry.name, " end=", entry.end);
  return TensorView{entry.dtype, entry.shape, bytes.data() + header_.data_offset + entry.begin};
}

}  // namespace tessera
