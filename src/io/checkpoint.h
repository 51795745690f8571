// A set of named tensors: a Hugging Face model directory (one or more .safetensors files, resolved through
// model.safetensors.index.json when present) or tensors held in memory (synthetic weights).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "io/tensor_view.h"

namespace orchid::io {

class Checkpoint {
 public:
  // Maps every shard and validates every header; reads no tensor data. Errors name the file and tensor.
  static Checkpoint open_dir(const std::string& dir);

  // In-memory tensors; `owner` keeps their bytes alive.
  void add(TensorView view, std::shared_ptr<const void> owner = nullptr);

  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  // Throws orchid::Error "missing tensor 'x' in <where>" when absent.
  const TensorView& get(const std::string& name) const;
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::string& where() const { return where_; }
  void set_where(std::string w) { where_ = std::move(w); }

 private:
  std::map<std::string, TensorView> tensors_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::vector<std::shared_ptr<const void>> owners_;
  std::string where_;
};

}  // namespace orchid::io
