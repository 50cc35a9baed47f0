// include/cc/compress.h's entry points: handles checked like cc.h's, calls queued on cc's
// streams as tasks.
#include <cc/compress.h>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "comm/handles.h"
#include "comm/stream.h"
#include "compress/compressor.h"

struct ccCompressor {
  // Shared with the calls queued on streams, which may run after the handle is gone.
  std::shared_ptr<cc::compress::Compressor> impl;
  ccComm_t comm;
};

namespace cc::compress {
namespace {

std::mutex gMutex;
std::unordered_set<ccCompressor*> gLive;

template <typename Body>
ccResult_t guarded(Body&& body) {
  try {
    return comm::reportStatus(body());
  } catch (const std::bad_alloc&) {
    return comm::reportStatus(Status(ccSystemError, "out of memory"));
  } catch (const std::exception& error) {
    return comm::reportStatus(internalError(std::string("unexpected exception: ") + error.what()));
  }
}

Result<ccCompressor*> lookup(ccCompressor_t handle, const char* call) {
  if (handle == nullptr) return invalidArgument(std::string(call) + ": compressor is NULL");
  std::lock_guard lock(gMutex);
  if (gLive.count(handle) == 0) {
    return invalidArgument(
        std::string(call) +
        ": compressor is not a live ccCompressor_t (destroyed or never created)");
  }
  return handle;
}

}  // namespace
}  // namespace cc::compress

using namespace cc;  // NOLINT: the C entry points below

extern "C" {

ccResult_t ccCompressorCreate(ccComm_t comm, const ccCompressConfig_t* config, size_t tensors,
                              const size_t* rows, const size_t* cols, ccCompressor_t* compressor) {
  return compress::guarded([&]() -> Status {
    if (compressor == nullptr) return invalidArgument("ccCompressorCreate: compressor is NULL");
    *compressor = nullptr;
    if (comm::communicatorOf(comm) == nullptr) {
      return invalidArgument(
          "ccCompressorCreate: comm is NULL or not a live communicator (destroyed or never "
          "created)");
    }
    if (config == nullptr) return invalidArgument("ccCompressorCreate: config is NULL");
    if (tensors == 0) return invalidArgument("ccCompressorCreate: tensors is 0");
    if (rows == nullptr || cols == nullptr) {
      return invalidArgument(std::string("ccCompressorCreate: ") +
                             (rows == nullptr ? "rows" : "cols") + " is NULL");
    }
    std::vector<compress::TensorShape> shapes;
    for (size_t t = 0; t < tensors; ++t) {
      if (rows[t] == 0 || cols[t] == 0) {
        return invalidArgument("ccCompressorCreate: tensor " + std::to_string(t) + " is " +
                               std::to_string(rows[t]) + " x " + std::to_string(cols[t]) +
                               " (rows and cols must be at least 1)");
      }
      shapes.push_back({rows[t], cols[t]});
    }
    CC_ASSIGN_OR_RETURN(std::unique_ptr<compress::Compressor> made,
                        compress::makeCompressor(comm, *config, std::move(shapes)));
    auto* handle = new ccCompressor{std::shared_ptr<compress::Compressor>(std::move(made)), comm};
    std::lock_guard lock(compress::gMutex);
    compress::gLive.insert(handle);
    *compressor = handle;
    return Status::ok();
  });
}

ccResult_t ccCompressedAllReduce(ccCompressor_t compressor, float* buffer, ccStream_t stream) {
  return compress::guarded([&]() -> Status {
    CC_ASSIGN_OR_RETURN(ccCompressor * handle,
                        compress::lookup(compressor, "ccCompressedAllReduce"));
    if (buffer == nullptr) return invalidArgument("ccCompressedAllReduce: buffer is NULL");
    std::shared_ptr<comm::Communicator> comm = comm::communicatorOf(handle->comm);
    if (comm == nullptr) {
      return invalidArgument("ccCompressedAllReduce: the compressor's communicator was destroyed");
    }
    CC_ASSIGN_OR_RETURN(std::shared_ptr<comm::Stream> queue, comm::streamOf(stream));
    std::shared_ptr<compress::Compressor> impl = handle->impl;
    if (queue == nullptr) return impl->allReduce(buffer);
    queue->enqueue([impl, buffer] { return impl->allReduce(buffer); }, {comm});
    return Status::ok();
  });
}

ccResult_t ccCompressedReduceScatter(ccCompressor_t compressor, const float* buffer, float* shard,
                                     ccStream_t stream) {
  return compress::guarded([&]() -> Status {
    CC_ASSIGN_OR_RETURN(ccCompressor * handle,
                        compress::lookup(compressor, "ccCompressedReduceScatter"));
    if (buffer == nullptr) return invalidArgument("ccCompressedReduceScatter: buffer is NULL");
    if (shard == nullptr) return invalidArgument("ccCompressedReduceScatter: shard is NULL");
    std::shared_ptr<compress::Compressor> impl = handle->impl;
    if (impl->elements() % static_cast<size_t>(impl->ranks()) != 0) {
      return invalidArgument("ccCompressedReduceScatter: the buffer's " +
                             std::to_string(impl->elements()) + " elements do not divide among " +
                             std::to_string(impl->ranks()) + " ranks");
    }
    std::shared_ptr<comm::Communicator> comm = comm::communicatorOf(handle->comm);
    if (comm == nullptr) {
      return invalidArgument(
          "ccCompressedReduceScatter: the compressor's communicator was destroyed");
    }
    CC_ASSIGN_OR_RETURN(std::shared_ptr<comm::Stream> queue, comm::streamOf(stream));
    if (queue == nullptr) return impl->reduceScatter(buffer, shard);
    queue->enqueue([impl, buffer, shard] { return impl->reduceScatter(buffer, shard); }, {comm});
    return Status::ok();
  });
}

ccResult_t ccCompressorDestroy(ccCompressor_t compressor) {
  return compress::guarded([&]() -> Status {
    CC_ASSIGN_OR_RETURN(ccCompressor * handle, compress::lookup(compressor, "ccCompressorDestroy"));
    {
      std::lock_guard lock(compress::gMutex);
      compress::gLive.erase(handle);
    }
    delete handle;
    return Status::ok();
  });
}

}  // extern "C"
