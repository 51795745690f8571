// A kernel tracer for any CUDA program, loaded by the driver at CUDA initialisation:
//   ORCHID_TRACE_OUT=trace.csv CUDA_INJECTION64_PATH=liborchid_kernel_trace.so PROGRAM ARGS...
// It records every kernel's device start/end through CUPTI's activity API (kernels inside CUDA graphs
// included; the concurrent-kernel records do not serialize the GPU) and writes one CSV row per kernel when
// the program exits: start and end (ns), the launch's correlation id (all kernels of one graph launch
// share it), graph id, stream, grid and block, and the demangled name. tools/gpu/kernel_breakdown.py turns
// a trace into a per-step breakdown.
#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Row {
  uint64_t start, end;
  uint32_t correlation, graph, stream;
  int32_t grid[3], block[3];
  std::string name;
};

std::mutex g_mu;
std::vector<Row>* g_rows = nullptr;
constexpr size_t kBufferBytes = size_t(8) << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

std::string demangle(const char* name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : name;
  std::free(d);
  return s;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::vector<Row> rows;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL)
      continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    Row r{k->start,
          k->end,
          k->correlationId,
          k->graphId,
          k->streamId,
          {k->gridX, k->gridY, k->gridZ},
          {k->blockX, k->blockY, k->blockZ},
          demangle(k->name)};
    rows.push_back(std::move(r));
  }
  std::free(buffer);
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_rows) g_rows->insert(g_rows->end(), rows.begin(), rows.end());
}

void write_trace() {
  cuptiActivityFlushAll(1);
  const char* path = std::getenv("ORCHID_TRACE_OUT");
  std::FILE* f = std::fopen(path && *path ? path : "kernel_trace.csv", "w");
  if (!f) return;
  std::lock_guard<std::mutex> lock(g_mu);
  std::fprintf(f, "start_ns,end_ns,correlation,graph,stream,grid,block,name\n");
  for (const Row& r : *g_rows) {
    std::string name = r.name;
    for (char& c : name)
      if (c == '"') c = '\'';
    std::fprintf(f, "%llu,%llu,%u,%u,%u,%dx%dx%d,%dx%dx%d,\"%s\"\n", (unsigned long long)r.start,
                 (unsigned long long)r.end, r.correlation, r.graph, r.stream, r.grid[0], r.grid[1], r.grid[2],
                 r.block[0], r.block[1], r.block[2], name.c_str());
  }
  std::fclose(f);
  std::fprintf(stderr, "kernel_trace: %zu kernels -> %s\n", g_rows->size(), path ? path : "kernel_trace.csv");
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  g_rows = new std::vector<Row>();
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "kernel_trace: CUPTI activity tracing unavailable\n");
    return 0;
  }
  std::atexit(write_trace);
  return 1;
}
