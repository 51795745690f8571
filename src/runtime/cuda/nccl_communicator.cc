#include "runtime/cuda/nccl_communicator.h"

#include <fmt/format.h>

#include "core/error.h"

#ifdef ORCHID_HAVE_NCCL
#include <nccl.h>
#endif

namespace orchid::runtime::cuda {

#ifdef ORCHID_HAVE_NCCL
namespace {

void nccl_check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) fail("NCCL {}: {} ({})", what, ncclGetErrorString(r), ncclGetLastError(nullptr));
}

class NcclRank final : public DeviceCommunicator {
 public:
  explicit NcclRank(ncclComm_t comm) : comm_(comm) {
    nccl_check(ncclCommUserRank(comm_, &rank_), "rank");
    nccl_check(ncclCommCount(comm_, &size_), "size");
  }
  ~NcclRank() override {
    if (comm_) ncclCommDestroy(comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool capturable() const override { return true; }
  void abort() override {
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  void all_reduce_sum(float* data, size_t count, cudaStream_t stream) override {
    if (count == 0) return;
    ORCHID_CHECK(comm_ != nullptr, "NCCL communicator aborted");
    nccl_check(ncclAllReduce(data, data, count, ncclFloat32, ncclSum, comm_, stream), "all-reduce");
  }
  void all_gather(const void* send, size_t bytes, void* recv, cudaStream_t stream) override {
    if (bytes == 0) return;
    ORCHID_CHECK(comm_ != nullptr, "NCCL communicator aborted");
    nccl_check(ncclAllGather(send, recv, bytes, ncclUint8, comm_, stream), "all-gather");
  }
  ncclComm_t comm() const { return comm_; }

 private:
  ncclComm_t comm_ = nullptr;
  int rank_ = 0, size_ = 1;
};

}  // namespace

bool nccl_available() {
  return true;
}

std::string nccl_version() {
  int v = 0;
  ncclGetVersion(&v);
  return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100);
}

std::vector<std::unique_ptr<DeviceCommunicator>> make_nccl_group(const std::vector<int>& devices) {
  std::vector<ncclComm_t> comms(devices.size());
  nccl_check(ncclCommInitAll(comms.data(), int(devices.size()), devices.data()), "init");
  std::vector<std::unique_ptr<DeviceCommunicator>> out;
  for (ncclComm_t c : comms) out.push_back(std::make_unique<NcclRank>(c));
  return out;
}

std::unique_ptr<DeviceCommunicator> make_nccl_rank(Communicator& bootstrap) {
  ncclUniqueId id{};
  if (bootstrap.rank() == 0) nccl_check(ncclGetUniqueId(&id), "unique id");
  bootstrap.broadcast(&id, sizeof(id), 0);
  ncclComm_t comm = nullptr;
  nccl_check(ncclCommInitRank(&comm, bootstrap.size(), id, bootstrap.rank()), "init rank");
  return std::make_unique<NcclRank>(comm);
}

std::vector<std::unique_ptr<DeviceCommunicator>> split_nccl(const std::vector<DeviceCommunicator*>& parents,
                                                            const std::vector<int>& colors) {
  ORCHID_CHECK(parents.size() == colors.size(), "split_nccl: one color per rank");
  std::vector<ncclComm_t> subs(parents.size(), nullptr);
  nccl_check(ncclGroupStart(), "group start");
  for (size_t i = 0; i < parents.size(); ++i) {
    auto* p = dynamic_cast<NcclRank*>(parents[i]);
    ORCHID_CHECK(p != nullptr, "split_nccl: the parent is not an NCCL communicator");
    nccl_check(ncclCommSplit(p->comm(), colors[i], p->rank(), &subs[i], nullptr), "split");
  }
  nccl_check(ncclGroupEnd(), "group end");
  std::vector<std::unique_ptr<DeviceCommunicator>> out;
  for (ncclComm_t c : subs) out.push_back(std::make_unique<NcclRank>(c));
  return out;
}

#else  // built without NCCL

bool nccl_available() {
  return false;
}
std::string nccl_version() {
  return "none";
}
std::vector<std::unique_ptr<DeviceCommunicator>> make_nccl_group(const std::vector<int>&) {
  fail("this orchid was built without NCCL: several GPUs need it (install NCCL and rebuild)");
}
std::unique_ptr<DeviceCommunicator> make_nccl_rank(Communicator&) {
  fail("this orchid was built without NCCL: several GPUs need it (install NCCL and rebuild)");
}
std::vector<std::unique_ptr<DeviceCommunicator>> split_nccl(const std::vector<DeviceCommunicator*>&,
                                                            const std::vector<int>&) {
  fail("this orchid was built without NCCL");
}

#endif

}  // namespace orchid::runtime::cuda
