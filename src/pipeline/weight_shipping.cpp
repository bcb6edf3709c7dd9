#include "pipeline/weight_shipping.h"

#include <cstring>
#include <fstream>
#include <map>

#include "core/text_file.h"
#include "io/gguf_model.h"
#include "io/safetensors.h"
#include "wire/byte_io.h"
#include "wire/frame.h"
#include "wire/layer_payload.h"

namespace tessera::pipeline {
namespace {

using json = nlohmann::json;

constexpr uint64_t kChunkBytes = 1 << 20;

struct WeightGroup {
  DType dtype = DType::kF32;
  std::vector<std::pair<std::string, TensorView>> tensors;
};

// "model.layers.12.mlp.up_proj.weight" -> 12; -1 outside the layers.
int64_t layer_of(const std::string& name) {
  const size_t at = name.find("layers.");
  if (at == std::string::npos) return -1;
  return std::strtoll(name.c_str() + at + 7, nullptr, 10);
}

// The groups in stream order, each with the dtype its payload travels as
// (wire::payload_dtype). GGUF blocks ship as they are: never as INT8/INT4.
Result<std::vector<WeightGroup>> groups_of(const Model& model, const ShipEncoding& ship) {
  const LayerRange range = model.range();
  std::vector<WeightGroup> groups(static_cast<size_t>(range.end - range.begin) + 1);
  for (auto& [name, view] : named_weights(model)) {
    const int64_t layer = layer_of(name);
    const size_t g = layer < 0 ? 0 : static_cast<size_t>(layer - range.begin + 1);
    groups[g].tensors.push_back({name, view});
  }
  // A middle stage has nothing outside its layers: groups are numbered densely.
  std::erase_if(groups, [](const WeightGroup& group) { return group.tensors.empty(); });
  for (WeightGroup& group : groups) {
    std::vector<DType> dtypes;
    for (const auto& [name, view] : group.tensors) dtypes.push_back(view.dtype);
    const std::optional<DType> dtype = wire::payload_dtype(dtypes);
    if (!dtype) {
      return Status::unsupported("--ship-weights: " + group.tensors.front().first + " and " +
                                 group.tensors.back().first + " are of two dtypes in one layer");
    }
    group.dtype = *dtype;
    if (group.dtype == DType::kU8 && (ship.flags & (wire::kFlagInt8 | wire::kFlagInt4)) != 0) {
      return Status::unsupported("--ship-weights: " + wire::flags_string(ship.flags) + " re-encodes weights, and " +
                                 "the group of " + group.tensors.front().first +
                                 " holds GGUF quantized blocks, which ship as they are: use none or lz4");
    }
  }
  return groups;
}

}  // namespace

Result<ShipEncoding> parse_ship_encoding(const std::string& text) {
  static const std::map<std::string, uint8_t> kFlags = {
      {"none", 0},
      {"lz4", wire::kFlagLz4},
      {"int8", wire::kFlagInt8},
      {"int8+lz4", wire::kFlagInt8 | wire::kFlagLz4},
      {"int4", wire::kFlagInt4},
      {"int4+lz4", wire::kFlagInt4 | wire::kFlagLz4},
  };
  auto it = kFlags.find(text);
  if (it == kFlags.end()) {
    return Status::invalid_input("--ship-weights must be none, lz4, int8, int8+lz4, int4 or int4+lz4, not '" + text +
                                 "'");
  }
  const bool quantized = (it->second & (wire::kFlagInt8 | wire::kFlagInt4)) != 0;
  return ShipEncoding{it->second, static_cast<uint16_t>(quantized ? 64 : 0)};
}

Result<json> ship_manifest(const Model& model, const std::string& model_path, const ShipEncoding& ship) {
  json config;
  if (is_gguf_file(model_path)) {
    TS_ASSIGN_OR_RETURN(const GgufFile file, GgufFile::open(model_path));
    TS_ASSIGN_OR_RETURN(config, gguf_hf_config(file));
  } else {
    TS_ASSIGN_OR_RETURN(config, read_json_file((std::filesystem::path(model_path) / "config.json").string()));
  }
  TS_ASSIGN_OR_RETURN(const std::vector<WeightGroup> groups, groups_of(model, ship));
  json tensors = json::array();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const auto& [name, view] : groups[g].tensors) {
      tensors.push_back({name, std::string(dtype_safetensors_name(view.dtype)), view.shape, g});
    }
  }
  return json{{"config", config}, {"tensors", tensors}};
}

Status send_weights(FrameChannel& channel, const Model& model, const ShipEncoding& ship, net::Deadline deadline) {
  TS_ASSIGN_OR_RETURN(const std::vector<WeightGroup> groups, groups_of(model, ship));
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<uint8_t> bytes;
    for (const auto& [name, view] : groups[g].tensors) {
      const auto* data = static_cast<const uint8_t*>(view.data);
      bytes.insert(bytes.end(), data, data + view.nbytes());
    }
    const wire::Encoding encoding{groups[g].dtype, ship.flags, ship.group_size};
    const uint64_t elements = bytes.size() / dtype_size(groups[g].dtype);
    if (ship.group_size != 0 && elements % ship.group_size != 0) {
      return Status::unsupported("--ship-weights: layer group " + std::to_string(g) + " has " +
                                 std::to_string(elements) + " elements, not a multiple of the quantization group " +
                                 std::to_string(ship.group_size));
    }
    for (const wire::LayerChunk& chunk :
         wire::encode_layer_chunks(static_cast<uint32_t>(g), encoding, bytes, kChunkBytes)) {
      TS_RETURN_IF_ERROR(channel.write_frame(
          wire::encode_frame(wire::MessageKind::kLayerChunk, 0, chunk.header, chunk.payload), deadline));
    }
  }
  return {};
}

Status receive_weights(FrameChannel& channel, const json& manifest, uint64_t max_bytes,
                       const std::filesystem::path& dir, std::chrono::milliseconds timeout,
                       const std::function<void(uint64_t, uint64_t)>& progress) {
  TS_ASSIGN_OR_RETURN(const auto groups, wire::check_manifest(manifest, max_bytes));
  uint64_t total = 0;  // <= max_bytes (check_manifest)
  for (const auto& group : groups) {
    for (const wire::ShipTensor& t : group) total += t.bytes;
  }
  std::vector<std::vector<uint8_t>> payloads;
  uint64_t done = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    uint64_t expected = 0;
    for (const wire::ShipTensor& t : groups[g]) {
      expected += t.bytes;  // <= total <= max_bytes
    }
    wire::LayerLimits limits;
    limits.name = "weights group " + std::to_string(g);
    limits.layer = static_cast<uint32_t>(g);
    std::vector<DType> dtypes;
    for (const wire::ShipTensor& t : groups[g]) dtypes.push_back(t.dtype);
    limits.dtypes = {*wire::payload_dtype(dtypes)};  // check_manifest found one
    limits.flags = wire::kKnownFlags;
    limits.max_layer_bytes = expected;  // the manifest's own count: a larger payload is refused before it is kept
    wire::LayerAssembler assembler(limits);
    // A chunk's stored bytes are at most its LZ4 bound, a little above the decoded size.
    const wire::FrameLimits frame_limits{wire::kLayerChunkHeaderBytes, kChunkBytes + kChunkBytes / 128 + 64};
    while (!assembler.complete()) {
      TS_ASSIGN_OR_RETURN(wire::Frame frame, channel.read_frame(frame_limits, net::deadline_after(timeout)));
      if (frame.prefix.kind != wire::MessageKind::kLayerChunk) {
        return Status::invalid_input("ship: expected a layer chunk, got frame kind " +
                                     std::to_string(static_cast<uint32_t>(frame.prefix.kind)));
      }
      TS_RETURN_IF_ERROR(assembler.add_chunk(frame.header, frame.payload));
      progress(done + assembler.received_bytes(), total);
    }
    TS_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, assembler.finish());
    if (bytes.size() != expected) {
      return Status::invalid_input("ship: layer group " + std::to_string(g) + " holds " + std::to_string(bytes.size()) +
                                   " bytes, the manifest " + std::to_string(expected));
    }
    done += bytes.size();
    payloads.push_back(std::move(bytes));
  }
  std::vector<NamedTensor> tensors;
  for (size_t g = 0; g < groups.size(); ++g) {
    uint64_t offset = 0;
    for (const wire::ShipTensor& t : groups[g]) {
      tensors.push_back({t.name, t.dtype, t.shape, std::span(payloads[g]).subspan(offset, t.bytes)});
      offset += t.bytes;
    }
  }
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return Status::internal(dir.string() + ": " + error.message());
  std::ofstream(dir / "config.json") << manifest["config"].dump(2);
  const std::vector<uint8_t> file = encode_safetensors(tensors, {{"format", "pt"}});
  std::ofstream out(dir / "model.safetensors", std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(file.data()), static_cast<std::streamsize>(file.size()));
  if (!out) return Status::internal((dir / "model.safetensors").string() + ": write failed");
  return {};
}

}  // namespace tessera::pipeline
