#include "model/digest.h"

#include <openssl/evp.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <memory>

#include "core/check.h"

namespace tessera {

std::string weights_digest(const Model& model) {
  constexpr size_t kSample = size_t{64} << 10;
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  TS_CHECK(ctx && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1, "SHA-256 init");
  auto add = [&](const void* data, size_t bytes) {
    TS_CHECK(EVP_DigestUpdate(ctx.get(), data, bytes) == 1, "SHA-256 update");
  };
  auto add_text = [&](const std::string& text) { add(text.data(), text.size() + 1); };  // with its terminator
  add_text(model.config().fields().dump());
  for (const auto& [name, tensor] : named_weights(model)) {
    add_text(name + " " + std::string(dtype_name(tensor.dtype)) + " " + shape_string(tensor.shape));
    const auto* bytes = static_cast<const uint8_t*>(tensor.data);
    const size_t size = tensor.nbytes();
    add(bytes, std::min(size, kSample));
    if (size > kSample) add(bytes + size - std::min(size - kSample, kSample), std::min(size - kSample, kSample));
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  TS_CHECK(EVP_DigestFinal_ex(ctx.get(), digest, &length) == 1, "SHA-256 final");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) {
    hex += kHex[digest[i] >> 4];
    hex += kHex[digest[i] & 15];
  }
  return hex;
}

}  // namespace tessera
