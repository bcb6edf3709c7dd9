// `tessera quantize`: writes a GGUF file whose weights are quantized as llama.cpp's
// llama-quantize quantizes them (io/quantize.h: the same blocks, byte for byte, and
// the same per-tensor types for each scheme), so that llama.cpp and tessera load it.
//   tessera quantize --model FILE.gguf --type q4_k_m --out FILE-Q4_K_M.gguf
//   tessera quantize --model HF_DIR --type q8_0 --out FILE.gguf
// --model is a GGUF of f32, f16 or bf16 weights (as llama.cpp's converter writes
// one: its metadata is kept, general.file_type and general.quantization_version
// are set, as llama-quantize does), or a Hugging Face checkpoint directory (see
// io/gguf_from_checkpoint.h). Rows are quantized on --threads threads; the file
// is the same at any thread count.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <vector>

#include "cli/commands.h"
#include "core/thread_pool.h"
#include "io/gguf.h"
#include "io/gguf_quant.h"
#include "io/gguf_writer.h"
#include "io/quantize.h"

namespace tessera {

namespace {

struct QuantizeOptions {
  std::string model;
  std::string type;
  std::string out;
  size_t threads = 0;
};

// The f32 values of a tensor's rows [begin, end) (rows of `row` elements).
void widen_rows(const GgufFile& file, const GgufTensorInfo& t, uint64_t row, uint64_t begin, uint64_t end,
                std::vector<float>& out) {
  const uint64_t row_bytes = row / ggml_block_size(t.type) * ggml_type_size(t.type);
  out.resize((end - begin) * row);
  dequantize_gguf(t.type, file.bytes(t).subspan(begin * row_bytes, (end - begin) * row_bytes), out);
}

Status quantize_gguf(const QuantizeOptions& o, QuantScheme scheme, ThreadPool& pool) {
  TS_ASSIGN_OR_RETURN(const GgufFile in, GgufFile::open(o.model));
  const GgufMetadata& m = in.metadata();
  TS_ASSIGN_OR_RETURN(const std::string_view arch, m.get_string("general.architecture"));
  auto layers = m.get_uint(std::string(arch) + ".block_count");
  if (!layers.ok()) return layers.status().with_context(o.model);
  const bool tied = in.find("output.weight") == nullptr;

  GgufWriter writer;
  for (const GgufKeyValue& kv : m.entries()) writer.copy(kv.key, kv.value);
  writer.set_u32("general.quantization_version", 2);  // ggml's GGML_QNT_VERSION
  writer.set_u32("general.file_type", quant_scheme_file_type(scheme));
  for (const char* key : {"split.no", "split.count", "split.tensors.count"}) writer.remove(key);

  // llama-quantize writes the tensors by layer (the others first), then by name
  // (llama_model_loader's weight_name_comparer); so do we, so that the files are the same.
  std::vector<const GgufTensorInfo*> order;
  for (const GgufTensorInfo& t : in.header().tensors) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(), [](const GgufTensorInfo* a, const GgufTensorInfo* b) {
    const int64_t la = gguf_layer_of(a->name), lb = gguf_layer_of(b->name);
    return la != lb ? la < lb : a->name < b->name;
  });
  std::vector<std::optional<DType>> targets;
  for (const GgufTensorInfo* tp : order) {
    const GgufTensorInfo& t = *tp;
    const QuantTensor q{t.name, static_cast<int64_t>(t.dims.size()), static_cast<int64_t>(t.dims[0])};
    auto target = quant_type_for(scheme, q, static_cast<int64_t>(*layers), tied);
    if (!target.ok()) return target.status().with_context(o.model);
    if (*target && ggml_block_size(t.type) != 1)
      return Status::invalid_input(o.model + ": tensor '" + std::string(t.name) + "' is already " +
                                   std::string(ggml_type_name(t.type)) +
                                   "; quantize a GGUF of f32, f16 or bf16 weights");
    targets.push_back(*target);
    const GgmlType type = *target ? *ggml_type_of(**target) : t.type;
    TS_RETURN_IF_ERROR(writer.add_tensor(t.name, t.dims, type));
  }
  TS_RETURN_IF_ERROR(writer.open(o.out));

  std::map<std::string, int> counts;
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i < order.size(); ++i) {
    const GgufTensorInfo& t = *order[i];
    if (!targets[i]) {
      TS_RETURN_IF_ERROR(writer.write_tensor(in.bytes(t)));
      ++counts[std::string(ggml_type_name(t.type))];
      continue;
    }
    const DType type = *targets[i];
    uint64_t elements = 1;
    for (const uint64_t d : t.dims) elements *= d;
    const uint64_t row = t.dims[0], rows = elements / row;
    const size_t out_row = dtype_bytes(type, static_cast<int64_t>(row));
    bytes.resize(writer.tensor_bytes(i));
    pool.parallel_for(rows, 1, [&](size_t begin, size_t end) {
      std::vector<float> values;
      for (size_t r = begin; r < end; r += 64) {
        const size_t stop = std::min(end, r + 64);
        widen_rows(in, t, row, r, stop, values);
        quantize_blocks(type, values, {bytes.data() + r * out_row, (stop - r) * out_row});
      }
    });
    TS_RETURN_IF_ERROR(writer.write_tensor(bytes));
    ++counts[std::string(dtype_name(type))];
  }
  TS_RETURN_IF_ERROR(writer.finish());
  std::string summary;
  for (const auto& [type, count] : counts) summary += " " + type + ": " + std::to_string(count);
  std::fprintf(stderr, "[quantize] wrote %s (%s; %zu tensors,%s)\n", o.out.c_str(),
               std::string(quant_scheme_name(scheme)).c_str(), in.header().tensors.size(), summary.c_str());
  return {};
}

Status run_quantize(const QuantizeOptions& o) {
  TS_ASSIGN_OR_RETURN(const QuantScheme scheme, parse_quant_scheme(o.type));
  ThreadPool pool(o.threads);
  return quantize_gguf(o, scheme, pool);
}

}  // namespace

void register_quantize(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<QuantizeOptions>();
  CLI::App* cmd = app.add_subcommand("quantize", "Write a GGUF quantized as llama.cpp's llama-quantize does");
  cmd->add_option("--model", o->model, "GGUF file of f32, f16 or bf16 weights, or a checkpoint directory")->required();
  cmd->add_option("--type", o->type, "q8_0, q4_0, q4_k_m, q5_k_m or q6_k")->required();
  cmd->add_option("--out", o->out, "GGUF file to write")->required();
  cmd->add_option("--threads", o->threads, "Threads (default: all cores)");
  cmd->callback([o, &exit_code] {
    const Status status = run_quantize(*o);
    exit_code = status.ok() ? 0 : report_error(status);
  });
}

}  // namespace tessera
