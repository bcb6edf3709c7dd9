// libFuzzer target for parse_gguf (src/io/gguf.h). Any input must either be
// refused with kInvalidInput or kUnsupported and a message, or yield a header
// whose every promise holds: strings, arrays and tensor bytes inside the input,
// counts that match the bytes, a power-of-two alignment, aligned and
// non-overlapping tensors inside the data section, unique names, byte counts
// that match dims and type. Every typed getter is asked for every key; each
// must answer without reading outside the input. Every accepted tensor is
// dequantized (src/io/gguf_quant.h) from whatever bytes its blocks hold.
// Seeds: fuzz/corpus/gguf_fuzzer (valid GGUF files: tests/fixtures/gguf/valid.gguf
// and files written by gguf-py).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/check.h"
#include "io/gguf.h"
#include "io/gguf_quant.h"

namespace {

using tessera::GgufType;
using tessera::GgufValue;

struct Input {
  const uint8_t* begin;
  const uint8_t* end;

  void check_inside(const void* p, size_t n) const {
    const auto* q = static_cast<const uint8_t*>(p);
    TS_CHECK(n == 0 || (q >= begin && q <= end && n <= static_cast<size_t>(end - q)), "span outside the input");
    if (n > 0) {
      volatile uint8_t sink = q[0] ^ q[n - 1];  // ASan sees any read outside
      (void)sink;
    }
  }
};

void check_value(const GgufValue& v, const Input& in, int depth) {
  TS_CHECK(depth < static_cast<int>(tessera::kMaxGgufArrayDepth), "depth=", depth);
  if (v.type == GgufType::kString) in.check_inside(v.string.data(), v.string.size());
  if (v.type == GgufType::kBool) TS_CHECK_LE(v.bits, uint64_t{1});
  if (v.type != GgufType::kArray) return;
  in.check_inside(v.raw.data(), v.raw.size());
  if (v.element_type == GgufType::kString) {
    TS_CHECK_EQ(v.strings.size(), v.count);
    for (std::string_view s : v.strings) in.check_inside(s.data(), s.size());
  } else if (v.element_type == GgufType::kArray) {
    TS_CHECK_EQ(v.arrays.size(), v.count);
    for (const GgufValue& a : v.arrays) check_value(a, in, depth + 1);
  } else {
    TS_CHECK(v.count == 0 || v.raw.size() % v.count == 0, "raw=", v.raw.size(), " count=", v.count);
  }
}

void check_header(const tessera::GgufHeader& h, std::span<const uint8_t> file) {
  const Input in{file.data(), file.data() + file.size()};
  TS_CHECK(h.version == 2 || h.version == 3, "version=", h.version);
  TS_CHECK(h.alignment != 0 && (h.alignment & (h.alignment - 1)) == 0, "alignment=", h.alignment);
  TS_CHECK_LE(h.data_offset, file.size());
  for (const tessera::GgufKeyValue& kv : h.metadata.entries()) {
    in.check_inside(kv.key.data(), kv.key.size());
    check_value(kv.value, in, 0);
    TS_CHECK(h.metadata.find(kv.key) == &kv.value, kv.key);
    // Each getter either answers or refuses; none may crash or read outside.
    (void)h.metadata.get_uint(kv.key);
    (void)h.metadata.get_int(kv.key);
    (void)h.metadata.get_float(kv.key);
    (void)h.metadata.get_bool(kv.key);
    (void)h.metadata.get_string(kv.key);
    (void)h.metadata.get_string_array(kv.key);
    (void)h.metadata.get_f32_array(kv.key);
    (void)h.metadata.get_i32_array(kv.key);
  }
  const uint64_t data_size = file.size() - h.data_offset;
  std::vector<const tessera::GgufTensorInfo*> sorted;
  for (const tessera::GgufTensorInfo& t : h.tensors) {
    in.check_inside(t.name.data(), t.name.size());
    TS_CHECK_LE(t.dims.size(), size_t{tessera::kMaxGgufDims});
    uint64_t numel = 1;
    for (uint64_t d : t.dims) TS_CHECK(!__builtin_mul_overflow(numel, d, &numel), t.name);
    const uint64_t block = tessera::ggml_block_size(t.type);
    TS_CHECK_EQ(numel % block, uint64_t{0});
    TS_CHECK_EQ(t.nbytes, numel / block * tessera::ggml_type_size(t.type));
    TS_CHECK_EQ(t.offset % h.alignment, uint64_t{0});
    TS_CHECK(t.offset <= data_size && t.nbytes <= data_size - t.offset, t.name);
    in.check_inside(file.data() + h.data_offset + t.offset, t.nbytes);
    // Dequantization reads exactly the tensor's bytes (ASan checks) for any block contents.
    std::vector<float> values(numel);
    tessera::dequantize_gguf(t.type, file.subspan(h.data_offset + t.offset, t.nbytes), values);
    sorted.push_back(&t);
  }
  std::sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) { return a->name < b->name; });
  for (size_t i = 1; i < sorted.size(); ++i) TS_CHECK(sorted[i - 1]->name != sorted[i]->name, sorted[i]->name);
  std::sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) { return a->offset < b->offset; });
  uint64_t covered_to = 0;
  for (const tessera::GgufTensorInfo* t : sorted) {
    if (t->nbytes == 0) continue;
    TS_CHECK(t->offset >= covered_to, "overlap at ", t->name);
    covered_to = t->offset + t->nbytes;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> file(data, size);
  const tessera::Result<tessera::GgufHeader> header = tessera::parse_gguf(file);
  if (!header.ok()) {
    const tessera::ErrorKind kind = header.status().kind();
    TS_CHECK(kind == tessera::ErrorKind::kInvalidInput || kind == tessera::ErrorKind::kUnsupported,
             header.status().to_string());
    TS_CHECK(!header.status().message().empty());
    return 0;
  }
  check_header(*header, file);
  return 0;
}
