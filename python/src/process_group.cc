#include "process_group.h"

#include <ATen/Functions.h>
#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace cc::torch_backend {
namespace {

// Raises what cc said: the result, and ccGetLastError's message (the peer, the operation).
void check(ccResult_t result, ccComm_t comm, const std::string& what) {
  if (result == ccSuccess) return;
  throw std::runtime_error("cc: " + what + " failed: " + ccGetErrorString(result) + ": " +
                           ccGetLastError(comm));
}

void checkTensor(const at::Tensor& tensor, const char* what) {
  TORCH_CHECK(tensor.defined(), "cc: ", what, ": a tensor is undefined");
  TORCH_CHECK(tensor.device().is_cpu(), "cc: ", what, ": the tensor is on ", tensor.device(),
              "; the cc backend takes CPU tensors (use nccl for CUDA tensors)");
  TORCH_CHECK(tensor.layout() == at::kStrided, "cc: ", what,
              ": sparse tensors are not supported (only dense, strided ones)");
}

const at::Tensor& single(const std::vector<at::Tensor>& tensors, const char* what) {
  TORCH_CHECK(tensors.size() == 1, "cc: ", what, " takes one tensor per call, not ",
              tensors.size());
  checkTensor(tensors[0], what);
  return tensors[0];
}

void checkSameShape(const at::Tensor& a, const at::Tensor& b, const char* what) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "cc: ", what, ": dtypes differ (",
              a.scalar_type(), " and ", b.scalar_type(), ")");
  TORCH_CHECK(a.numel() == b.numel(), "cc: ", what, ": element counts differ (", a.numel(), " and ",
              b.numel(), ")");
}

void checkRoot(int64_t root, int size, const char* what) {
  TORCH_CHECK(root >= 0 && root < size, "cc: ", what, ": root rank ", root,
              " is out of range for a group of ", size);
}

// How cc reduces a dtype: the element type, and how many cc elements one holds (2 for
// complex, reduced as pairs of reals).
struct Reduction {
  ccDataType_t type;
  ccRedOp_t op;
  size_t perElement = 1;
};

Reduction reduction(const at::Tensor& tensor, const c10d::ReduceOp& reduceOp, const char* what) {
  using Op = c10d::ReduceOp;
  const at::ScalarType scalar = tensor.scalar_type();
  Reduction result{ccFloat32, ccSum, 1};
  switch (reduceOp.op_) {
    case Op::SUM:
      result.op = ccSum;
      break;
    case Op::AVG:
      result.op = ccAvg;
      break;
    case Op::PRODUCT:
      result.op = ccProd;
      break;
    case Op::MIN:
      result.op = ccMin;
      break;
    case Op::MAX:
      result.op = ccMax;
      break;
    case Op::BAND:
    case Op::BOR:
    case Op::BXOR:
      TORCH_CHECK(false, "cc: ", what,
                  ": the bitwise reductions (BAND, BOR, BXOR) are not supported; cc reduces "
                  "with SUM, PRODUCT, MIN, MAX and AVG");
    default:
      TORCH_CHECK(false, "cc: ", what, ": ReduceOp ", static_cast<int>(reduceOp.op_),
                  " is not supported; cc reduces with SUM, PRODUCT, MIN, MAX and AVG");
  }
  switch (scalar) {
    case at::kFloat:
      result.type = ccFloat32;
      break;
    case at::kDouble:
      result.type = ccFloat64;
      break;
    case at::kHalf:
      result.type = ccFloat16;
      break;
    case at::kBFloat16:
      result.type = ccBfloat16;
      break;
    case at::kChar:
      result.type = ccInt8;
      break;
    case at::kByte:
      result.type = ccUint8;
      break;
    case at::kInt:
      result.type = ccInt32;
      break;
    case at::kLong:
      result.type = ccInt64;
      break;
    case at::kBool:
      // As NCCL's backend: a sum of booleans is their OR, a product their AND.
      TORCH_CHECK(result.op != ccAvg, "cc: ", what, ": AVG of bool tensors is not defined");
      result.type = ccUint8;
      if (result.op == ccSum) result.op = ccMax;
      if (result.op == ccProd) result.op = ccMin;
      break;
    case at::kComplexFloat:
    case at::kComplexDouble:
      TORCH_CHECK(result.op == ccSum || result.op == ccAvg, "cc: ", what,
                  ": complex tensors reduce with SUM or AVG only");
      result.type = scalar == at::kComplexFloat ? ccFloat32 : ccFloat64;
      result.perElement = 2;
      break;
    default:
      TORCH_CHECK(false, "cc: ", what, ": dtype ", scalar,
                  " cannot be reduced (float32, float64, float16, bfloat16, int8, uint8, int32, "
                  "int64, bool and complex can)");
  }
  return result;
}

// A contiguous tensor with `tensor`'s contents (itself when it already is one), and the
// copy back into `tensor` after an operation wrote into it.
at::Tensor dense(const at::Tensor& tensor) { return tensor.contiguous(); }
void writeBack(const at::Tensor& tensor, const at::Tensor& denseCopy) {
  if (!tensor.is_same(denseCopy)) tensor.copy_(denseCopy);
}

// Gather's outputs or scatter's inputs: on the root one list of a tensor per rank, each
// like `like`; elsewhere nothing (an empty list).
std::vector<at::Tensor> rootList(const std::vector<std::vector<at::Tensor>>& lists,
                                 const at::Tensor& like, bool isRoot, int size, const char* what,
                                 const char* kind) {
  if (!isRoot) {
    TORCH_CHECK(lists.empty() || (lists.size() == 1 && lists[0].empty()), "cc: ", what,
                ": only the root passes an ", kind, " list");
    return {};
  }
  TORCH_CHECK(lists.size() == 1, "cc: ", what, " takes one ", kind, " list on the root");
  TORCH_CHECK(static_cast<int>(lists[0].size()) == size, "cc: ", what, ": the root's ", kind,
              " list has ", lists[0].size(), " tensors for a group of ", size);
  for (const at::Tensor& tensor : lists[0]) {
    checkTensor(tensor, what);
    checkSameShape(tensor, like, what);
  }
  return lists[0];
}

// `input` contiguous and sharing no memory with `outputs` (cc's all-to-all does not run in
// place): itself when it already is, else a copy.
at::Tensor apartFrom(const at::Tensor& input, const std::vector<at::Tensor>& outputs) {
  const bool shared = std::any_of(outputs.begin(), outputs.end(), [&](const at::Tensor& output) {
    return output.is_alias_of(input);
  });
  return shared ? input.clone(at::MemoryFormat::Contiguous) : input.contiguous();
}

at::Tensor flatten(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> flat;
  flat.reserve(tensors.size());
  for (const at::Tensor& tensor : tensors) flat.push_back(tensor.reshape({-1}));
  return at::cat(flat);
}

// Reads the unique id another rank publishes under `key`. TCPStore serialises its calls
// (one lock per client), and a blocking get holds that lock while it waits: a lane
// waiting for its peer's id would keep this process's other lanes from publishing theirs,
// and two ranks connecting both ways would wait for each other until the store's timeout.
// So poll with check(), which returns at once, and take the id once it is there. Not
// every call of 1.13's TCPStore client takes its lock, and lanes of several groups share
// one client: every store call of cc_torch holds gStoreMutex.
std::mutex gStoreMutex;

bool storeHas(c10d::Store& store, const std::string& key) {
  std::lock_guard lock(gStoreMutex);
  return store.check({key});
}

void publishUniqueId(c10d::Store& store, const std::string& key, const ccUniqueId& id) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(&id);
  std::lock_guard lock(gStoreMutex);
  store.set(key, std::vector<uint8_t>(bytes, bytes + sizeof(id)));
}

ccUniqueId fetchUniqueId(c10d::Store& store, const std::string& key,
                         std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::microseconds(200);
  while (!storeHas(store, key)) {
    TORCH_CHECK(std::chrono::steady_clock::now() < deadline, "cc: no rank published ", key,
                " in the store within the group's timeout of ", timeout.count(), " ms");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(20000));
  }
  std::vector<uint8_t> bytes;
  {
    std::lock_guard lock(gStoreMutex);
    bytes = store.get(key);
  }
  ccUniqueId id;
  TORCH_CHECK(bytes.size() == sizeof(id), "cc: the store's unique id under ", key, " has ",
              bytes.size(), " bytes, not ", sizeof(id));
  std::memcpy(&id, bytes.data(), sizeof(id));
  return id;
}

// cc's settings for the group: every wait's deadline is the group's timeout.
ccConfig_t configFor(std::chrono::milliseconds timeout) {
  ccConfig_t config = CC_CONFIG_INITIALIZER;
  config.timeoutMs =
      static_cast<int>(std::min<int64_t>(std::max<int64_t>(timeout.count(), 1), INT_MAX));
  return config;
}

}  // namespace

ProcessGroupCC::ProcessGroupCC(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                               std::chrono::milliseconds timeout)
    : c10d::ProcessGroup(rank, size),
      store_(std::move(store)),
      timeout_(timeout),
      lane_(std::make_shared<Lane>()) {
  comm_ = joinCommunicator(
      "cc/unique_id", size, rank,
      "ccCommInitRankConfig(rank " + std::to_string(rank) + " of " + std::to_string(size) + ")");
}

ccComm_t ProcessGroupCC::joinCommunicator(const std::string& key, int nranks, int rank,
                                          const std::string& what) {
  const ccConfig_t config = configFor(timeout_);
  ccUniqueId id;
  if (rank == 0) {
    check(ccGetUniqueIdConfig(&id, &config), nullptr, "ccGetUniqueIdConfig");
    publishUniqueId(*store_, key, id);
  } else {
    id = fetchUniqueId(*store_, key, timeout_);
  }
  ccComm_t comm = nullptr;
  check(ccCommInitRankConfig(&comm, nranks, id, rank, &config), nullptr, what);
  return comm;
}

ProcessGroupCC::~ProcessGroupCC() {
  // Dropped from Python with the GIL held: the lanes' threads may need it to finish a
  // future's Python callback, so let go of it while they drain.
  if (Py_IsInitialized() != 0 && PyGILState_Check() != 0) {
    pybind11::gil_scoped_release release;
    shutdown();
  } else {
    shutdown();
  }
}

void ProcessGroupCC::shutdown() {
  // The lanes finish what is queued before their communicators go, even while a wait()
  // elsewhere still holds one of them.
  lane_->shutdown();
  std::map<PeerKey, std::shared_ptr<PeerLane>> peers;
  {
    std::lock_guard lock(peersMutex_);
    peers.swap(peers_);
  }
  for (auto& [key, peer] : peers) {
    peer->lane->shutdown();
    if (peer->comm != nullptr) ccCommDestroy(peer->comm);
  }
  if (comm_ != nullptr) {
    ccResult_t asyncError = ccSuccess;
    ccCommGetAsyncError(comm_, &asyncError);
    if (asyncError == ccSuccess) {
      ccCommDestroy(comm_);
    } else {
      ccCommAbort(comm_);
    }
    comm_ = nullptr;
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCC::collective(c10d::OpType type,
                                                          std::vector<at::Tensor> outputs,
                                                          Lane::Task task) {
  auto work = c10::make_intrusive<Work>(rank_, type, std::move(outputs), lane_);
  lane_->post(work, std::move(task));
  ++sequence_;
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCC::broadcast(std::vector<at::Tensor>& tensors,
                                                         const c10d::BroadcastOptions& opts) {
  const at::Tensor tensor = single(tensors, "broadcast");
  checkRoot(opts.rootRank, size_, "broadcast");
  const int root = static_cast<int>(opts.rootRank);
  return collective(c10d::OpType::BROADCAST, tensors, [this, tensor, root] {
    at::Tensor data = dense(tensor);
    check(
        ccBroadcast(data.data_ptr(), data.data_ptr(), data.nbytes(), ccUint8, root, comm_, nullptr),
        comm_, "broadcast");
    writeBack(tensor, data);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCC::allreduce(std::vector<at::Tensor>& tensors,
                                                         const c10d::AllreduceOptions& opts) {
  const at::Tensor tensor = single(tensors, "all_reduce");
  const Reduction how = reduction(tensor, opts.reduceOp, "all_reduce");
  return collective(c10d::OpType::ALLREDUCE, tensors, [this, tensor, how] {
    at::Tensor data = dense(tensor);
    check(ccAllReduce(data.data_ptr(), data.data_ptr(),
                      static_cast<size_t>(data.numel()) * how.perElement, how.type, how.op, comm_,
                      nullptr),
          comm_, "all_reduce");
    writeBack(tensor, data);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCC::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "cc: all_reduce_coalesced: no tensors");
  for (const at::Tensor& tensor : tensors) {
    checkTensor(tensor, "all_reduce_coalesced");
    TORCH_CHECK(tensor.scalar_type() == tensors[0].scalar_type(),
                "cc: all_reduce_coalesced: the tensors must share one dtype");
  }
  const Reduction how = reduction(tensors[0], opts.reduceOp, "all_reduce_coalesced");
  std::vector<at::Tensor> list = tensors;
  return collective(c10d::OpType::ALLREDUCE_COALESCED, tensors, [this, list, how] {
    at::Tensor flat = flatten(list);
    check(ccAllReduce(flat.data_ptr(), flat.data_ptr(),
                      static_cast<size_t>(flat.numel()) * how.perElement, how.type, how.op, comm_,
                      nullptr),
          comm_, "all_reduce_coalesced");
    int64_t offset = 0;
    for (const at::Tensor& tensor : list) {
      tensor.copy_(flat.narrow(0, offset, tensor.numel()).view(tensor.sizes()));
      offset += tensor.numel();
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCC::reduce(std::vector<at::Tensor>& tensors,
                                                      const c10d::ReduceOptions& opts) {
  const at::Tensor tensor = single(tensors, "reduce");
  checkRoot(opts.rootRank, size_, "reduce");
  const Reduction how = reduction(tensor, opts.reduceOp, "reduce");
  const int root = static_cast<int>(opts.rootRank);
  return collective(c10d::OpType::REDUCE, tensors, [this, tensor, how, root] {
    at::Tensor data = dense(tensor);
    void* recv = rank_ == root ? data.data_ptr() : nullptr;
    check(ccReduce(data.data_ptr(), recv, static_cast<size_t>(data.numel()) * how.perElement,
                   how.type, how.op, root, comm_, nullptr),
          comm_, "reduce");
    if (rank_ == root) writeBack(tensor, data);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCC::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  const at::Tensor input = single(inputs, "all_gather");
  TORCH_CHECK(outputs.size() == 1, "cc: all_gather takes one output list, not ", outputs.size());
  const std::vector<at::Tensor> list = outputs[0];
  TORCH_CHECK(static_cast<int>(list.size()) == size_, "cc: all_gather: the output list has ",
              list.size(), " tensors for a group of ", size_);
  for (const at::Tensor& output : list) {
    checkTensor(output, "all_gather");
    checkSameShape(output, input, "all_gather");
  }
  return collective(c10d::OpType::ALLGATHER, list, [this, input, list] {
    at::Tensor data = dense(input);
    at::Tensor flat = at::empty({size_ * data.numel()}, data.options());
    check(ccAllGather(data.data_ptr(), flat.data_ptr(), data.nbytes(), ccUint8, comm_, nullptr),
          comm_, "all_gather");
    for (int r = 0; r < size_; ++r) {
      list[static_cast<size_t>(r)].copy_(flat.narrow(0, r * data.numel(), data.numel())
                                             .view(list[static_cast<size_t>(r)].sizes()));
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCC::_allgather_base(at::Tensor& output,
                                                               at::Tensor& input,
                                                               const c10d::AllgatherOptions&) {
  checkTensor(input, "all_gather_into_tensor");
  checkTensor(output, "all_gather_into_tensor");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(),
              "cc: all_gather_into_tensor: the output's dtype ", output.scalar_type(),
              " differs from the input's ", input.scalar_type());
  TORCH_CHECK(output.numel() == input.numel() * size_,
              "cc: all_gather_into_tensor: the output has ", output.numel(),
              " elements, not the input's ", input.numel(), " times ", size_);
  const at::Tensor in = input;
  const at::Tensor out = output;
  return collective(c10d::OpType::_ALLGATHER_BASE, {out}, [this, in, out] {
    at::Tensor data = dense(in);
    at::Tensor result = dense(out);
    check(ccAllGather(data.data_ptr(), result.data_ptr(), data.nbytes(), ccUint8, comm_, nullptr),
          comm_, "all_gather_into_tensor");
    writeBack(out, result);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCC::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  TORCH_CHECK(!inputs.empty(), "cc: all_gather_coalesced: no tensors");
  TORCH_CHECK(static_cast<int>(outputLists.size()) == size_,
              "cc: all_gather_coalesced: ", outputLists.size(), " output lists for a group of ",
              size_);
  for (const at::Tensor& input : inputs) {
    checkTensor(input, "all_gather_coalesced");
    TORCH_CHECK(input.scalar_type() == inputs[0].scalar_type(),
                "cc: all_gather_coalesced: the tensors must share one dtype");
  }
  std::vector<at::Tensor> flatOutputs;
  for (const auto& list : outputLists) {
    TORCH_CHECK(list.size() == inputs.size(), "cc: all_gather_coalesced: an output list has ",
                list.size(), " tensors for ", inputs.size(), " inputs");
    for (size_t i = 0; i < list.size(); ++i) {
      checkTensor(list[i], "all_gather_coalesced");
      checkSameShape(list[i], inputs[i], "all_gather_coalesced");
      flatOutputs.push_back(list[i]);
    }
  }
  const std::vector<at::Tensor> in = inputs;
  const std::vector<std::vector<at::Tensor>> outs = outputLists;
  return collective(c10d::OpType::ALLGATHER_COALESCED, flatOutputs, [this, in, outs] {
    at::Tensor flat = flatten(in);
    at::Tensor gathered = at::empty({size_ * flat.numel()}, flat.options());
    check(ccAllGather(flat.data_ptr(), gathered.data_ptr(), flat.nbytes(), ccUint8, comm_, nullptr),
          comm_, "all_gather_coalesced");
    int64_t offset = 0;
    for (const auto& list : outs) {
      for (const at::Tensor& tensor : list) {
        tensor.copy_(gathered.narrow(0, offset, tensor.numel()).view(tensor.sizes()));
        offset += tensor.numel();
      }
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCC::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                      std::vector<at::Tensor>& inputs,
                                                      const c10d::GatherOptions& opts) {
  const at::Tensor input = single(inputs, "gather");
  checkRoot(opts.rootRank, size_, "gather");
  const int root = static_cast<int>(opts.rootRank);
  const std::vector<at::Tensor> list =
      rootList(outputs, input, rank_ == root, size_, "gather", "output");
  return collective(c10d::OpType::GATHER, list, [this, input, list, root] {
    at::Tensor data = dense(input);
    at::Tensor flat;
    if (rank_ == root) flat = at::empty({size_ * data.numel()}, data.options());
    check(ccGather(data.data_ptr(), rank_ == root ? flat.data_ptr() : nullptr, data.nbytes(),
                   ccUint8, root, comm_, nullptr),
          comm_, "gather");
    for (size_t r = 0; r < list.size(); ++r) {
      const int64_t offset = static_cast<int64_t>(r) * data.numel();
      list[r].copy_(flat.narrow(0, offset, data.numel()).view(list[r].sizes()));
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCC::scatter(std::vector<at::Tensor>& outputs,
                                                       std::vector<std::vector<at::Tensor>>& inputs,
                                                       const c10d::ScatterOptions& opts) {
  const at::Tensor output = single(outputs, "scatter");
  checkRoot(opts.rootRank, size_, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  const std::vector<at::Tensor> list =
      rootList(inputs, output, rank_ == root, size_, "scatter", "input");
  return collective(c10d::OpType::SCATTER, outputs, [this, output, list, root] {
    at::Tensor result = dense(output);
    at::Tensor flat;
    if (rank_ == root) flat = flatten(list);
    check(ccScatter(rank_ == root ? flat.data_ptr() : nullptr, result.data_ptr(), result.nbytes(),
                    ccUint8, root, comm_, nullptr),
          comm_, "scatter");
    writeBack(output, result);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCC::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const at::Tensor output = single(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1, "cc: reduce_scatter takes one input list, not ", inputs.size());
  const std::vector<at::Tensor> list = inputs[0];
  TORCH_CHECK(static_cast<int>(list.size()) == size_, "cc: reduce_scatter: the input list has ",
              list.size(), " tensors for a group of ", size_);
  for (const at::Tensor& input : list) {
    checkTensor(input, "reduce_scatter");
    checkSameShape(input, output, "reduce_scatter");
  }
  const Reduction how = reduction(output, opts.reduceOp, "reduce_scatter");
  return collective(c10d::OpType::REDUCE_SCATTER, outputs, [this, output, list, how] {
    at::Tensor flat = flatten(list);
    at::Tensor result = dense(output);
    check(ccReduceScatter(flat.data_ptr(), result.data_ptr(),
                          static_cast<size_t>(result.numel()) * how.perElement, how.type, how.op,
                          comm_, nullptr),
          comm_, "reduce_scatter");
    writeBack(output, result);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCC::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  checkTensor(input, "reduce_scatter_tensor");
  checkTensor(output, "reduce_scatter_tensor");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(),
              "cc: reduce_scatter_tensor: the output's dtype ", output.scalar_type(),
              " differs from the input's ", input.scalar_type());
  TORCH_CHECK(input.numel() == output.numel() * size_, "cc: reduce_scatter_tensor: the input has ",
              input.numel(), " elements, not the output's ", output.numel(), " times ", size_);
  const Reduction how = reduction(output, opts.reduceOp, "reduce_scatter_tensor");
  const at::Tensor in = input;
  const at::Tensor out = output;
  return collective(c10d::OpType::_REDUCE_SCATTER_BASE, {out}, [this, in, out, how] {
    at::Tensor data = dense(in);
    at::Tensor result = dense(out);
    check(ccReduceScatter(data.data_ptr(), result.data_ptr(),
                          static_cast<size_t>(result.numel()) * how.perElement, how.type, how.op,
                          comm_, nullptr),
          comm_, "reduce_scatter_tensor");
    writeBack(out, result);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCC::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                             std::vector<int64_t>& outputSplits,
                                                             std::vector<int64_t>& inputSplits,
                                                             const c10d::AllToAllOptions&) {
  checkTensor(input, "all_to_all_single");
  checkTensor(output, "all_to_all_single");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(),
              "cc: all_to_all_single: the output's dtype ", output.scalar_type(),
              " differs from the input's ", input.scalar_type());
  // Byte counts per peer: the rows each split names times the bytes of a row.
  auto counts = [&](const at::Tensor& tensor, const std::vector<int64_t>& splits,
                    const char* name) -> std::vector<size_t> {
    const int64_t rows = tensor.dim() == 0 ? 1 : tensor.size(0);
    const size_t rowBytes = rows == 0 ? 0 : tensor.nbytes() / static_cast<size_t>(rows);
    std::vector<size_t> bytes(static_cast<size_t>(size_));
    if (splits.empty()) {
      TORCH_CHECK(rows % size_ == 0, "cc: all_to_all_single: the ", name, "'s first dimension ",
                  rows, " does not divide by the group size ", size_);
      for (auto& b : bytes) b = static_cast<size_t>(rows / size_) * rowBytes;
      return bytes;
    }
    TORCH_CHECK(static_cast<int>(splits.size()) == size_, "cc: all_to_all_single: ", name,
                "_split_sizes has ", splits.size(), " entries for a group of ", size_);
    int64_t total = 0;
    for (size_t j = 0; j < splits.size(); ++j) {
      TORCH_CHECK(splits[j] >= 0, "cc: all_to_all_single: ", name, "_split_sizes[", j, "] is ",
                  splits[j]);
      total += splits[j];
      bytes[j] = static_cast<size_t>(splits[j]) * rowBytes;
    }
    TORCH_CHECK(total == rows, "cc: all_to_all_single: ", name, "_split_sizes sum to ", total,
                ", not the ", name, "'s first dimension ", rows);
    return bytes;
  };
  const std::vector<size_t> sendBytes = counts(input, inputSplits, "input");
  const std::vector<size_t> recvBytes = counts(output, outputSplits, "output");
  const bool even = inputSplits.empty() && outputSplits.empty();
  TORCH_CHECK(!even || output.nbytes() == input.nbytes(), "cc: all_to_all_single: the output has ",
              output.numel(), " elements and the input ", input.numel(),
              "; without split sizes they must be equal");
  const at::Tensor in = input;
  const at::Tensor out = output;
  return collective(
      c10d::OpType::ALLTOALL_BASE, {out}, [this, in, out, sendBytes, recvBytes, even] {
        at::Tensor result = dense(out);
        // cc's all-to-all is not done in place: a shared buffer is read from a copy.
        at::Tensor data = apartFrom(in, {result});
        if (even) {
          check(
              ccAllToAll(data.data_ptr(), result.data_ptr(), sendBytes[0], ccUint8, comm_, nullptr),
              comm_, "all_to_all_single");
        } else {
          std::vector<size_t> sendDispls(sendBytes.size());
          std::vector<size_t> recvDispls(recvBytes.size());
          for (size_t j = 1; j < sendBytes.size(); ++j) {
            sendDispls[j] = sendDispls[j - 1] + sendBytes[j - 1];
            recvDispls[j] = recvDispls[j - 1] + recvBytes[j - 1];
          }
          check(ccAllToAllv(data.data_ptr(), sendBytes.data(), sendDispls.data(), result.data_ptr(),
                            recvBytes.data(), recvDispls.data(), ccUint8, comm_, nullptr),
                comm_, "all_to_all_single");
        }
        writeBack(out, result);
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCC::alltoall(std::vector<at::Tensor>& outputs,
                                                        std::vector<at::Tensor>& inputs,
                                                        const c10d::AllToAllOptions&) {
  TORCH_CHECK(static_cast<int>(inputs.size()) == size_ && static_cast<int>(outputs.size()) == size_,
              "cc: all_to_all: ", inputs.size(), " inputs and ", outputs.size(),
              " outputs for a group of ", size_);
  for (size_t j = 0; j < inputs.size(); ++j) {
    checkTensor(inputs[j], "all_to_all");
    checkTensor(outputs[j], "all_to_all");
    TORCH_CHECK(inputs[j].scalar_type() == inputs[0].scalar_type() &&
                    outputs[j].scalar_type() == inputs[0].scalar_type(),
                "cc: all_to_all: the tensors must share one dtype");
  }
  const std::vector<at::Tensor> in = inputs;
  const std::vector<at::Tensor> out = outputs;
  return collective(c10d::OpType::ALLTOALL, outputs, [this, in, out] {
    std::vector<at::Tensor> sources;
    std::vector<at::Tensor> results;
    for (const at::Tensor& tensor : in) sources.push_back(apartFrom(tensor, out));
    for (const at::Tensor& tensor : out) results.push_back(dense(tensor));
    check(ccGroupStart(), comm_, "all_to_all");
    for (int j = 0; j < size_; ++j) {
      const auto index = static_cast<size_t>(j);
      ccSend(sources[index].data_ptr(), sources[index].nbytes(), ccUint8, j, comm_, nullptr);
      ccRecv(results[index].data_ptr(), results[index].nbytes(), ccUint8, j, comm_, nullptr);
    }
    check(ccGroupEnd(), comm_, "all_to_all");
    for (size_t j = 0; j < out.size(); ++j) writeBack(out[j], results[j]);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCC::barrier(const c10d::BarrierOptions&) {
  return collective(c10d::OpType::BARRIER, {},
                    [this] { check(ccBarrier(comm_, nullptr), comm_, "barrier"); });
}

ccComm_t ProcessGroupCC::connectPair(int src, int dst, int tag) {
  const std::string key =
      "cc/p2p/" + std::to_string(src) + "/" + std::to_string(dst) + "/" + std::to_string(tag);
  return joinCommunicator(key, 2, rank_ == src ? 0 : 1,
                          "connecting rank " + std::to_string(src) + " to rank " +
                              std::to_string(dst) + " for point-to-point messages with tag " +
                              std::to_string(tag));
}

std::shared_ptr<ProcessGroupCC::PeerLane> ProcessGroupCC::peerLane(int src, int dst, int tag) {
  std::lock_guard lock(peersMutex_);
  auto& slot = peers_[PeerKey{src, dst, tag}];
  if (!slot) {
    slot = std::make_shared<PeerLane>();
    slot->lane = std::make_shared<Lane>();
  }
  return slot;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCC::pointToPoint(bool isSend,
                                                            std::vector<at::Tensor>& tensors,
                                                            int peer, int tag) {
  const char* what = isSend ? "send" : "recv";
  const at::Tensor tensor = single(tensors, what);
  TORCH_CHECK(peer >= 0 && peer < size_, "cc: ", what, ": peer rank ", peer,
              " is out of range for a group of ", size_);
  TORCH_CHECK(peer != rank_, "cc: ", what, ": rank ", rank_,
              " addresses itself; use a copy (or all_to_all, which includes the self block)");
  const int src = isSend ? rank_ : peer;
  const int dst = isSend ? peer : rank_;
  std::shared_ptr<PeerLane> lane = peerLane(src, dst, tag);
  std::vector<at::Tensor> outputs;
  if (!isSend) outputs.push_back(tensor);
  auto work = c10::make_intrusive<Work>(rank_, isSend ? c10d::OpType::SEND : c10d::OpType::RECV,
                                        std::move(outputs), lane->lane);
  // The lane outlives its tasks (the destructor joins it first), so a raw pointer is safe.
  PeerLane* raw = lane.get();
  lane->lane->post(work, [this, raw, tensor, isSend, src, dst, tag] {
    // A failed connection stays failed: its unique id is spent, and a second try could
    // pair with a peer still on the first.
    if (!raw->failure.empty()) throw std::runtime_error(raw->failure);
    if (raw->comm == nullptr) {
      try {
        raw->comm = connectPair(src, dst, tag);
      } catch (const std::exception& error) {
        raw->failure = error.what();
        throw;
      }
    }
    const std::string label = std::string(isSend ? "send to rank " : "recv from rank ") +
                              std::to_string(isSend ? dst : src);
    if (isSend) {
      at::Tensor data = dense(tensor);
      check(ccSend(data.data_ptr(), data.nbytes(), ccUint8, 1, raw->comm, nullptr), raw->comm,
            label);
    } else {
      at::Tensor data = dense(tensor);
      check(ccRecv(data.data_ptr(), data.nbytes(), ccUint8, 0, raw->comm, nullptr), raw->comm,
            label);
      writeBack(tensor, data);
    }
  });
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCC::send(std::vector<at::Tensor>& tensors, int dstRank,
                                                    int tag) {
  return pointToPoint(true, tensors, dstRank, tag);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCC::recv(std::vector<at::Tensor>& tensors, int srcRank,
                                                    int tag) {
  return pointToPoint(false, tensors, srcRank, tag);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCC::recvAnysource(std::vector<at::Tensor>&, int) {
  TORCH_CHECK(false,
              "cc: recv without a source rank is not supported (as with NCCL); name the sender");
}

}  // namespace cc::torch_backend
