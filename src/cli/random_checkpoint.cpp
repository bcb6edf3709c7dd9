// `tessera random-checkpoint`: writes a Hugging Face checkpoint directory
// (config.json + model.safetensors) of seeded random weights in a real shape, so
// that loading, memory mapping and multi-host runs of large shapes can be tried
// without downloading weights.
//   tessera random-checkpoint --config bench/shapes/llama-3.2-1b.json --seed 1 --out /tmp/llama-1b
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "cli/commands.h"
#include "io/safetensors.h"
#include "model/model.h"

namespace tessera {

namespace {

struct RandomCheckpointOptions {
  std::string config_path;
  uint64_t seed = 1;
  std::string dtype = "bf16";
  std::string out_dir;
};

Status write_random_checkpoint(const RandomCheckpointOptions& o) {
  TS_ASSIGN_OR_RETURN(const ModelConfig config, load_model_config_file(o.config_path, check_model_type));
  TS_ASSIGN_OR_RETURN(const DType dtype, parse_weight_dtype(o.dtype));
  TS_ASSIGN_OR_RETURN(const Model model, Model::random(config, dtype, o.seed));
  std::error_code error;
  std::filesystem::create_directories(o.out_dir, error);
  if (error) return Status::invalid_input(o.out_dir + ": cannot create: " + error.message());
  std::filesystem::copy_file(o.config_path, o.out_dir + "/config.json",
                             std::filesystem::copy_options::overwrite_existing, error);
  if (error) return Status::invalid_input(o.out_dir + "/config.json: cannot write: " + error.message());

  std::vector<NamedTensor> tensors;
  for (const auto& [name, view] : named_weights(model))
    tensors.push_back({name, view.dtype, view.shape, {static_cast<const uint8_t*>(view.data), view.nbytes()}});
  const std::vector<uint8_t> bytes = encode_safetensors(tensors, {{"format", "pt"}});
  const std::string path = o.out_dir + "/model.safetensors";
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) return Status::invalid_input(path + ": write failed: " + std::strerror(errno));
  return {};
}

}  // namespace

void register_random_checkpoint(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<RandomCheckpointOptions>();
  CLI::App* cmd = app.add_subcommand("random-checkpoint", "Write a checkpoint of seeded random weights in a shape");
  cmd->add_option("--config", o->config_path, "config.json of the shape")->required();
  cmd->add_option("--seed", o->seed, "Seed of the weights");
  cmd->add_option("--dtype", o->dtype, "f32, bf16 or f16");
  cmd->add_option("--out", o->out_dir, "Directory to write")->required();
  cmd->callback([o, &exit_code] {
    const Status status = write_random_checkpoint(*o);
    exit_code = status.ok() ? 0 : report_error(status);
  });
}

}  // namespace tessera
