// One UCP context and worker per communicator: the UCX side of every ucx channel of that
// communicator, and the event descriptor that lets a waiting rank sleep in epoll.
//
// Per communicator rather than per process: a communicator's operations are serialised
// by its operation mutex, so its worker is only ever driven by one thread at a time and
// can run in UCS_THREAD_MODE_SINGLE; communicators on different threads never share
// UCX state; and a ccCommAbort or a failed peer tears down only what that communicator
// made. The price is one ucp_init per communicator (a few milliseconds).
//
// Endpoints are created with UCP_ERR_HANDLING_MODE_PEER, so a dead peer completes the
// operations in flight with an error instead of leaving them pending forever.
#pragma once

#include <ucp/api/ucp.h>

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace cc::transport::ucx {

// What an endpoint's error callback reports. The worker owns these, so that a callback
// that UCX delivers late never touches a channel that is gone.
struct EndpointState {
  int peer = -1;
  ucs_status_t error = UCS_OK;
};

struct WorkerOptions {
  // UCX_NET_DEVICES for this context when the user has not set it (empty: UCX's own
  // choice). connect.cc derives it from CC_SOCKET_IFNAME.
  std::string netDevices;
  // UCX's registration cache (UCX_RCACHE_ENABLE when the user has not set it). It only
  // pays with RDMA, and it installs UCX's memory hooks, which we saw deadlock now and
  // then in ucp_init of a freshly forked rank (ucm_event_handler_add waiting on a lock
  // that nobody holds any more); so it is off unless UCX found an RDMA transport.
  bool registrationCache = false;
};

class UcxWorker {
 public:
  static Result<std::shared_ptr<UcxWorker>> create(const WorkerOptions& options);
  ~UcxWorker();
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  ucp_worker_h handle() const { return worker_; }
  // This worker's address, to send to peers (bytes owned by the worker).
  std::span<const std::byte> address() const;
  // Readable when the worker has events (after arm()); lives in the communicator's epoll set.
  int eventFd() const { return eventFd_; }
  // Drives UCX; returns whether anything happened.
  bool progress() { return ucp_worker_progress(worker_) != 0; }
  // Arms the event fd before a sleep. False when events are already pending: progress
  // instead of sleeping.
  bool arm();
  // The RDMA transports (InfiniBand / RoCE verbs) UCX can use on this host, e.g.
  // "rc_mlx5/mlx5_0:1"; empty without an active port. Makes a UCP context just to ask.
  static Result<std::vector<std::string>> probeRdma();

  EndpointState* newEndpointState(int peer);

  // After an abort or a failure, endpoints close at once instead of flushing.
  void setForceClose() { forceClose_ = true; }
  bool forceClose() const { return forceClose_; }

 private:
  UcxWorker() = default;

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_address_t* address_ = nullptr;
  size_t addressBytes_ = 0;
  int eventFd_ = -1;
  std::vector<std::unique_ptr<EndpointState>> endpointStates_;
  bool forceClose_ = false;
};

// "what: UCX's message" for a failed UCX call.
Status ucxError(const std::string& what, ucs_status_t status);

}  // namespace cc::transport::ucx
