// gloo-coll: the Gloo side of cc-bench's collective comparison (cc-bench COLLECTIVE
// --peer gloo), against Debian's libgloo-dev (2022 snapshot). The same sweep, sizes,
// type, op and checks as cc-bench (coll_rules.h). cc-bench starts N of these with
// --rank R --size N; they meet through a FileStore in --store DIR and connect over TCP
// on 127.0.0.1 (Gloo has no shared-memory transport).
//
//   gloo-coll allreduce --rank 0 --size 2 --store /tmp/x -b 8 -e 64M -f 2 -d float -o sum
//
// Calls: gloo::allreduce, allgather, broadcast, reduce, alltoall (the options-struct
// API), and ReduceScatterHalvingDoubling, the one reduce-scatter this Gloo has. It works
// in place on the full buffer and leaves rank r's block at the start of it (as MPI's in-place
// reduce-scatter does); out of place copies the input into a work buffer first, inside the
// timed call, and the result is read from the start of the work buffer.
// Reductions use element-wise functions written here (Gloo takes any function), float16
// and bfloat16 in float32 as cc does; avg is a sum and a local division, as torch's
// ProcessGroupGloo does. send/recv is a pair of unbound-buffer send and recv.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/reduce.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>

#include "coll_peer.h"

namespace cc::bench::coll {
namespace {

// How each type is stored and in what it is reduced.
template <typename T>
struct PlainTraits {
  using Storage = T;
  using Arith = T;
  static Arith load(Storage value) { return value; }
  static Storage store(Arith value) { return value; }
};
template <DataType kType>
struct Traits;
template <>
struct Traits<DataType::Int8> : PlainTraits<int8_t> {};
template <>
struct Traits<DataType::Uint8> : PlainTraits<uint8_t> {};
template <>
struct Traits<DataType::Int32> : PlainTraits<int32_t> {};
template <>
struct Traits<DataType::Uint32> : PlainTraits<uint32_t> {};
template <>
struct Traits<DataType::Int64> : PlainTraits<int64_t> {};
template <>
struct Traits<DataType::Uint64> : PlainTraits<uint64_t> {};
template <>
struct Traits<DataType::Float> : PlainTraits<float> {};
template <>
struct Traits<DataType::Double> : PlainTraits<double> {};
template <>
struct Traits<DataType::Half> {
  using Storage = uint16_t;
  using Arith = float;
  static Arith load(Storage value) { return halfToFloat(value); }
  static Storage store(Arith value) { return floatToHalf(value); }
};
template <>
struct Traits<DataType::Bfloat16> {
  using Storage = uint16_t;
  using Arith = float;
  static Arith load(Storage value) { return bfloat16ToFloat(value); }
  static Storage store(Arith value) { return floatToBfloat16(value); }
};

// Integer arithmetic wraps (through the unsigned type), as cc's does.
template <typename Arith>
Arith combine(Op op, Arith a, Arith b) {
  if constexpr (std::is_integral_v<Arith>) {
    using Unsigned = std::make_unsigned_t<Arith>;
    if (op == Op::Sum || op == Op::Avg)
      return static_cast<Arith>(
          static_cast<Unsigned>(static_cast<Unsigned>(a) + static_cast<Unsigned>(b)));
    if (op == Op::Prod)
      return static_cast<Arith>(
          static_cast<Unsigned>(static_cast<Unsigned>(a) * static_cast<Unsigned>(b)));
  } else {
    if (op == Op::Sum || op == Op::Avg) return a + b;
    if (op == Op::Prod) return a * b;
  }
  return op == Op::Max ? (a < b ? b : a) : (b < a ? b : a);
}

template <DataType kType, Op kOp>
void reduceInto(void* out, const void* a, const void* b, size_t n) {
  using T = Traits<kType>;
  auto* o = static_cast<typename T::Storage*>(out);
  auto* x = static_cast<const typename T::Storage*>(a);
  auto* y = static_cast<const typename T::Storage*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = T::store(combine(kOp, T::load(x[i]), T::load(y[i])));
}

// The ReductionFunction ReduceScatterHalvingDoubling needs: x[i] = x[i] op y[i].
template <DataType kType, Op kOp>
void reduceInPlace(typename Traits<kType>::Storage* x, const typename Traits<kType>::Storage* y,
                   size_t n) {
  reduceInto<kType, kOp>(x, x, y, n);
}

template <DataType kType>
class GlooBackend {
 public:
  using Storage = typename Traits<kType>::Storage;

  GlooBackend(const PeerOptions& options, std::shared_ptr<gloo::Context> context)
      : options_(options), context_(std::move(context)) {
    switch (options_.op) {
      case Op::Sum:
      case Op::Avg:
        reduce_ = &reduceInto<kType, Op::Sum>;
        break;
      case Op::Prod:
        reduce_ = &reduceInto<kType, Op::Prod>;
        break;
      case Op::Max:
        reduce_ = &reduceInto<kType, Op::Max>;
        break;
      case Op::Min:
        reduce_ = &reduceInto<kType, Op::Min>;
        break;
    }
  }

  void barrier() {
    gloo::BarrierOptions opts(context_);
    gloo::barrier(opts);
  }

  void prepare(bool inPlace, const Shape& s, Placement at) {
    if (options_.collective != Collective::ReduceScatter) return;
    Storage* buffer = static_cast<Storage*>(at.send);
    if (!inPlace) {
      size_t bytes = s.sendElems * sizeof(Storage);
      if (workBytes_ < bytes) {
        work_ = makeBuffer(bytes);
        workBytes_ = bytes;
      }
      buffer = reinterpret_cast<Storage*>(work_.get());
    }
    std::vector<int> recvElems(static_cast<size_t>(context_->size), static_cast<int>(s.count));
    reduceScatter_ = std::make_unique<gloo::ReduceScatterHalvingDoubling<Storage>>(
        context_, std::vector<Storage*>{buffer}, static_cast<int>(s.sendElems), recvElems,
        reductionFunction());
  }

  void call(bool inPlace, const Shape& s, Placement at) {
    const size_t count = s.count;
    Storage* send = static_cast<Storage*>(at.send);
    Storage* recv = static_cast<Storage*>(at.recv);
    const int rank = context_->rank;
    const int root = options_.root;
    switch (options_.collective) {
      case Collective::AllReduce: {
        gloo::AllreduceOptions opts(context_);
        if (!inPlace) opts.setInput(send, count);
        opts.setOutput(recv, count);
        opts.setReduceFunction(reduce_);
        gloo::allreduce(opts);
        scale(recv, count);
        break;
      }
      case Collective::Reduce: {
        gloo::ReduceOptions opts(context_);
        if (!inPlace) opts.setInput(send, count);
        opts.setOutput(recv, count);
        opts.setRoot(root);
        opts.setReduceFunction(reduce_);
        gloo::reduce(opts);
        if (rank == root) scale(recv, count);
        break;
      }
      case Collective::ReduceScatter: {
        if (!inPlace) std::memcpy(work_.get(), send, s.sendElems * sizeof(Storage));
        reduceScatter_->run();
        scale(inPlace ? send : reinterpret_cast<Storage*>(work_.get()), count);
        break;
      }
      case Collective::AllGather: {
        gloo::AllgatherOptions opts(context_);
        if (!inPlace) opts.setInput(send, count);
        opts.setOutput(recv, count * static_cast<size_t>(context_->size));
        gloo::allgather(opts);
        break;
      }
      case Collective::Broadcast: {
        gloo::BroadcastOptions opts(context_);
        if (!inPlace && rank == root) opts.setInput(send, count);
        opts.setOutput(recv, count);
        opts.setRoot(root);
        gloo::broadcast(opts);
        break;
      }
      case Collective::AllToAll: {
        gloo::AlltoallOptions opts(context_);
        opts.setInput(send, s.sendElems);
        opts.setOutput(recv, s.recvElems);
        gloo::alltoall(opts);
        break;
      }
      case Collective::SendRecv: {
        int size = context_->size;
        auto out = context_->createUnboundBuffer(send, count * sizeof(Storage));
        auto in = context_->createUnboundBuffer(recv, count * sizeof(Storage));
        constexpr uint64_t kSlot = 1;
        in->recv((rank + size - 1) % size, kSlot);
        out->send((rank + 1) % size, kSlot);
        in->waitRecv(context_->getTimeout());
        out->waitSend(context_->getTimeout());
        break;
      }
    }
  }

  const void* output(bool inPlace, const Shape&, Placement at) const {
    if (options_.collective == Collective::ReduceScatter)
      return inPlace ? at.send : static_cast<const void*>(work_.get());
    return at.recv;
  }

  void maxToRoot(std::vector<double>& values) {
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(values.data(), values.size());
    opts.setReduceFunction(&reduceInto<DataType::Double, Op::Max>);
    gloo::allreduce(opts);
  }

  uint64_t sumToRoot(uint64_t value) {
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(&value, 1);
    opts.setReduceFunction(&reduceInto<DataType::Uint64, Op::Sum>);
    gloo::allreduce(opts);
    return value;
  }

 private:
  const gloo::ReductionFunction<Storage>* reductionFunction() const {
    using Function = gloo::ReductionFunction<Storage>;
    static const Function kSum(gloo::CUSTOM, &reduceInPlace<kType, Op::Sum>);
    static const Function kProd(gloo::CUSTOM, &reduceInPlace<kType, Op::Prod>);
    static const Function kMax(gloo::CUSTOM, &reduceInPlace<kType, Op::Max>);
    static const Function kMin(gloo::CUSTOM, &reduceInPlace<kType, Op::Min>);
    switch (options_.op) {
      case Op::Prod:
        return &kProd;
      case Op::Max:
        return &kMax;
      case Op::Min:
        return &kMin;
      default:
        return &kSum;
    }
  }

  void scale(Storage* values, size_t count) const {
    if (options_.op != Op::Avg) return;
    using T = Traits<kType>;
    using Arith = typename T::Arith;
    Arith divisor = static_cast<Arith>(context_->size);
    for (size_t i = 0; i < count; ++i) values[i] = T::store(T::load(values[i]) / divisor);
  }

  const PeerOptions& options_;
  std::shared_ptr<gloo::Context> context_;
  std::function<void(void*, const void*, const void*, size_t)> reduce_;
  std::unique_ptr<gloo::ReduceScatterHalvingDoubling<Storage>> reduceScatter_;
  Buffer work_;
  size_t workBytes_ = 0;
};

template <DataType kType>
int runWith(const PeerOptions& options, std::shared_ptr<gloo::Context> context) {
  int rank = context->rank;
  int size = context->size;
  GlooBackend<kType> backend(options, std::move(context));
  return runRows(backend, options, rank, size);
}

int dispatch(const PeerOptions& options, std::shared_ptr<gloo::Context> context) {
  switch (options.type) {
    case DataType::Int8:
      return runWith<DataType::Int8>(options, std::move(context));
    case DataType::Uint8:
      return runWith<DataType::Uint8>(options, std::move(context));
    case DataType::Int32:
      return runWith<DataType::Int32>(options, std::move(context));
    case DataType::Uint32:
      return runWith<DataType::Uint32>(options, std::move(context));
    case DataType::Int64:
      return runWith<DataType::Int64>(options, std::move(context));
    case DataType::Uint64:
      return runWith<DataType::Uint64>(options, std::move(context));
    case DataType::Half:
      return runWith<DataType::Half>(options, std::move(context));
    case DataType::Float:
      return runWith<DataType::Float>(options, std::move(context));
    case DataType::Double:
      return runWith<DataType::Double>(options, std::move(context));
    case DataType::Bfloat16:
      return runWith<DataType::Bfloat16>(options, std::move(context));
  }
  return 2;
}

// --rank/--size, or the launcher's environment when started by mpirun.
void rankFromEnvironment(PeerOptions& options) {
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (options.rank < 0 && rank != nullptr) options.rank = std::atoi(rank);
  if (options.size < 0 && size != nullptr) options.size = std::atoi(size);
}

}  // namespace
}  // namespace cc::bench::coll

int main(int argc, char** argv) {
  using namespace cc::bench::coll;
  PeerOptions options;
  std::string error;
  if (!parsePeerOptions(argc, argv, options, error)) {
    std::fprintf(stderr, "gloo-coll: %s\n%s", error.c_str(), kPeerUsage);
    return 2;
  }
  rankFromEnvironment(options);
  if (options.rank < 0 || options.size < 1 || options.rank >= options.size ||
      options.store.empty() || options.root < 0 || options.root >= options.size) {
    std::fprintf(stderr, "gloo-coll: needs --rank R --size N --store DIR, 0 <= R, ROOT < N\n");
    return 2;
  }
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";  // loopback only
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(options.store);
    auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
    context->setTimeout(std::chrono::seconds(120));
    context->connectFullMesh(store, device);
    return dispatch(options, std::move(context));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo-coll: rank %d: %s\n", options.rank, e.what());
    return 1;
  }
}
