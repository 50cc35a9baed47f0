// Setting up a ucx channel over its control socket, once both sides have authenticated
// it (comm/connect.cc): each side sends its UCP worker address as one length-prefixed
// frame with a hard size limit, then creates its endpoint to the other's address.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/socket.h"
#include "transport/ucx/channel.h"

namespace cc::transport::ucx {

// The connecting side sends first, the accepting side answers. The control socket stays
// with the channel: its EOF is how a dead peer is noticed.
Result<std::unique_ptr<UcxChannel>> setupChannel(int peer, int selfRank,
                                                 const std::shared_ptr<UcxWorker>& worker,
                                                 FileDescriptor control, bool isConnector,
                                                 const Deadline& deadline);

// Waits until UCX has connected every endpoint of `channels` (a flush completes only
// then), so that no connection handshake is left for the first operation: a rank that
// is waiting must not find UCX still trying to reach a peer that does not progress.
// Every rank calls it after it has made all its channels.
Status waitUntilConnected(UcxWorker& worker, const std::vector<UcxChannel*>& channels,
                          const Deadline& deadline);

// The name of the local interface that holds `address` ("" if none does).
std::string interfaceNameOf(const SocketAddress& address);

}  // namespace cc::transport::ucx
