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
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "cli/commands.h"
#include "core/thread_pool.h"
#include "io/gguf.h"
#include "io/gguf_from_checkpoint.h"
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

// What quantize reads: a GGUF file or a checkpoint directory, as tensors in
// llama.cpp's names with their rows as f32.
struct QuantizeSource {
  struct Tensor {
    std::string name;
    std::vector<uint64_t> dims;
    GgmlType type = GgmlType::kF32;  // as stored (kept as it is when not quantized)
  };
  std::vector<Tensor> tensors;
  int64_t layers = 0;
  std::function<void(GgufWriter&)> write_metadata;
  // The f32 values of rows [begin, end) of tensors[i] (rows of dims[0] elements).
  std::function<void(size_t i, uint64_t begin, uint64_t end, std::vector<float>& out)> rows;
  // The bytes of tensors[i] as it is kept.
  std::function<std::span<const uint8_t>(size_t i)> kept;
};

Result<QuantizeSource> gguf_source(const std::string& path, std::shared_ptr<const GgufFile>& keep) {
  TS_ASSIGN_OR_RETURN(GgufFile in, GgufFile::open(path));
  auto file = std::make_shared<const GgufFile>(std::move(in));
  keep = file;
  const GgufMetadata& m = file->metadata();
  TS_ASSIGN_OR_RETURN(const std::string_view arch, m.get_string("general.architecture"));
  auto layers = m.get_uint(std::string(arch) + ".block_count");
  if (!layers.ok()) return layers.status().with_context(path);
  QuantizeSource s;
  s.layers = static_cast<int64_t>(*layers);
  for (const GgufTensorInfo& t : file->header().tensors) s.tensors.push_back({std::string(t.name), t.dims, t.type});
  const GgufFile* f = file.get();
  s.write_metadata = [f](GgufWriter& w) {
    for (const GgufKeyValue& kv : f->metadata().entries()) w.copy(kv.key, kv.value);
  };
  s.rows = [f](size_t i, uint64_t begin, uint64_t end, std::vector<float>& out) {
    const GgufTensorInfo& t = f->header().tensors[i];
    const uint64_t row = t.dims[0];
    const uint64_t row_bytes = row / ggml_block_size(t.type) * ggml_type_size(t.type);
    out.resize((end - begin) * row);
    dequantize_gguf(t.type, f->bytes(t).subspan(begin * row_bytes, (end - begin) * row_bytes), out);
  };
  s.kept = [f](size_t i) { return f->bytes(f->header().tensors[i]); };
  return s;
}

// A checkpoint as the converter lays it out; kept tensors (1-D: norms, biases,
// rope factors) are F32, as the converter stores them.
Result<QuantizeSource> checkpoint_source(const std::string& dir, std::shared_ptr<const CheckpointAsGguf>& keep,
                                         std::vector<std::vector<float>>& kept_values) {
  TS_ASSIGN_OR_RETURN(CheckpointAsGguf in, CheckpointAsGguf::open(dir));
  auto c = std::make_shared<const CheckpointAsGguf>(std::move(in));
  keep = c;
  QuantizeSource s;
  s.layers = c->block_count();
  for (const auto& t : c->tensors()) s.tensors.push_back({t.name, t.dims, GgmlType::kF32});
  const CheckpointAsGguf* cp = c.get();
  s.write_metadata = [cp](GgufWriter& w) { cp->write_metadata(w); };
  s.rows = [cp](size_t i, uint64_t begin, uint64_t end, std::vector<float>& out) { cp->rows(i, begin, end, out); };
  kept_values.resize(s.tensors.size());
  s.kept = [cp, &kept_values](size_t i) {
    const auto& t = cp->tensors()[i];
    uint64_t elements = 1;
    for (const uint64_t d : t.dims) elements *= d;
    cp->rows(i, 0, elements / t.dims[0], kept_values[i]);
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(kept_values[i].data()),
                                    kept_values[i].size() * sizeof(float));
  };
  return s;
}

Status quantize(const QuantizeOptions& o, QuantScheme scheme, const QuantizeSource& in, ThreadPool& pool) {
  bool tied = true;
  for (const auto& t : in.tensors) tied = tied && t.name != "output.weight";

  GgufWriter writer;
  in.write_metadata(writer);
  writer.set_u32("general.quantization_version", 2);  // ggml's GGML_QNT_VERSION
  writer.set_u32("general.file_type", quant_scheme_file_type(scheme));
  for (const char* key : {"split.no", "split.count", "split.tensors.count"}) writer.remove(key);

  // llama-quantize writes the tensors by layer (the others first), then by name
  // (llama_model_loader's weight_name_comparer); so do we, so that the files are the same.
  std::vector<size_t> order;
  for (size_t i = 0; i < in.tensors.size(); ++i) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const std::string& na = in.tensors[a].name;
    const std::string& nb = in.tensors[b].name;
    const int64_t la = gguf_layer_of(na), lb = gguf_layer_of(nb);
    return la != lb ? la < lb : na < nb;
  });
  std::vector<std::optional<DType>> targets;
  for (const size_t i : order) {
    const QuantizeSource::Tensor& t = in.tensors[i];
    const QuantTensor q{t.name, static_cast<int64_t>(t.dims.size()), static_cast<int64_t>(t.dims[0])};
    auto target = quant_type_for(scheme, q, in.layers, tied);
    if (!target.ok()) return target.status().with_context(o.model);
    if (*target && ggml_block_size(t.type) != 1)
      return Status::invalid_input(o.model + ": tensor '" + t.name + "' is already " +
                                   std::string(ggml_type_name(t.type)) +
                                   "; quantize a GGUF of f32, f16 or bf16 weights");
    targets.push_back(*target);
    const GgmlType type = *target ? *ggml_type_of(**target) : t.type;
    TS_RETURN_IF_ERROR(writer.add_tensor(t.name, t.dims, type));
  }
  TS_RETURN_IF_ERROR(writer.open(o.out));

  std::map<std::string, int> counts;
  std::vector<uint8_t> bytes;
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t i = order[k];
    const QuantizeSource::Tensor& t = in.tensors[i];
    if (!targets[k]) {
      TS_RETURN_IF_ERROR(writer.write_tensor(in.kept(i)));
      ++counts[std::string(ggml_type_name(t.type))];
      continue;
    }
    const DType type = *targets[k];
    uint64_t elements = 1;
    for (const uint64_t d : t.dims) elements *= d;
    const uint64_t row = t.dims[0], rows = elements / row;
    const size_t out_row = dtype_bytes(type, static_cast<int64_t>(row));
    bytes.resize(writer.tensor_bytes(k));
    pool.parallel_for(rows, 1, [&](size_t begin, size_t end) {
      std::vector<float> values;
      for (size_t r = begin; r < end; r += 64) {
        const size_t stop = std::min(end, r + 64);
        in.rows(i, r, stop, values);
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
               std::string(quant_scheme_name(scheme)).c_str(), in.tensors.size(), summary.c_str());
  return {};
}

Status run_quantize(const QuantizeOptions& o) {
  TS_ASSIGN_OR_RETURN(const QuantScheme scheme, parse_quant_scheme(o.type));
  ThreadPool pool(o.threads);
  std::shared_ptr<const GgufFile> gguf;
  std::shared_ptr<const CheckpointAsGguf> checkpoint;
  std::vector<std::vector<float>> kept_values;
  const bool dir = std::filesystem::is_directory(o.model);
  Result<QuantizeSource> source =
      dir ? checkpoint_source(o.model, checkpoint, kept_values) : gguf_source(o.model, gguf);
  if (!source.ok()) return source.status();
  return quantize(o, scheme, *source, pool);
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
