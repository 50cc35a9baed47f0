#include "transport/ucx/worker.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace cc::transport::ucx {

Status ucxError(const std::string& what, ucs_status_t status) {
  std::string message = what + ": " + ucs_status_string(status);
  if (status == UCS_ERR_NO_MEMORY) return Status(ccSystemError, message);
  return internalError(message);
}

namespace {

// A UCP context from the UCX_* environment, with cc's defaults for what it leaves unset.
Result<ucp_context_h> makeContext(const WorkerOptions& options) {
  ucp_config_t* config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
  if (status != UCS_OK) return ucxError("ucp_config_read (UCX_* environment variables)", status);
  auto setDefault = [&](const char* name, const std::string& value) -> Status {
    if (value.empty() || std::getenv(("UCX_" + std::string(name)).c_str()) != nullptr) {
      return Status::ok();
    }
    ucs_status_t result = ucp_config_modify(config, name, value.c_str());
    if (result != UCS_OK) return ucxError("setting UCX_" + std::string(name) + "=" + value, result);
    return Status::ok();
  };
  Status defaults = setDefault("NET_DEVICES", options.netDevices);
  if (defaults.isOk()) defaults = setDefault("RCACHE_ENABLE", options.registrationCache ? "" : "n");
  if (!defaults.isOk()) {
    ucp_config_release(config);
    return defaults;
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 0;
  ucp_context_h context = nullptr;
  status = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (status != UCS_OK) return ucxError("ucp_init", status);
  return context;
}

}  // namespace

Result<std::shared_ptr<UcxWorker>> UcxWorker::create(const WorkerOptions& options) {
  std::shared_ptr<UcxWorker> self(new UcxWorker());
  CC_ASSIGN_OR_RETURN(self->context_, makeContext(options));
  ucs_status_t status = UCS_OK;

  ucp_worker_params_t workerParams{};
  workerParams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  workerParams.thread_mode = UCS_THREAD_MODE_SINGLE;
  status = ucp_worker_create(self->context_, &workerParams, &self->worker_);
  if (status != UCS_OK) return ucxError("ucp_worker_create", status);
  status = ucp_worker_get_address(self->worker_, &self->address_, &self->addressBytes_);
  if (status != UCS_OK) return ucxError("ucp_worker_get_address", status);
  status = ucp_worker_get_efd(self->worker_, &self->eventFd_);
  if (status != UCS_OK) return ucxError("ucp_worker_get_efd", status);
  return self;
}

UcxWorker::~UcxWorker() {
  if (address_ != nullptr) ucp_worker_release_address(worker_, address_);
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  if (context_ != nullptr) ucp_cleanup(context_);
}

std::span<const std::byte> UcxWorker::address() const {
  return {reinterpret_cast<const std::byte*>(address_), addressBytes_};
}

EndpointState* UcxWorker::newEndpointState(int peer) {
  endpointStates_.push_back(std::make_unique<EndpointState>());
  endpointStates_.back()->peer = peer;
  return endpointStates_.back().get();
}

bool UcxWorker::arm() {
  ucs_status_t status = ucp_worker_arm(worker_);
  // Any other error: report "pending" so that the caller polls rather than sleeps on an
  // event that may never come (the executor's slices still bound the wait).
  return status == UCS_OK;
}

Result<std::vector<std::string>> UcxWorker::probeRdma() {
  CC_ASSIGN_OR_RETURN(ucp_context_h context, makeContext(WorkerOptions{}));
  // UCP has no public call that lists a context's transports; its info dump does, one
  // "resource N : md M dev D flags -- tl/device" line each.
  std::vector<std::string> found;
  char* text = nullptr;
  size_t length = 0;
  FILE* stream = open_memstream(&text, &length);
  if (stream == nullptr) {
    ucp_cleanup(context);
    return systemError("open_memstream", errno);
  }
  ucp_context_print_info(context, stream);
  std::fclose(stream);
  ucp_cleanup(context);
  std::string dump(text, length);
  std::free(text);
  size_t position = 0;
  while (position < dump.size()) {
    size_t end = dump.find('\n', position);
    if (end == std::string::npos) end = dump.size();
    std::string line = dump.substr(position, end - position);
    position = end + 1;
    if (line.find("resource") == std::string::npos) continue;
    size_t marker = line.find("-- ");
    if (marker == std::string::npos) continue;
    std::string resource = line.substr(marker + 3);
    while (!resource.empty() && (resource.back() == ' ' || resource.back() == '\r'))
      resource.pop_back();
    // Verbs-based transports: reliable/dynamically connected/unreliable datagram, on
    // InfiniBand or RoCE, through libibverbs or mlx5 direct verbs.
    if (resource.rfind("rc_", 0) == 0 || resource.rfind("dc_", 0) == 0 ||
        resource.rfind("ud_", 0) == 0) {
      found.push_back(resource);
    }
  }
  return found;
}

}  // namespace cc::transport::ucx
