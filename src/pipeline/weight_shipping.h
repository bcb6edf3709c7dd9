// Weight shipping (--ship-weights): the coordinator sends a stage the tensors of
// its layers, so stages need no copy of the checkpoint.
//
// The stage's setup carries a manifest of the tensors, in stream order
// (wire/ship_manifest.h, which also checks it on the stage side). Each group
// travels as one layer payload (wire/layer_payload.h: kLayerChunk frames,
// optionally int8/int4 and LZ4) whose bytes are the group's tensors back to
// back, in one dtype, or as u8 bytes for a group of GGUF quantized blocks
// (ship_manifest.h). The stage assembles each group within the bytes the
// manifest declares for it, and the manifest within the stage's own bound
// (refused before anything is reserved), checks that the manifest accounts for
// exactly those bytes, then writes config.json and model.safetensors into a
// directory and loads it with the ordinary checkpoint loader, which checks every
// tensor against the config (a quantized dtype for matrices only). Quantized
// blocks keep tessera's own safetensors dtype names (core/dtype.h), so the stage
// computes on them as they are and holds the quantized size, not a widened copy.
//
// Thread safety: functions of one connection's thread.
#pragma once

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/status.h"
#include "model/model.h"
#include "pipeline/frame_channel.h"
#include "wire/ship_manifest.h"

namespace tessera::pipeline {

struct ShipEncoding {
  uint8_t flags = 0;        // wire kFlagInt8 / kFlagInt4 / kFlagLz4
  uint16_t group_size = 0;  // 32, 64 or 128 with int8/int4
};
// "none", "lz4", "int8", "int8+lz4", "int4", "int4+lz4".
Result<ShipEncoding> parse_ship_encoding(const std::string& text);

// The manifest of the weights `model` binds (its layer range), with the config
// of `model_path` (a checkpoint directory's config.json, or the one a GGUF
// file's metadata stands for). GGUF quantized blocks ship as they are, so
// `encoding` may not re-encode them (INT8/INT4: kUnsupported naming a tensor).
Result<nlohmann::json> ship_manifest(const Model& model, const std::string& model_path, const ShipEncoding& encoding);
// Sends every group of `model`'s weights as kLayerChunk frames.
Status send_weights(FrameChannel& channel, const Model& model, const ShipEncoding& encoding, net::Deadline deadline);

// Stage side: reads the groups the manifest announces from `channel`, all of
// them together at most max_bytes decoded (checked on the manifest, then on
// every chunk), and writes a loadable checkpoint into `dir`.
// `progress(done, total)` reports bytes received.
Status receive_weights(FrameChannel& channel, const nlohmann::json& manifest, uint64_t max_bytes,
                       const std::filesystem::path& dir, std::chrono::milliseconds timeout,
                       const std::function<void(uint64_t, uint64_t)>& progress);

}  // namespace tessera::pipeline
