// Writes the seed corpora of the seal fuzz targets with the project's own
// sealers: pieces that open under seal_piece_fuzz's expectations (selector
// bytes first) and hellos, each small (< 4 KiB).
//   make_seal_corpus DIR   (DIR is fuzz/corpus; one subfolder per target)
// A plain program (no gtest); built by fuzz/CMakeLists.txt. Deterministic, so
// rerunning it rewrites the same files.
#include <cstdio>
#include <string>
#include <vector>

#include "core/check.h"
#include "corpus_writer.h"
#include "seal_fuzz_fixture.h"
#include "wire/byte_io.h"

namespace {

using namespace tessera;
using namespace tessera::seal;

// Selector v, then the piece the receiver expects for v, sealed with the fixed key.
std::vector<uint8_t> piece_seed(uint16_t v) {
  const PieceContext ctx = fuzz::expected_context(v);
  std::vector<uint8_t> plain(fuzz::expected_payload_bytes(ctx));
  for (size_t i = 0; i < plain.size(); ++i) plain[i] = static_cast<uint8_t>(i * 37 + 11);
  std::vector<uint8_t> out;
  wire::put_u16(out, v);
  const size_t header = out.size();
  out.resize(header + piece_wire_bytes(plain.size(), true));
  Sealer sealer(fuzz::fuzz_key());
  const Status status = sealer.seal(ctx, plain, std::span(out).subspan(header));
  TS_CHECK(status.ok(), status.to_string());
  return out;
}

std::vector<uint8_t> hello_seed(const Hello& hello) {
  const std::array<uint8_t, kHelloBytes> bytes = seal_hello(fuzz::fuzz_secret(), hello);
  return {bytes.begin(), bytes.end()};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s fuzz/corpus\n", argv[0]);
    return 2;
  }
  const fuzzing::CorpusWriter corpus(argv[1]);

  corpus.write("seal_piece_fuzz", "empty_message", piece_seed(0));
  corpus.write("seal_piece_fuzz", "one_byte", piece_seed(1));
  corpus.write("seal_piece_fuzz", "one_full_piece", piece_seed(512));
  corpus.write("seal_piece_fuzz", "last_of_three", piece_seed(static_cast<uint16_t>((2u << 11) | 1100)));  // 76 bytes
  corpus.write("seal_piece_fuzz", "middle_of_four", piece_seed(static_cast<uint16_t>((1u << 11) | 2047)));

  Hello hello = fuzz::expected_hello();
  corpus.write("seal_hello_fuzz", "sealed", hello_seed(hello));
  hello.plain = true;
  corpus.write("seal_hello_fuzz", "plain_mode", hello_seed(hello));
  hello = fuzz::expected_hello();
  hello.generation = 6;
  corpus.write("seal_hello_fuzz", "older_generation", hello_seed(hello));
  hello = fuzz::expected_hello();
  hello.sender = 5;
  hello.receiver = 2;
  corpus.write("seal_hello_fuzz", "other_direction", hello_seed(hello));
  return 0;
}
