// The torch.distributed backend "cc": a c10d::ProcessGroup over cc's C API.
//
// Collectives run in call order on one lane (lane.h) over the group's communicator, made
// through the store torch hands over. Point-to-point messages run on lanes of their own,
// one per (peer, tag, direction), each over a two-rank communicator made when that
// peer is first addressed: a send blocks only its own lane, so isend and irecv posted in
// any order complete, as they do with Gloo.
#pragma once

#include <cc/cc.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <tuple>
#include <vector>

#include "lane.h"

namespace cc::torch_backend {

class ProcessGroupCC : public c10d::ProcessGroup {
 public:
  ProcessGroupCC(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                 std::chrono::milliseconds timeout);
  ~ProcessGroupCC() override;

  const std::string getBackendName() const override { return "cc"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplits,
                                               std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return sequence_; }

 private:
  // The two-rank communicator and lane that carry messages from `src` to `dst` with `tag`.
  struct PeerLane {
    std::shared_ptr<Lane> lane;
    ccComm_t comm = nullptr;  // made by the lane's first operation
    std::string failure;      // why making it failed
  };
  using PeerKey = std::tuple<int, int, int>;  // src, dst, tag

  c10::intrusive_ptr<c10d::Work> collective(c10d::OpType type, std::vector<at::Tensor> outputs,
                                            Lane::Task task);
  std::shared_ptr<PeerLane> peerLane(int src, int dst, int tag);
  c10::intrusive_ptr<c10d::Work> pointToPoint(bool isSend, std::vector<at::Tensor>& tensors,
                                              int peer, int tag);
  ccComm_t connectPair(int src, int dst, int tag);
  // Rank 0 publishes a unique id under `key` in the store; every rank joins with it.
  ccComm_t joinCommunicator(const std::string& key, int nranks, int rank, const std::string& what);
  void shutdown();

  c10::intrusive_ptr<c10d::Store> store_;
  std::chrono::milliseconds timeout_;
  ccComm_t comm_ = nullptr;
  std::shared_ptr<Lane> lane_;
  std::atomic<uint64_t> sequence_{0};
  std::mutex peersMutex_;
  std::map<PeerKey, std::shared_ptr<PeerLane>> peers_;
};

}  // namespace cc::torch_backend
