// ompi-coll: the Open MPI side of cc-bench's collective comparison (cc-bench COLLECTIVE
// --peer mpi). The same sweep, sizes, type, op and checks as cc-bench (coll_rules.h),
// through MPI_Allreduce, MPI_Allgather, MPI_Reduce_scatter_block, MPI_Bcast, MPI_Reduce,
// MPI_Alltoall and MPI_Sendrecv on MPI_COMM_WORLD.
//
//   mpirun -np N ompi-coll allreduce -b 8 -e 64M -f 2 -d float -o sum [--gate PREFIX]
//
// What MPI does not have is done the way an MPI user would: avg is MPI_SUM followed by a
// local division (inside the timed call); half and bfloat16 have no MPI datatype in
// Open MPI 4.1, so those types are refused. In place: MPI_IN_PLACE; MPI's in-place
// reduce-scatter leaves the result at the start of the buffer, not at rank * count. An
// out-of-place broadcast is MPI_Bcast from the root's send buffer into the others'
// receive buffers (MPI has one buffer argument).
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdio>
#include <string>

#include "coll_peer.h"

namespace cc::bench::coll {
namespace {

bool mpiType(DataType t, MPI_Datatype& out) {
  switch (t) {
    case DataType::Int8:
      out = MPI_INT8_T;
      return true;
    case DataType::Uint8:
      out = MPI_UINT8_T;
      return true;
    case DataType::Int32:
      out = MPI_INT32_T;
      return true;
    case DataType::Uint32:
      out = MPI_UINT32_T;
      return true;
    case DataType::Int64:
      out = MPI_INT64_T;
      return true;
    case DataType::Uint64:
      out = MPI_UINT64_T;
      return true;
    case DataType::Float:
      out = MPI_FLOAT;
      return true;
    case DataType::Double:
      out = MPI_DOUBLE;
      return true;
    default:
      return false;
  }
}

MPI_Op mpiOp(Op op) {
  switch (op) {
    case Op::Prod:
      return MPI_PROD;
    case Op::Max:
      return MPI_MAX;
    case Op::Min:
      return MPI_MIN;
    default:
      return MPI_SUM;
  }
}

template <typename T>
void divideEach(void* buffer, size_t count, int divisor) {
  T* values = static_cast<T*>(buffer);
  for (size_t i = 0; i < count; ++i)
    values[i] = static_cast<T>(values[i] / static_cast<T>(divisor));
}

void divideAll(DataType t, void* buffer, size_t count, int divisor) {
  switch (t) {
    case DataType::Int8:
      divideEach<int8_t>(buffer, count, divisor);
      break;
    case DataType::Uint8:
      divideEach<uint8_t>(buffer, count, divisor);
      break;
    case DataType::Int32:
      divideEach<int32_t>(buffer, count, divisor);
      break;
    case DataType::Uint32:
      divideEach<uint32_t>(buffer, count, divisor);
      break;
    case DataType::Int64:
      divideEach<int64_t>(buffer, count, divisor);
      break;
    case DataType::Uint64:
      divideEach<uint64_t>(buffer, count, divisor);
      break;
    case DataType::Float:
      divideEach<float>(buffer, count, divisor);
      break;
    case DataType::Double:
      divideEach<double>(buffer, count, divisor);
      break;
    default:
      break;
  }
}

class MpiBackend {
 public:
  MpiBackend(const PeerOptions& options, int rank, int nranks, MPI_Datatype type)
      : options_(options), rank_(rank), nranks_(nranks), type_(type) {}

  void barrier() { MPI_Barrier(MPI_COMM_WORLD); }
  void prepare(bool, const Shape&, Placement) {}

  void call(bool inPlace, const Shape& s, Placement at) {
    int count = static_cast<int>(s.count);
    MPI_Op op = mpiOp(options_.op);
    int root = options_.root;
    void* sendOrInPlace = inPlace ? MPI_IN_PLACE : at.send;
    switch (options_.collective) {
      case Collective::AllReduce:
        MPI_Allreduce(sendOrInPlace, at.recv, count, type_, op, MPI_COMM_WORLD);
        scale(at.recv, s.count);
        break;
      case Collective::Reduce:
        if (inPlace && rank_ != root) sendOrInPlace = at.send;
        MPI_Reduce(sendOrInPlace, at.recv, count, type_, op, root, MPI_COMM_WORLD);
        if (rank_ == root) scale(at.recv, s.count);
        break;
      case Collective::ReduceScatter:
        if (inPlace) {
          MPI_Reduce_scatter_block(MPI_IN_PLACE, at.send, count, type_, op, MPI_COMM_WORLD);
          scale(at.send, s.count);
        } else {
          MPI_Reduce_scatter_block(at.send, at.recv, count, type_, op, MPI_COMM_WORLD);
          scale(at.recv, s.count);
        }
        break;
      case Collective::AllGather:
        if (inPlace) {
          MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, at.recv, count, type_, MPI_COMM_WORLD);
        } else {
          MPI_Allgather(at.send, count, type_, at.recv, count, type_, MPI_COMM_WORLD);
        }
        break;
      case Collective::Broadcast:
        MPI_Bcast(rank_ == root ? at.send : at.recv, count, type_, root, MPI_COMM_WORLD);
        break;
      case Collective::AllToAll:
        MPI_Alltoall(at.send, count, type_, at.recv, count, type_, MPI_COMM_WORLD);
        break;
      case Collective::SendRecv:
        MPI_Sendrecv(at.send, count, type_, (rank_ + 1) % nranks_, 0, at.recv, count, type_,
                     (rank_ + nranks_ - 1) % nranks_, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        break;
    }
  }

  const void* output(bool inPlace, const Shape&, Placement at) const {
    if (options_.collective == Collective::ReduceScatter && inPlace) return at.send;
    if (options_.collective == Collective::Broadcast && rank_ == options_.root) return at.send;
    return at.recv;
  }

  void maxToRoot(std::vector<double>& values) {
    std::vector<double> result(values.size());
    MPI_Reduce(values.data(), result.data(), static_cast<int>(values.size()), MPI_DOUBLE, MPI_MAX,
               0, MPI_COMM_WORLD);
    if (rank_ == 0) values = result;
  }

  uint64_t sumToRoot(uint64_t value) {
    uint64_t total = 0;
    MPI_Reduce(&value, &total, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    return total;
  }

 private:
  void scale(void* buffer, size_t count) {
    if (options_.op == Op::Avg) divideAll(options_.type, buffer, count, nranks_);
  }

  const PeerOptions& options_;
  int rank_;
  int nranks_;
  MPI_Datatype type_;
};

}  // namespace
}  // namespace cc::bench::coll

int main(int argc, char** argv) {
  using namespace cc::bench::coll;
  MPI_Init(&argc, &argv);
  int rank = 0;
  int nranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  PeerOptions options;
  std::string error;
  int status = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  if (!parsePeerOptions(argc, argv, options, error)) {
    if (rank == 0) std::fprintf(stderr, "ompi-coll: %s\n%s", error.c_str(), kPeerUsage);
    status = 2;
  } else if (!mpiType(options.type, type)) {
    if (rank == 0)
      std::printf("# unsupported: Open MPI 4.1 has no MPI datatype for %s\n",
                  dataTypeName(options.type));
    status = 3;
  } else if (options.root < 0 || options.root >= nranks) {
    if (rank == 0) std::fprintf(stderr, "ompi-coll: root %d out of range\n", options.root);
    status = 2;
  } else {
    MpiBackend backend(options, rank, nranks, type);
    status = runRows(backend, options, rank, nranks);
  }
  MPI_Finalize();
  return status;
}
