#include "io/checkpoint.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.h"

namespace orchid::io {

namespace fs = std::filesystem;
using nlohmann::json;

void Checkpoint::add(TensorView view, std::shared_ptr<const void> owner) {
  if (owner) owners_.push_back(std::move(owner));
  std::string name = view.name;
  tensors_[name] = std::move(view);
}

const TensorView& Checkpoint::get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) fail("missing tensor '{}' in {}", name, where_);
  return it->second;
}

Checkpoint Checkpoint::open_dir(const std::string& dir) {
  if (!fs::is_directory(dir)) fail("model directory '{}' does not exist", dir);
  Checkpoint ck;
  ck.where_ = dir;
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  std::vector<std::string> shard_names;
  std::map<std::string, std::string> weight_map;  // tensor -> shard, when indexed
  if (fs::exists(index_path)) {
    std::ifstream f(index_path);
    json j;
    try {
      j = json::parse(f);
    } catch (const json::exception& e) {
      fail("{}: invalid JSON: {}", index_path.string(), e.what());
    }
    auto wm = j.find("weight_map");
    if (!j.is_object() || wm == j.end() || !wm->is_object())
      fail("{}: missing object 'weight_map'", index_path.string());
    std::set<std::string> shards;
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it->is_string()) fail("{}: weight_map['{}'] must be a file name", index_path.string(), it.key());
      std::string shard = it->get<std::string>();
      if (shard.find('/') != std::string::npos || shard == ".." || shard.empty())
        fail("{}: weight_map['{}'] = '{}' is not a plain file name", index_path.string(), it.key(), shard);
      weight_map[it.key()] = shard;
      shards.insert(shard);
    }
    shard_names.assign(shards.begin(), shards.end());
  } else {
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file() && e.path().extension() == ".safetensors")
        shard_names.push_back(e.path().filename());
    std::sort(shard_names.begin(), shard_names.end());
    if (shard_names.empty()) fail("model directory '{}' has no .safetensors files", dir);
  }
  for (const auto& shard : shard_names) {
    const std::string path = (fs::path(dir) / shard).string();
    if (!fs::exists(path))
      fail("{}: shard '{}' listed in the index does not exist", index_path.string(), shard);
    auto file = SafetensorsFile::open(path);
    for (const auto& e : file->header().tensors) {
      if (!weight_map.empty()) {
        auto w = weight_map.find(e.name);
        if (w == weight_map.end() || w->second != shard) continue;  // not this shard's per the index
      }
      if (ck.tensors_.count(e.name))
        fail("tensor '{}' appears in both '{}' and '{}'", e.name, ck.tensors_[e.name].source, path);
      ck.tensors_[e.name] = file->view(e);
    }
    ck.files_.push_back(std::move(file));
  }
  for (const auto& [name, shard] : weight_map)
    if (!ck.tensors_.count(name))
      fail("{}: tensor '{}' is listed in '{}' but that file does not contain it", index_path.string(), name,
           shard);
  return ck;
}

}  // namespace orchid::io
