// Where the GGUF model fixtures lie (tests/fixtures/gguf/models: written by llama.cpp's
// gguf-py in make_model_ggufs.py, quantized by llama-quantize in
// make_quantized_ggufs.sh), for the GGUF model, CLI and quantize tests. Any thread.
#pragma once

#include <string>

namespace tessera::testing {

// The folder, ending in '/'.
inline std::string gguf_models_dir() { return std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/gguf/models/"; }

// The fixture `name`.gguf in it.
inline std::string gguf_model(const std::string& name) { return gguf_models_dir() + name + ".gguf"; }

}  // namespace tessera::testing
