// Writes the seed corpora of the wire fuzz targets with the project's own
// encoders: valid frames, headers and chunk sequences, each small (< 4 KiB).
//   make_wire_corpus DIR   (DIR is fuzz/corpus; one subfolder per target)
// A plain program (no gtest); built by fuzz/CMakeLists.txt. Deterministic, so
// rerunning it rewrites the same files.
#include <cstdio>
#include <string>
#include <vector>

#include "corpus_writer.h"
#include "wire_fuzz_limits.h"

namespace {

using namespace tessera;
using namespace tessera::wire;

// Decoded bytes of `numel` elements of `dtype`: small values, some repetition.
std::vector<uint8_t> values(DType dtype, uint64_t numel) {
  std::vector<uint8_t> out;
  for (uint64_t i = 0; i < numel; ++i) {
    const float v = static_cast<float>(static_cast<int>(i % 11) - 5) * 0.25f;
    switch (dtype) {
      case DType::kF32: put_u32(out, std::bit_cast<uint32_t>(v)); break;
      case DType::kF16: put_u16(out, f32_to_f16(v)); break;
      case DType::kBF16: put_u16(out, f32_to_bf16(v)); break;
      case DType::kI64: put_u64(out, i * 7); break;
      case DType::kI32: put_u32(out, static_cast<uint32_t>(i * 7)); break;
      case DType::kU8: put_u8(out, static_cast<uint8_t>((i / 8) % 5)); break;
    }
  }
  return out;
}

std::vector<uint8_t> tensor_frame(const Encoding& e, std::vector<uint64_t> shape) {
  uint64_t numel = 1;
  for (uint64_t d : shape) numel *= d;
  return encode_tensor_frame(1, e, shape, values(e.dtype, numel));
}

std::vector<uint8_t> layer_frames(const Encoding& e, uint64_t numel, uint64_t chunk_bytes) {
  std::vector<uint8_t> out;
  for (const LayerChunk& c : encode_layer_chunks(3, e, values(e.dtype, numel), chunk_bytes)) {
    const std::vector<uint8_t> frame = encode_frame(MessageKind::kLayerChunk, 1, c.header, c.payload);
    out.insert(out.end(), frame.begin(), frame.end());
  }
  return out;
}

std::vector<uint8_t> with_selector(uint8_t selector, const std::vector<uint8_t>& header) {
  std::vector<uint8_t> out = {selector};
  out.insert(out.end(), header.begin(), header.end());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s fuzz/corpus\n", argv[0]);
    return 2;
  }
  const fuzzing::CorpusWriter corpus(argv[1]);

  corpus.write("wire_frame_fuzz", "tensor_plain", tensor_frame(Encoding{DType::kF32, 0, 0}, {2, 8}));
  corpus.write("wire_frame_fuzz", "layer_chunk", layer_frames(Encoding{DType::kU8, 0, 0}, 40, 64));
  corpus.write("wire_frame_fuzz", "empty", encode_frame(MessageKind::kTensor, 0, {}, {}));

  // Header-only seeds, one per limit set of fuzz::header_limit_sets() (selector = index).
  const auto header = [](const Encoding& e, std::vector<uint64_t> shape, uint64_t payload) {
    return encode_tensor_header(e, shape, payload);
  };
  corpus.write("wire_tensor_header_fuzz", "hidden_f32",
               with_selector(0, header({DType::kF32, 0, 0}, {3, 64}, 3 * 64 * 4)));
  corpus.write("wire_tensor_header_fuzz", "hidden_int8",
               with_selector(1, header({DType::kBF16, kFlagInt8, 32}, {2, 64}, 4 * 36)));
  corpus.write("wire_tensor_header_fuzz", "hidden_int4_lz4",
               with_selector(1, header({DType::kBF16, kFlagInt4 | kFlagLz4, 32}, {2, 64}, 50)));
  corpus.write("wire_tensor_header_fuzz", "token_ids", with_selector(2, header({DType::kI64, 0, 0}, {5}, 40)));
  corpus.write("wire_tensor_header_fuzz", "scalar", with_selector(3, header({DType::kF32, 0, 0}, {}, 4)));
  corpus.write("wire_tensor_header_fuzz", "loose_zero_axis",
               with_selector(4, header({DType::kU8, 0, 0}, {0, 1u << 30, 7}, 0)));
  corpus.write("wire_tensor_header_fuzz", "rank8_lz4",
               with_selector(5, header({DType::kU8, kFlagLz4, 0}, {1, 2, 3, 4, 1, 2, 3, 4}, 30)));

  corpus.write("wire_lz4_fuzz", "u8_lz4", tensor_frame(Encoding{DType::kU8, kFlagLz4, 0}, {4, 512}));
  corpus.write("wire_lz4_fuzz", "f32_lz4", tensor_frame(Encoding{DType::kF32, kFlagLz4, 0}, {2, 100}));
  corpus.write("wire_lz4_fuzz", "u8_plain", tensor_frame(Encoding{DType::kU8, 0, 0}, {1, 33}));

  corpus.write("wire_quant_fuzz", "f32_int8_g32", tensor_frame(Encoding{DType::kF32, kFlagInt8, 32}, {2, 64}));
  corpus.write("wire_quant_fuzz", "bf16_int4_g64", tensor_frame(Encoding{DType::kBF16, kFlagInt4, 64}, {1, 128}));
  corpus.write("wire_quant_fuzz", "f16_int8_lz4_g128",
               tensor_frame(Encoding{DType::kF16, kFlagInt8 | kFlagLz4, 128}, {3, 128}));
  corpus.write("wire_quant_fuzz", "bf16_int4_lz4_g32",
               tensor_frame(Encoding{DType::kBF16, kFlagInt4 | kFlagLz4, 32}, {2, 96}));
  corpus.write("wire_quant_fuzz", "f32_plain", tensor_frame(Encoding{DType::kF32, 0, 0}, {1, 32}));

  corpus.write("wire_layer_fuzz", "u8_plain_3_chunks", layer_frames(Encoding{DType::kU8, 0, 0}, 100, 40));
  corpus.write("wire_layer_fuzz", "u8_lz4_2_chunks", layer_frames(Encoding{DType::kU8, kFlagLz4, 0}, 600, 20));
  corpus.write("wire_layer_fuzz", "bf16_int8_3_chunks", layer_frames(Encoding{DType::kBF16, kFlagInt8, 32}, 96, 40));
  corpus.write("wire_layer_fuzz", "f16_int4_lz4_2_chunks",
               layer_frames(Encoding{DType::kF16, kFlagInt4 | kFlagLz4, 64}, 256, 30));
  corpus.write("wire_layer_fuzz", "empty_layer", layer_frames(Encoding{DType::kU8, 0, 0}, 0, 64));
  return 0;
}
