// Checkpoint: opens model.safetensors, or the shards named by
// model.safetensors.index.json. Shard names come from a file we did not write,
// so they must be plain file names inside the checkpoint directory. Immutable
// after open.
#include "io/checkpoint.h"

#include <nlohmann/json.hpp>
#include <utility>

#include "core/text_file.h"

namespace tessera {

namespace {

using json = nlohmann::json;

bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

}  // namespace

Result<Checkpoint> Checkpoint::open(const std::string& dir) {
  Checkpoint checkpoint;
  checkpoint.dir_ = dir;
  if (is_gguf_file(dir)) {
    TS_ASSIGN_OR_RETURN(checkpoint.gguf_, GgufWeights::open(dir));
    return checkpoint;
  }

  Result<SafetensorsFile> single = SafetensorsFile::open(dir + "/model.safetensors");
  if (single.ok()) {
    const auto& file = checkpoint.files_.emplace_back(std::make_unique<SafetensorsFile>(std::move(single).value()));
    for (const auto& t : file->header().tensors) checkpoint.where_.emplace(t.name, file.get());
    return checkpoint;
  }
  if (single.status().kind() != ErrorKind::kNotFound) return single.status();

  const std::string index_path = dir + "/model.safetensors.index.json";
  Result<MappedFile> index_file = MappedFile::open(index_path);
  if (!index_file.ok()) {
    if (index_file.status().kind() != ErrorKind::kNotFound) return index_file.status();
    return Status::not_found(dir + ": no model.safetensors or model.safetensors.index.json");
  }
  const std::span<const uint8_t> index_bytes = index_file->bytes();
  TS_ASSIGN_OR_RETURN(
      const json index,
      parse_json(std::string_view(reinterpret_cast<const char*>(index_bytes.data()), index_bytes.size()), index_path));
  const auto index_error = [&](const std::string& what) { return Status::invalid_input(index_path + ": " + what); };
  if (!index.is_object()) return index_error("not a JSON object");
  const auto weight_map = index.find("weight_map");
  if (weight_map == index.end() || !weight_map->is_object()) return index_error("'weight_map' is not a JSON object");

  // Each distinct shard is opened once; then every listed tensor must be in its shard.
  std::map<std::string, const SafetensorsFile*> shards;
  for (const auto& [tensor, shard_value] : weight_map->items()) {
    if (!shard_value.is_string()) return index_error("weight_map entry for '" + tensor + "' is not a string");
    const std::string& shard = shard_value.get_ref<const std::string&>();
    if (!is_plain_file_name(shard)) {
      return index_error("weight_map entry for '" + tensor + "' names shard '" + shard +
                         "', which is not a plain file name in the checkpoint directory");
    }
    auto it = shards.find(shard);
    if (it == shards.end()) {
      Result<SafetensorsFile> file = SafetensorsFile::open(dir + "/" + shard);
      if (!file.ok()) return file.status().with_context(index_path);
      checkpoint.files_.push_back(std::make_unique<SafetensorsFile>(std::move(file).value()));
      it = shards.emplace(shard, checkpoint.files_.back().get()).first;
    }
    if (it->second->find(tensor) == nullptr) {
      return index_error("weight_map puts tensor '" + tensor + "' in " + it->second->path() + ", which lacks it");
    }
  }
  for (const auto& file : checkpoint.files_) {
    for (const auto& t : file->header().tensors) {
      const auto [it, inserted] = checkpoint.where_.emplace(t.name, file.get());
      if (!inserted) {
        return index_error("tensor '" + t.name + "' appears in both " + it->second->path() + " and " + file->path());
      }
    }
  }
  return checkpoint;
}

bool Checkpoint::has(const std::string& name) const { return gguf_ ? gguf_->has(name) : where_.count(name) != 0; }

Result<TensorView> Checkpoint::get(const std::string& name) const {
  if (gguf_) return gguf_->get(name);
  const auto it = where_.find(name);
  if (it == where_.end()) return Status::not_found("tensor '" + name + "' is not in checkpoint " + dir_);
  return it->second->view(*it->second->find(name));
}

std::string Checkpoint::file_of(const std::string& name) const {
  if (gguf_) return gguf_->has(name) ? dir_ : std::string();
  const auto it = where_.find(name);
  return it == where_.end() ? std::string() : it->second->path();
}

std::vector<std::string> Checkpoint::names() const {
  if (gguf_) return gguf_->names();
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& [name, file] : where_) out.push_back(name);
  return out;
}

}  // namespace tessera
