// Mutual challenge-response on a fresh connection, before any other byte is acted on.
//
//   server -> client   Challenge { magic, version, server nonce }
//   client -> server   Response  { purpose, context, client nonce,
//                                  HMAC-SHA256(secret, "cc-client" | nonces | purpose | context) }
//   server -> client   HMAC-SHA256(secret, "cc-server" | nonces)
//
// The MACs are compared in constant time. A connection that fails any step is closed by
// the caller and logged; nothing it sent is used.
#pragma once

#include <cstdint>
#include <vector>

#include "core/socket.h"
#include "core/wire.h"

namespace cc::auth {

// Server side. On success `context` holds the client's authenticated context value.
Status serverHandshake(int fd, const wire::Secret& secret, wire::Purpose expected,
                       uint64_t& context, const Deadline& deadline);
// Client side; fails if the server cannot prove it knows the secret either.
Status clientHandshake(int fd, const wire::Secret& secret, wire::Purpose purpose, uint64_t context,
                       const Deadline& deadline);

// Frees OpenSSL's per-thread state. Threads of ours that authenticate and are not joined
// (the root's, the listeners' handshake threads) call it before they end: otherwise a
// process that exits while such a thread is ending leaks that state.
void releaseThreadState();

// Frames on an authenticated connection.
Status sendFrame(int fd, wire::FrameType type, std::span<const std::byte> payload,
                 const Deadline& deadline);
Result<std::vector<std::byte>> recvFrame(int fd, wire::FrameType expected, uint32_t maxLength,
                                         const Deadline& deadline);

}  // namespace cc::auth
