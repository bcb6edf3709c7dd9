// libFuzzer target for parse_safetensors (src/io/safetensors.h). Any input must
// either be refused with kInvalidInput or yield a header whose every promise
// holds: spans inside the file, byte counts that match the shapes, no overlaps,
// unique names. An accepted header must also survive encode -> parse unchanged.
// Each input is tried as a whole file and, when it starts with '{', as a header
// JSON given a correct length prefix (see LLVMFuzzerTestOneInput).
// Seeds: fuzz/corpus/safetensors_fuzz (made by fuzz/make_safetensors_corpus.py).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/check.h"
#include "io/safetensors.h"

namespace {

using tessera::SafetensorsEntry;
using tessera::SafetensorsHeader;

void check_header(const SafetensorsHeader& header, std::span<const uint8_t> file) {
  TS_CHECK(header.data_offset >= 8 && header.data_offset <= file.size(), "data_offset=", header.data_offset,
           " size=", file.size());
  const uint64_t data_size = file.size() - header.data_offset;
  std::vector<const SafetensorsEntry*> sorted;
  for (const SafetensorsEntry& t : header.tensors) {
    TS_CHECK(t.name != "__metadata__");
    TS_CHECK_LE(t.begin, t.end);
    TS_CHECK_LE(t.end, data_size);
    TS_CHECK_LE(t.shape.size(), size_t{8});
    // Re-derived here: elements, then whole blocks (a quantized dtype's rows), then bytes.
    const auto block = static_cast<uint64_t>(tessera::dtype_block_elements(t.dtype));
    uint64_t elements = 1;
    for (int64_t d : t.shape) {
      TS_CHECK(d >= 0 && d <= (int64_t{1} << 40), "dim=", d);
      TS_CHECK(!__builtin_mul_overflow(elements, static_cast<uint64_t>(d), &elements), t.name);
    }
    if (tessera::dtype_is_quantized(t.dtype)) {
      TS_CHECK(!t.shape.empty() && static_cast<uint64_t>(t.shape.back()) % block == 0, t.name);
    }
    uint64_t nbytes = 0;
    TS_CHECK(!__builtin_mul_overflow(elements / block, uint64_t{tessera::dtype_block_bytes(t.dtype)}, &nbytes), t.name);
    TS_CHECK_EQ(nbytes, t.end - t.begin);
    if (t.end > t.begin) {
      // Touch both ends of the span so ASan sees any read outside the input.
      volatile uint8_t sink = file[header.data_offset + t.begin] ^ file[header.data_offset + t.end - 1];
      (void)sink;
    }
    sorted.push_back(&t);
  }
  std::sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) { return a->name < b->name; });
  for (size_t i = 1; i < sorted.size(); ++i) TS_CHECK(sorted[i - 1]->name != sorted[i]->name, sorted[i]->name);
  std::sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) { return a->begin < b->begin; });
  uint64_t covered_to = 0;
  for (const SafetensorsEntry* t : sorted) {
    if (t->end == t->begin) continue;
    TS_CHECK(t->begin >= covered_to, "overlap at ", t->name);
    covered_to = t->end;
  }
}

// encode(parse(file)) must parse to the same tensors, metadata and bytes.
void check_round_trip(const SafetensorsHeader& header, std::span<const uint8_t> file) {
  std::vector<tessera::NamedTensor> tensors;
  for (const SafetensorsEntry& t : header.tensors) {
    tensors.push_back({t.name, t.dtype, t.shape, file.subspan(header.data_offset + t.begin, t.end - t.begin)});
  }
  const std::vector<uint8_t> encoded = tessera::encode_safetensors(tensors, header.metadata);
  const tessera::Result<SafetensorsHeader> again = tessera::parse_safetensors(encoded);
  TS_CHECK(again.ok(), again.status().to_string());
  TS_CHECK(again->metadata == header.metadata);
  TS_CHECK_EQ(again->tensors.size(), header.tensors.size());
  for (size_t i = 0; i < header.tensors.size(); ++i) {
    const SafetensorsEntry& a = header.tensors[i];
    const SafetensorsEntry& b = again->tensors[i];
    TS_CHECK(a.name == b.name && a.dtype == b.dtype && a.shape == b.shape, a.name);
    TS_CHECK(std::equal(tensors[i].bytes.begin(), tensors[i].bytes.end(),
                        encoded.begin() + again->data_offset + b.begin, encoded.begin() + again->data_offset + b.end),
             a.name);
  }
}

void fuzz_file(std::span<const uint8_t> file) {
  const tessera::Result<SafetensorsHeader> header = tessera::parse_safetensors(file);
  if (!header.ok()) {
    TS_CHECK(header.status().kind() == tessera::ErrorKind::kInvalidInput, header.status().to_string());
    TS_CHECK(!header.status().message().empty());
    return;
  }
  check_header(*header, file);
  check_round_trip(*header, file);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> input(data, size);
  fuzz_file(input);
  // Mutations that resize the JSON break the length prefix, so an input that starts
  // with '{' is also framed as JSON (through its last '}') + data with a correct prefix.
  if (size > 0 && data[0] == '{') {
    const uint64_t json_size =
        static_cast<uint64_t>(std::find(input.rbegin(), input.rend(), '}').base() - input.begin());
    std::vector<uint8_t> framed(8);
    for (int i = 0; i < 8; ++i) framed[static_cast<size_t>(i)] = static_cast<uint8_t>(json_size >> (8 * i));
    framed.insert(framed.end(), input.begin(), input.end());
    fuzz_file(framed);
  }
  return 0;
}
