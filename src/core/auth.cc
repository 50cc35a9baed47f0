#include "core/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstring>
#include <string_view>

namespace cc::auth {
namespace {

wire::Mac computeMac(const wire::Secret& secret, std::string_view label, const wire::Nonce& first,
                     const wire::Nonce& second, uint32_t purpose, uint64_t context) {
  wire::Writer writer;
  writer.raw(std::as_bytes(std::span(label.data(), label.size())));
  writer.raw(first);
  writer.raw(second);
  writer.u32(purpose);
  writer.u64(context);
  wire::Mac mac{};
  unsigned int length = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(writer.bytes().data()), writer.bytes().size(),
       reinterpret_cast<unsigned char*>(mac.data()), &length);
  return mac;
}

bool macEqual(const wire::Mac& a, const wire::Mac& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace

Status serverHandshake(int fd, const wire::Secret& secret, wire::Purpose expected,
                       uint64_t& context, const Deadline& deadline) {
  wire::Challenge challenge;
  CC_TRY(randomBytes(challenge.serverNonce));
  CC_TRY(sendAll(fd, wire::encodeChallenge(challenge), deadline));

  std::array<std::byte, wire::kResponseBytes> bytes{};
  CC_TRY(recvAll(fd, bytes, deadline));
  CC_ASSIGN_OR_RETURN(wire::Response response, wire::parseResponse(bytes));
  wire::Mac expectedMac =
      computeMac(secret, "cc-client", challenge.serverNonce, response.clientNonce,
                 static_cast<uint32_t>(response.purpose), response.context);
  if (!macEqual(expectedMac, response.mac)) {
    return remoteError("authentication failed: the peer does not know this communicator's secret");
  }
  if (response.purpose != expected) {
    return remoteError("connection purpose " +
                       std::to_string(static_cast<uint32_t>(response.purpose)) + ", expected " +
                       std::to_string(static_cast<uint32_t>(expected)));
  }
  wire::Mac proof = computeMac(secret, "cc-server", response.clientNonce, challenge.serverNonce,
                               static_cast<uint32_t>(response.purpose), response.context);
  CC_TRY(sendAll(fd, proof, deadline));
  context = response.context;
  return Status::ok();
}

Status clientHandshake(int fd, const wire::Secret& secret, wire::Purpose purpose, uint64_t context,
                       const Deadline& deadline) {
  std::array<std::byte, wire::kChallengeBytes> bytes{};
  CC_TRY(recvAll(fd, bytes, deadline));
  CC_ASSIGN_OR_RETURN(wire::Challenge challenge, wire::parseChallenge(bytes));
  wire::Response response;
  response.purpose = purpose;
  response.context = context;
  CC_TRY(randomBytes(response.clientNonce));
  response.mac = computeMac(secret, "cc-client", challenge.serverNonce, response.clientNonce,
                            static_cast<uint32_t>(purpose), context);
  CC_TRY(sendAll(fd, wire::encodeResponse(response), deadline));

  wire::Mac proof{};
  CC_TRY(recvAll(fd, proof, deadline));
  wire::Mac expected = computeMac(secret, "cc-server", response.clientNonce, challenge.serverNonce,
                                  static_cast<uint32_t>(purpose), context);
  if (!macEqual(expected, proof)) {
    return remoteError(
        "authentication failed: the server does not know this communicator's secret");
  }
  return Status::ok();
}

void releaseThreadState() { OPENSSL_thread_stop(); }

Status sendFrame(int fd, wire::FrameType type, std::span<const std::byte> payload,
                 const Deadline& deadline) {
  if (payload.size() > wire::kMaxFrameBytes) return internalError("frame too large to send");
  wire::FrameHeader header{static_cast<uint32_t>(payload.size()), type};
  CC_TRY(sendAll(fd, wire::encodeFrameHeader(header), deadline));
  return sendAll(fd, payload, deadline);
}

Result<std::vector<std::byte>> recvFrame(int fd, wire::FrameType expected, uint32_t maxLength,
                                         const Deadline& deadline) {
  std::array<std::byte, wire::kFrameHeaderBytes> headerBytes{};
  CC_TRY(recvAll(fd, headerBytes, deadline));
  CC_ASSIGN_OR_RETURN(wire::FrameHeader header, wire::parseFrameHeader(headerBytes, maxLength));
  if (header.type != expected) {
    return remoteError("unexpected frame type " +
                       std::to_string(static_cast<uint32_t>(header.type)) + ", expected " +
                       std::to_string(static_cast<uint32_t>(expected)));
  }
  std::vector<std::byte> payload(header.length);
  CC_TRY(recvAll(fd, payload, deadline));
  return payload;
}

}  // namespace cc::auth
