#include "transport/ucx/channel.h"

#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <string>

namespace cc::transport::ucx {
namespace {

constexpr ucp_tag_t kFullTagMask = ~ucp_tag_t{0};
// How long destruction waits for an endpoint to flush (alive peer) or be torn down, and
// how long it waits when nothing moves: UCX's flush also waits for the peer to progress,
// which a peer busy elsewhere, or one destroyed later on this same thread, does not do.
constexpr auto kCloseBound = std::chrono::milliseconds(1000);
constexpr auto kFlushStall = std::chrono::milliseconds(100);

void onEndpointError(void* arg, ucp_ep_h /*endpoint*/, ucs_status_t status) {
  auto* state = static_cast<EndpointState*>(arg);
  if (state->error == UCS_OK) state->error = status;
}

}  // namespace

UcxChannel::UcxChannel(int peer, int selfRank, std::shared_ptr<UcxWorker> worker,
                       FileDescriptor control)
    : Channel(peer),
      selfRank_(selfRank),
      worker_(std::move(worker)),
      control_(std::move(control)) {}

UcxChannel::~UcxChannel() { close(); }

Status UcxChannel::connect(std::span<const std::byte> peerAddress) {
  state_ = worker_->newEndpointState(peer());
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(peerAddress.data());
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = onEndpointError;
  params.err_handler.arg = state_;
  ucs_status_t status = ucp_ep_create(worker_->handle(), &params, &endpoint_);
  if (status != UCS_OK) {
    endpoint_ = nullptr;
    return ucxError("ucp_ep_create to rank " + std::to_string(peer()) +
                        " (no UCX transport reaches it: check UCX_TLS and UCX_NET_DEVICES)",
                    status);
  }
  return Status::ok();
}

ucs_status_ptr_t UcxChannel::startFlush() {
  ucp_request_param_t params{};
  return ucp_ep_flush_nbx(endpoint_, &params);
}

bool UcxChannel::drive() { return worker_->progress(); }

bool UcxChannel::readyToSleep() {
  // Arming fails while events are pending: handle them rather than sleep on them.
  if (worker_->arm()) return true;
  worker_->progress();
  return false;
}

Status UcxChannel::requestFailed(const char* operation, ucs_status_t status) const {
  std::string who = "rank " + std::to_string(peer()) + " (ucx)";
  if (state_ != nullptr && state_->error != UCS_OK) status = state_->error;
  return remoteError(who + " is gone: " + operation + " failed: " + ucs_status_string(status));
}

bool UcxChannel::controlClosed() const {
  char byte = 0;
  ssize_t n = ::recv(control_.get(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;
  return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

Status UcxChannel::checkPeer() {
  std::string who = "rank " + std::to_string(peer()) + " (ucx)";
  if (state_ != nullptr && state_->error != UCS_OK) {
    return remoteError(who + " is gone: UCX reports " + ucs_status_string(state_->error));
  }
  if (controlClosed()) return remoteError(who + " is gone: its control connection closed");
  return Status::ok();
}

void UcxChannel::abandon() {
  worker_->setForceClose();
  close();
}

Status UcxChannel::closedError() const {
  return remoteError("the ucx channel to rank " + std::to_string(peer()) +
                     " was closed after an earlier failure");
}

Result<Progress> UcxChannel::progressSend(Transfer& transfer) {
  if (endpoint_ == nullptr) return closedError();
  if (!transfer.started) {
    if (sendRequest_ != nullptr)
      return internalError("ucx channel: a send started while another is in flight");
    transfer.started = true;
    ucp_request_param_t params{};
    ucs_status_ptr_t request = ucp_tag_send_nbx(endpoint_, transfer.data, transfer.bytes,
                                                static_cast<ucp_tag_t>(selfRank_), &params);
    if (UCS_PTR_IS_ERR(request)) return requestFailed("send", UCS_PTR_STATUS(request));
    if (request == nullptr) {
      transfer.progressed = transfer.bytes;
      return Progress::kDone;
    }
    sendRequest_ = request;
  }
  bool moved = drive();
  ucs_status_t status = ucp_request_check_status(sendRequest_);
  if (status == UCS_INPROGRESS) return moved ? Progress::kMoved : Progress::kIdle;
  ucp_request_free(sendRequest_);
  sendRequest_ = nullptr;
  if (status != UCS_OK) return requestFailed("send", status);
  transfer.progressed = transfer.bytes;
  return Progress::kDone;
}

Result<Progress> UcxChannel::progressRecv(Transfer& transfer) {
  if (endpoint_ == nullptr) return closedError();
  if (!transfer.started) {
    if (recvRequest_ != nullptr)
      return internalError("ucx channel: a receive started while another is in flight");
    transfer.started = true;
    recvInfo_ = {};
    ucp_request_param_t params{};
    // Always a request, so that completion and the sender's length come from one place.
    params.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    ucs_status_ptr_t request =
        ucp_tag_recv_nbx(worker_->handle(), transfer.data, transfer.bytes,
                         static_cast<ucp_tag_t>(peer()), kFullTagMask, &params);
    if (UCS_PTR_IS_ERR(request)) return requestFailed("receive", UCS_PTR_STATUS(request));
    recvRequest_ = request;
  }
  ucs_status_t status = UCS_OK;
  bool moved = false;
  if (recvRequest_ != nullptr) {
    moved = drive();
    status = ucp_tag_recv_request_test(recvRequest_, &recvInfo_);
    if (status == UCS_INPROGRESS) return moved ? Progress::kMoved : Progress::kIdle;
    ucp_request_free(recvRequest_);
    recvRequest_ = nullptr;
  }
  if (status == UCS_ERR_MESSAGE_TRUNCATED) {
    return invalidUsage("message size mismatch: this rank receives " +
                        std::to_string(transfer.bytes) + " bytes from rank " +
                        std::to_string(peer()) + ", which sent more");
  }
  if (status != UCS_OK) return requestFailed("receive", status);
  if (recvInfo_.length != transfer.bytes) {
    return invalidUsage("message size mismatch: this rank receives " +
                        std::to_string(transfer.bytes) + " bytes from rank " +
                        std::to_string(peer()) + ", which sent " +
                        std::to_string(recvInfo_.length));
  }
  transfer.progressed = transfer.bytes;
  return Progress::kDone;
}

// Ends whatever is in flight, then the endpoint. A receive still posted (the operation
// failed or was aborted) is cancelled first, so UCX stops writing into a buffer the
// caller may free. With a live peer, the endpoint is flushed first, so that what UCX
// still buffers of the last messages reaches the kernel, which delivers it after we are
// gone (as with the tcp transport). The close itself is always forced: UCX's flushing
// close waits for the peer to progress, as its flush does (hence kFlushStall).
void UcxChannel::close() {
  if (endpoint_ == nullptr) return;
  ucp_worker_h worker = worker_->handle();
  auto deadline = std::chrono::steady_clock::now() + kCloseBound;
  auto pending = [](void* request) {
    return request != nullptr && !UCS_PTR_IS_ERR(request) &&
           ucp_request_check_status(request) == UCS_INPROGRESS;
  };
  if (recvRequest_ != nullptr) ucp_request_cancel(worker, recvRequest_);
  bool healthy = !worker_->forceClose() && (state_ == nullptr || state_->error == UCS_OK) &&
                 sendRequest_ == nullptr && recvRequest_ == nullptr && !controlClosed();
  if (healthy) {
    ucs_status_ptr_t flushing = startFlush();
    auto lastMoved = std::chrono::steady_clock::now();
    while (pending(flushing) && !controlClosed()) {
      auto now = std::chrono::steady_clock::now();
      if (now >= deadline || now - lastMoved > kFlushStall) break;
      if (ucp_worker_progress(worker) != 0) lastMoved = now;
    }
    if (flushing != nullptr && !UCS_PTR_IS_ERR(flushing)) ucp_request_free(flushing);
  }
  ucp_request_param_t params{};
  params.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  params.flags = UCP_EP_CLOSE_FLAG_FORCE;
  ucs_status_ptr_t closing = ucp_ep_close_nbx(endpoint_, &params);
  endpoint_ = nullptr;
  while ((pending(closing) || pending(sendRequest_) || pending(recvRequest_)) &&
         std::chrono::steady_clock::now() < deadline) {
    ucp_worker_progress(worker);
  }
  for (void* request : {closing, sendRequest_, recvRequest_}) {
    if (request != nullptr && !UCS_PTR_IS_ERR(request)) ucp_request_free(request);
  }
  sendRequest_ = nullptr;
  recvRequest_ = nullptr;
}

}  // namespace cc::transport::ucx
