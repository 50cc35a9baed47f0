// A thin C++ layer over cc.h: owning handles (Comm, Stream), a group guard, datatypes
// deduced from element types, and errors as exceptions (cc::Error) on the caller's side
// of the C API. Header-only; link with cc::cc.
//
//   cc::Comm comm = cc::Comm::fromEnvironment();
//   std::vector<float> data(1024);
//   { cc::Group group; comm.send(std::span(data), right); comm.recv(std::span(data2), left); }
#pragma once

#include <cc/cc.h>

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace cc {

class Error : public std::runtime_error {
 public:
  Error(ccResult_t code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ccResult_t code() const { return code_; }

 private:
  ccResult_t code_;
};

inline void check(ccResult_t result, ccComm_t comm = nullptr) {
  if (result != ccSuccess) {
    throw Error(result, std::string(ccGetErrorString(result)) + ": " + ccGetLastError(comm));
  }
}

template <typename T>
constexpr ccDataType_t dataTypeOf() {
  if constexpr (std::is_same_v<T, int8_t> || std::is_same_v<T, char>)
    return ccInt8;
  else if constexpr (std::is_same_v<T, uint8_t> || std::is_same_v<T, std::byte>)
    return ccUint8;
  else if constexpr (std::is_same_v<T, int32_t>)
    return ccInt32;
  else if constexpr (std::is_same_v<T, uint32_t>)
    return ccUint32;
  else if constexpr (std::is_same_v<T, int64_t>)
    return ccInt64;
  else if constexpr (std::is_same_v<T, uint64_t>)
    return ccUint64;
  else if constexpr (std::is_same_v<T, float>)
    return ccFloat32;
  else if constexpr (std::is_same_v<T, double>)
    return ccFloat64;
  else
    static_assert(sizeof(T) == 0,
                  "no ccDataType_t for this element type; pass the type explicitly");
}

class Stream {
 public:
  Stream() { check(ccStreamCreate(&stream_)); }
  ~Stream() {
    if (stream_ != nullptr) ccStreamDestroy(stream_);
  }
  Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
  Stream& operator=(Stream&& other) noexcept {
    std::swap(stream_, other.stream_);
    return *this;
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  void synchronize() { check(ccStreamSynchronize(stream_)); }
  bool done() {
    ccResult_t result = ccStreamQuery(stream_);
    if (result == ccInProgress) return false;
    check(result);
    return true;
  }
  ccStream_t get() const { return stream_; }

 private:
  ccStream_t stream_ = nullptr;
};

// Memory the other ranks of a host can read in place once it is registered with a
// communicator (ccMemAlloc, zero-filled, page-aligned): `count` elements of T, freed
// when it goes. Declare it before the Registrations of it, so that they go first.
template <typename T>
class SharedBuffer {
 public:
  explicit SharedBuffer(size_t count) : count_(count) {
    void* memory = nullptr;
    check(ccMemAlloc(&memory, count * sizeof(T)));
    data_ = static_cast<T*>(memory);
  }
  ~SharedBuffer() {
    if (data_ != nullptr) ccMemFree(data_);
  }
  SharedBuffer(SharedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  SharedBuffer& operator=(SharedBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(count_, other.count_);
    return *this;
  }
  SharedBuffer(const SharedBuffer&) = delete;
  SharedBuffer& operator=(const SharedBuffer&) = delete;

  std::span<T> span() const { return {data_, count_}; }
  T* data() const { return data_; }
  size_t size() const { return count_; }

 private:
  T* data_ = nullptr;
  size_t count_ = 0;
};

// A buffer registered with a communicator (ccCommRegister), deregistered when it goes.
class Registration {
 public:
  Registration(ccComm_t comm, void* handle) : comm_(comm), handle_(handle) {}
  ~Registration() {
    if (handle_ != nullptr) ccCommDeregister(comm_, handle_);
  }
  Registration(Registration&& other) noexcept
      : comm_(other.comm_), handle_(std::exchange(other.handle_, nullptr)) {}
  Registration& operator=(Registration&& other) noexcept {
    std::swap(comm_, other.comm_);
    std::swap(handle_, other.handle_);
    return *this;
  }
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;

 private:
  ccComm_t comm_ = nullptr;
  void* handle_ = nullptr;
};

class Comm {
 public:
  static Comm fromEnvironment() {
    ccComm_t comm = nullptr;
    check(ccCommInitFromEnv(&comm));
    return Comm(comm);
  }
  static Comm initRank(int nranks, const ccUniqueId& id, int rank) {
    ccComm_t comm = nullptr;
    check(ccCommInitRank(&comm, nranks, id, rank));
    return Comm(comm);
  }
  explicit Comm(ccComm_t comm) : comm_(comm) {}
  ~Comm() {
    if (comm_ != nullptr) ccCommDestroy(comm_);
  }
  Comm(Comm&& other) noexcept : comm_(std::exchange(other.comm_, nullptr)) {}
  Comm& operator=(Comm&& other) noexcept {
    std::swap(comm_, other.comm_);
    return *this;
  }
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int rank() const {
    int rank = -1;
    check(ccCommUserRank(comm_, &rank), comm_);
    return rank;
  }
  int size() const {
    int count = 0;
    check(ccCommCount(comm_, &count), comm_);
    return count;
  }
  Comm split(int color, int key) const {
    ccComm_t child = nullptr;
    check(ccCommSplit(comm_, color, key, &child), comm_);
    return Comm(child);
  }
  template <typename T>
  void send(std::span<const T> data, int peer, const Stream* stream = nullptr) {
    check(ccSend(data.data(), data.size(), dataTypeOf<T>(), peer, comm_,
                 stream ? stream->get() : nullptr),
          comm_);
  }
  template <typename T>
  void send(std::span<T> data, int peer, const Stream* stream = nullptr) {
    send(std::span<const T>(data), peer, stream);
  }
  template <typename T>
  void recv(std::span<T> data, int peer, const Stream* stream = nullptr) {
    check(ccRecv(data.data(), data.size(), dataTypeOf<T>(), peer, comm_,
                 stream ? stream->get() : nullptr),
          comm_);
  }
  // Lets the ranks of this host read `buffer` (inside a SharedBuffer) in place.
  template <typename T>
  [[nodiscard]] Registration registerBuffer(std::span<T> buffer) {
    void* handle = nullptr;
    check(ccCommRegister(comm_, buffer.data(), buffer.size_bytes(), &handle), comm_);
    return Registration(comm_, handle);
  }
  void barrier(const Stream* stream = nullptr) {
    check(ccBarrier(comm_, stream ? stream->get() : nullptr), comm_);
  }

  // Collectives; sizes come from the spans (in place: pass the same span twice).
  template <typename T>
  void allReduce(std::span<const T> send, std::span<T> recv, ccRedOp_t op = ccSum,
                 const Stream* stream = nullptr) {
    requireSize(recv.size() == send.size(), "allReduce: recv and send differ in size");
    check(ccAllReduce(send.data(), recv.data(), send.size(), dataTypeOf<T>(), op, comm_,
                      streamOf(stream)),
          comm_);
  }
  template <typename T>
  void allReduce(std::span<T> data, ccRedOp_t op = ccSum, const Stream* stream = nullptr) {
    allReduce(std::span<const T>(data), data, op, stream);
  }
  template <typename T>
  void broadcast(std::span<T> data, int root, const Stream* stream = nullptr) {
    check(ccBroadcast(data.data(), data.data(), data.size(), dataTypeOf<T>(), root, comm_,
                      streamOf(stream)),
          comm_);
  }
  // recv is used on the root only.
  template <typename T>
  void reduce(std::span<const T> send, std::span<T> recv, int root, ccRedOp_t op = ccSum,
              const Stream* stream = nullptr) {
    check(ccReduce(send.data(), recv.data(), send.size(), dataTypeOf<T>(), op, root, comm_,
                   streamOf(stream)),
          comm_);
  }
  // recv holds size() * send.size() elements.
  template <typename T>
  void allGather(std::span<const T> send, std::span<T> recv, const Stream* stream = nullptr) {
    requireSize(recv.size() == send.size() * static_cast<size_t>(size()),
                "allGather: recv must hold size() * send.size()");
    check(ccAllGather(send.data(), recv.data(), send.size(), dataTypeOf<T>(), comm_,
                      streamOf(stream)),
          comm_);
  }
  // send holds size() * recv.size() elements.
  template <typename T>
  void reduceScatter(std::span<const T> send, std::span<T> recv, ccRedOp_t op = ccSum,
                     const Stream* stream = nullptr) {
    requireSize(send.size() == recv.size() * static_cast<size_t>(size()),
                "reduceScatter: send must hold size() * recv.size()");
    check(ccReduceScatter(send.data(), recv.data(), recv.size(), dataTypeOf<T>(), op, comm_,
                          streamOf(stream)),
          comm_);
  }
  // Both hold size() blocks of the same length.
  template <typename T>
  void allToAll(std::span<const T> send, std::span<T> recv, const Stream* stream = nullptr) {
    auto n = static_cast<size_t>(size());
    requireSize(send.size() == recv.size() && send.size() % n == 0,
                "allToAll: send and recv must hold size() equal blocks");
    check(ccAllToAll(send.data(), recv.data(), send.size() / n, dataTypeOf<T>(), comm_,
                     streamOf(stream)),
          comm_);
  }

  // Stops everything in flight and frees the communicator.
  void abort() {
    if (comm_ != nullptr) ccCommAbort(std::exchange(comm_, nullptr));
  }
  ccComm_t get() const { return comm_; }
  explicit operator bool() const { return comm_ != nullptr; }

 private:
  static ccStream_t streamOf(const Stream* stream) { return stream ? stream->get() : nullptr; }
  static void requireSize(bool ok, const char* what) {
    if (!ok) throw Error(ccInvalidArgument, what);
  }

  ccComm_t comm_ = nullptr;
};

// Operations issued while a Group is alive progress together when it ends.
class Group {
 public:
  Group() { check(ccGroupStart()); }
  ~Group() noexcept(false) {
    ccResult_t result = ccGroupEnd();
    if (result != ccSuccess && std::uncaught_exceptions() == 0) check(result);
  }
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;
};

}  // namespace cc
