// libFuzzer target for Opener::open (src/seal/piece.h). Bytes 0..1 choose the
// receiver's expectation (seal_fuzz_fixture.h); the rest is the piece as it
// arrived. Any input is refused with kInvalidInput and a zeroed buffer, or it
// opens, in which case the plaintext re-seals to exactly the same wire bytes.
// Seeds: fuzz/corpus/seal_piece_fuzz (fuzz/make_seal_corpus.cpp).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/check.h"
#include "seal_fuzz_fixture.h"
#include "wire/byte_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::seal;
  if (size < 2) return 0;
  const std::span<const uint8_t> input(data, size);
  const PieceContext expected = fuzz::expected_context(tessera::wire::get_u16(input, 0));
  const std::span<const uint8_t> wire = input.subspan(2);

  static Opener opener(fuzz::fuzz_key());
  std::vector<uint8_t> plain(fuzz::expected_payload_bytes(expected), 0xa5);
  const tessera::Status status = opener.open(expected, wire, plain);
  if (!status.ok()) {
    TS_CHECK(status.kind() == tessera::ErrorKind::kInvalidInput, status.to_string());
    TS_CHECK(std::all_of(plain.begin(), plain.end(), [](uint8_t b) { return b == 0; }), "plain not zeroed");
    return 0;
  }
  TS_CHECK_EQ(wire.size(), piece_wire_bytes(plain.size(), true));
  Sealer sealer(fuzz::fuzz_key());
  std::vector<uint8_t> again(wire.size());
  const tessera::Status sealed = sealer.seal(expected, plain, again);
  TS_CHECK(sealed.ok(), sealed.to_string());
  TS_CHECK(std::equal(again.begin(), again.end(), wire.begin(), wire.end()), "re-sealed piece differs");
  return 0;
}
