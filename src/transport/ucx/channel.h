// The UCX channel between two ranks: a UCP endpoint on the communicator's worker, plus
// the authenticated TCP control socket that set it up.
//
// Tag matching rather than active messages: a channel is an ordered stream of messages
// whose receiver already knows the size and destination buffer, which is exactly what
// UCP's tag API does, and it lets UCX receive straight into the user's buffer (rendezvous
// for large messages) and keep unexpected messages itself. Active messages would make us
// queue early arrivals and copy them. The tag is the sender's rank with a full mask: one
// worker serves all of a communicator's peers, and UCP matches messages from one sender
// with one tag in the order they were sent, which is the channel's ordering.
//
// Progress is UCX's own (ucp_worker_progress). Before the executor sleeps, an idle
// progress call arms the worker's event fd, which is in the communicator's epoll set.
// A dead peer shows up three ways: its requests fail (the endpoint runs in
// UCP_ERR_HANDLING_MODE_PEER), the endpoint's error callback fires, or the control
// socket reaches EOF (checkPeer, and epoll wakes on it).
#pragma once

#include <ucp/api/ucp.h>

#include <memory>
#include <span>

#include "core/socket.h"
#include "transport/transport.h"
#include "transport/ucx/worker.h"

namespace cc::transport::ucx {

class UcxChannel final : public Channel {
 public:
  UcxChannel(int peer, int selfRank, std::shared_ptr<UcxWorker> worker, FileDescriptor control);
  ~UcxChannel() override;

  // Creates the endpoint to the peer's worker address (received over the control socket).
  Status connect(std::span<const std::byte> peerAddress);

  bool isSharedMemory() const override { return false; }
  const char* kind() const override { return "ucx"; }
  Result<Progress> progressSend(Transfer& transfer) override;
  Result<Progress> progressRecv(Transfer& transfer) override;
  Status checkPeer() override;

  int controlFd() const { return control_.get(); }
  // Starts a flush of the endpoint (null: already flushed; else a request to test and
  // free). setup.cc uses it to finish UCX's connection before the first operation.
  ucs_status_ptr_t startFlush();
  // Arms the worker's event fd before the executor sleeps on it.
  bool readyToSleep() override;
  // Cancels the posted receive and force-closes the endpoint at once (close()).
  void abandon() override;

 private:
  // Moves UCX forward (ucp_worker_progress).
  bool drive();
  Status requestFailed(const char* operation, ucs_status_t status) const;
  Status closedError() const;
  bool controlClosed() const;
  void close();

  int selfRank_;
  std::shared_ptr<UcxWorker> worker_;
  FileDescriptor control_;
  ucp_ep_h endpoint_ = nullptr;
  EndpointState* state_ = nullptr;  // owned by the worker: UCX may call back after we are gone
  void* sendRequest_ = nullptr;
  void* recvRequest_ = nullptr;
  ucp_tag_recv_info_t recvInfo_{};
};

}  // namespace cc::transport::ucx
