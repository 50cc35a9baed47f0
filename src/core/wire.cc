#include "core/wire.h"

#include <arpa/inet.h>

#include <charconv>
#include <cstring>

namespace cc::wire {

std::string toHex(std::span<const std::byte> bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string text;
  text.reserve(bytes.size() * 2);
  for (std::byte b : bytes) {
    text += kDigits[static_cast<unsigned>(b) >> 4];
    text += kDigits[static_cast<unsigned>(b) & 15];
  }
  return text;
}

Status fromHex(const std::string& text, std::span<std::byte> out) {
  if (text.size() != out.size() * 2) return remoteError("hex value of the wrong length");
  for (size_t i = 0; i < out.size(); ++i) {
    unsigned value = 0;
    auto [end, error] = std::from_chars(text.data() + 2 * i, text.data() + 2 * i + 2, value, 16);
    if (error != std::errc() || end != text.data() + 2 * i + 2) return remoteError("bad hex value");
    out[i] = static_cast<std::byte>(value);
  }
  return Status::ok();
}

void Writer::u16(uint16_t value) {
  for (int i = 0; i < 2; ++i) u8(static_cast<uint8_t>(value >> (8 * i)));
}
void Writer::u32(uint32_t value) {
  for (int i = 0; i < 4; ++i) u8(static_cast<uint8_t>(value >> (8 * i)));
}
void Writer::u64(uint64_t value) {
  for (int i = 0; i < 8; ++i) u8(static_cast<uint8_t>(value >> (8 * i)));
}
void Writer::string(const std::string& text) {
  u16(static_cast<uint16_t>(text.size()));
  raw(std::as_bytes(std::span(text.data(), text.size())));
}

// Address: u16 family (4 or 6), u16 port, 16 address bytes, u32 IPv6 scope.
void Writer::address(const SocketAddress& address) {
  std::array<std::byte, 16> raw16{};
  uint32_t scope = 0;
  if (address.family() == AF_INET) {
    u16(4);
    std::memcpy(raw16.data(), &reinterpret_cast<const sockaddr_in*>(&address.storage)->sin_addr, 4);
  } else if (address.family() == AF_INET6) {
    u16(6);
    auto* v6 = reinterpret_cast<const sockaddr_in6*>(&address.storage);
    std::memcpy(raw16.data(), &v6->sin6_addr, 16);
    scope = v6->sin6_scope_id;
  } else {
    u16(0);
  }
  u16(address.port());
  raw(raw16);
  u32(scope);
}

Status Reader::need(size_t count) const {
  if (count > remaining()) {
    return remoteError("malformed message: needs " + std::to_string(count) +
                       " more bytes at offset " + std::to_string(offset_) + ", has " +
                       std::to_string(remaining()));
  }
  return Status::ok();
}

Status Reader::u8(uint8_t& value) {
  CC_TRY(need(1));
  value = static_cast<uint8_t>(bytes_[offset_++]);
  return Status::ok();
}
Status Reader::u16(uint16_t& value) {
  CC_TRY(need(2));
  value = 0;
  for (int i = 0; i < 2; ++i)
    value |= static_cast<uint16_t>(static_cast<uint8_t>(bytes_[offset_++])) << (8 * i);
  return Status::ok();
}
Status Reader::u32(uint32_t& value) {
  CC_TRY(need(4));
  value = 0;
  for (int i = 0; i < 4; ++i)
    value |= static_cast<uint32_t>(static_cast<uint8_t>(bytes_[offset_++])) << (8 * i);
  return Status::ok();
}
Status Reader::u64(uint64_t& value) {
  CC_TRY(need(8));
  value = 0;
  for (int i = 0; i < 8; ++i)
    value |= static_cast<uint64_t>(static_cast<uint8_t>(bytes_[offset_++])) << (8 * i);
  return Status::ok();
}
Status Reader::raw(std::span<std::byte> out) {
  CC_TRY(need(out.size()));
  std::memcpy(out.data(), bytes_.data() + offset_, out.size());
  offset_ += out.size();
  return Status::ok();
}
Status Reader::string(std::string& text, size_t maxBytes) {
  uint16_t length = 0;
  CC_TRY(u16(length));
  if (length > maxBytes) {
    return remoteError("malformed message: string of " + std::to_string(length) +
                       " bytes exceeds the limit of " + std::to_string(maxBytes));
  }
  CC_TRY(need(length));
  text.assign(reinterpret_cast<const char*>(bytes_.data() + offset_), length);
  offset_ += length;
  return Status::ok();
}
Status Reader::address(SocketAddress& address) {
  uint16_t family = 0;
  uint16_t port = 0;
  std::array<std::byte, 16> raw16{};
  uint32_t scope = 0;
  CC_TRY(u16(family));
  CC_TRY(u16(port));
  CC_TRY(raw(raw16));
  CC_TRY(u32(scope));
  address = SocketAddress();
  if (family == 4) {
    auto* v4 = reinterpret_cast<sockaddr_in*>(&address.storage);
    v4->sin_family = AF_INET;
    std::memcpy(&v4->sin_addr, raw16.data(), 4);
    address.length = sizeof(sockaddr_in);
  } else if (family == 6) {
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&address.storage);
    v6->sin6_family = AF_INET6;
    std::memcpy(&v6->sin6_addr, raw16.data(), 16);
    v6->sin6_scope_id = scope;
    address.length = sizeof(sockaddr_in6);
  } else if (family != 0) {
    return remoteError("malformed message: address family " + std::to_string(family));
  }
  address.setPort(port);
  return Status::ok();
}
Status Reader::expectEnd() const {
  if (remaining() != 0) {
    return remoteError("malformed message: " + std::to_string(remaining()) + " trailing bytes");
  }
  return Status::ok();
}

namespace {

Status checkMagicAndVersion(Reader& reader) {
  uint32_t magic = 0;
  uint16_t version = 0;
  uint16_t reserved = 0;
  CC_TRY(reader.u32(magic));
  CC_TRY(reader.u16(version));
  CC_TRY(reader.u16(reserved));
  if (magic != kMagic) return remoteError("not a cc bootstrap peer (bad magic)");
  if (version != kVersion) {
    return remoteError("wire version " + std::to_string(version) + ", this build speaks " +
                       std::to_string(kVersion));
  }
  return Status::ok();
}

template <size_t N>
std::array<std::byte, N> toArray(const std::vector<std::byte>& bytes) {
  std::array<std::byte, N> out{};
  std::memcpy(out.data(), bytes.data(), N);
  return out;
}

void encodePeer(Writer& writer, const PeerInfo& peer) {
  writer.u32(static_cast<uint32_t>(peer.rank));
  writer.u32(peer.pid);
  writer.u64(peer.hostHash);
  writer.string(peer.hostName.substr(0, kMaxHostNameBytes));
  writer.address(peer.tcpAddress);
  writer.string(peer.unixName.substr(0, kMaxUnixNameBytes));
}

Status parsePeer(Reader& reader, PeerInfo& peer) {
  uint32_t rank = 0;
  CC_TRY(reader.u32(rank));
  peer.rank = static_cast<int32_t>(rank);
  CC_TRY(reader.u32(peer.pid));
  CC_TRY(reader.u64(peer.hostHash));
  CC_TRY(reader.string(peer.hostName, kMaxHostNameBytes));
  CC_TRY(reader.address(peer.tcpAddress));
  CC_TRY(reader.string(peer.unixName, kMaxUnixNameBytes));
  return Status::ok();
}

}  // namespace

std::array<std::byte, kChallengeBytes> encodeChallenge(const Challenge& challenge) {
  Writer writer;
  writer.u32(kMagic);
  writer.u16(kVersion);
  writer.u16(0);
  writer.raw(challenge.serverNonce);
  return toArray<kChallengeBytes>(writer.bytes());
}

std::array<std::byte, kResponseBytes> encodeResponse(const Response& response) {
  Writer writer;
  writer.u32(kMagic);
  writer.u16(kVersion);
  writer.u16(0);
  writer.u32(static_cast<uint32_t>(response.purpose));
  writer.u64(response.context);
  writer.raw(response.clientNonce);
  writer.raw(response.mac);
  return toArray<kResponseBytes>(writer.bytes());
}

std::array<std::byte, kFrameHeaderBytes> encodeFrameHeader(const FrameHeader& header) {
  Writer writer;
  writer.u32(header.length);
  writer.u32(static_cast<uint32_t>(header.type));
  return toArray<kFrameHeaderBytes>(writer.bytes());
}

std::vector<std::byte> encodeRegister(const RegisterMessage& message) {
  Writer writer;
  writer.u32(static_cast<uint32_t>(message.nranks));
  encodePeer(writer, message.self);
  return std::move(writer.bytes());
}

std::vector<std::byte> encodePeerTable(const std::vector<PeerInfo>& peers) {
  Writer writer;
  writer.u32(static_cast<uint32_t>(peers.size()));
  for (const PeerInfo& peer : peers) encodePeer(writer, peer);
  return std::move(writer.bytes());
}

std::vector<std::byte> encodeShmSetup(const ShmSetup& setup) {
  Writer writer;
  writer.u32(setup.slots);
  writer.u64(setup.slotBytes);
  writer.u64(setup.probeAddress);
  writer.u64(setup.probeValue);
  return std::move(writer.bytes());
}

std::vector<std::byte> encodeShmSetupReply(const ShmSetupReply& reply) {
  Writer writer;
  writer.u64(reply.probeAddress);
  writer.u64(reply.probeValue);
  writer.u8(reply.canReadYou);
  return std::move(writer.bytes());
}

void encodeUniqueId(const UniqueIdContents& contents, char (&out)[CC_UNIQUE_ID_BYTES]) {
  Writer writer;
  writer.u32(kMagic);
  writer.u16(kVersion);
  writer.u16(0);
  writer.address(contents.rootAddress);
  writer.raw(contents.secret);
  std::memset(out, 0, sizeof(out));
  std::memcpy(out, writer.bytes().data(), writer.bytes().size());
}

Result<Challenge> parseChallenge(std::span<const std::byte> bytes) {
  if (bytes.size() != kChallengeBytes) return remoteError("malformed challenge: wrong size");
  Reader reader(bytes);
  CC_TRY(checkMagicAndVersion(reader));
  Challenge challenge;
  CC_TRY(reader.raw(challenge.serverNonce));
  return challenge;
}

Result<Response> parseResponse(std::span<const std::byte> bytes) {
  if (bytes.size() != kResponseBytes) return remoteError("malformed response: wrong size");
  Reader reader(bytes);
  CC_TRY(checkMagicAndVersion(reader));
  Response response;
  uint32_t purpose = 0;
  CC_TRY(reader.u32(purpose));
  if (purpose < 1 || purpose > 3)
    return remoteError("malformed response: purpose " + std::to_string(purpose));
  response.purpose = static_cast<Purpose>(purpose);
  CC_TRY(reader.u64(response.context));
  CC_TRY(reader.raw(response.clientNonce));
  CC_TRY(reader.raw(response.mac));
  return response;
}

Result<FrameHeader> parseFrameHeader(std::span<const std::byte> bytes, uint32_t maxLength) {
  if (bytes.size() != kFrameHeaderBytes) return remoteError("malformed frame header: wrong size");
  Reader reader(bytes);
  FrameHeader header;
  uint32_t type = 0;
  CC_TRY(reader.u32(header.length));
  CC_TRY(reader.u32(type));
  if (type < 1 || type > 5)
    return remoteError("malformed frame: unknown type " + std::to_string(type));
  if (header.length > maxLength || header.length > kMaxFrameBytes) {
    return remoteError("frame of " + std::to_string(header.length) +
                       " bytes exceeds the limit of " +
                       std::to_string(std::min(maxLength, kMaxFrameBytes)));
  }
  header.type = static_cast<FrameType>(type);
  return header;
}

Result<RegisterMessage> parseRegister(std::span<const std::byte> bytes) {
  Reader reader(bytes);
  RegisterMessage message;
  uint32_t nranks = 0;
  CC_TRY(reader.u32(nranks));
  if (nranks < 1 || nranks > static_cast<uint32_t>(kMaxRanks)) {
    return remoteError("register: nranks " + std::to_string(nranks) + " out of range");
  }
  message.nranks = static_cast<int32_t>(nranks);
  CC_TRY(parsePeer(reader, message.self));
  if (message.self.rank < 0 || message.self.rank >= message.nranks) {
    return remoteError("register: rank " + std::to_string(message.self.rank) +
                       " out of range for " + std::to_string(nranks) + " ranks");
  }
  CC_TRY(reader.expectEnd());
  return message;
}

Result<std::vector<PeerInfo>> parsePeerTable(std::span<const std::byte> bytes, int expectedRanks) {
  Reader reader(bytes);
  uint32_t count = 0;
  CC_TRY(reader.u32(count));
  if (count != static_cast<uint32_t>(expectedRanks)) {
    return remoteError("peer table has " + std::to_string(count) + " ranks, expected " +
                       std::to_string(expectedRanks));
  }
  std::vector<PeerInfo> peers(count);
  for (uint32_t i = 0; i < count; ++i) {
    CC_TRY(parsePeer(reader, peers[i]));
    if (peers[i].rank != static_cast<int32_t>(i)) return remoteError("peer table out of order");
  }
  CC_TRY(reader.expectEnd());
  return peers;
}

Result<ShmSetup> parseShmSetup(std::span<const std::byte> bytes) {
  Reader reader(bytes);
  ShmSetup setup;
  CC_TRY(reader.u32(setup.slots));
  CC_TRY(reader.u64(setup.slotBytes));
  CC_TRY(reader.u64(setup.probeAddress));
  CC_TRY(reader.u64(setup.probeValue));
  CC_TRY(reader.expectEnd());
  if (setup.slots < 2 || setup.slots > 1024 || (setup.slots & (setup.slots - 1)) != 0) {
    return remoteError("shm setup: " + std::to_string(setup.slots) +
                       " slots (must be a power of two in [2, 1024])");
  }
  if (setup.slotBytes < 4096 || setup.slotBytes > (64u << 20) || setup.slotBytes % 64 != 0) {
    return remoteError("shm setup: slot of " + std::to_string(setup.slotBytes) + " bytes");
  }
  return setup;
}

Result<ShmSetupReply> parseShmSetupReply(std::span<const std::byte> bytes) {
  Reader reader(bytes);
  ShmSetupReply reply;
  CC_TRY(reader.u64(reply.probeAddress));
  CC_TRY(reader.u64(reply.probeValue));
  CC_TRY(reader.u8(reply.canReadYou));
  CC_TRY(reader.expectEnd());
  if (reply.canReadYou > 1) return remoteError("shm setup reply: bad flag");
  return reply;
}

Result<UniqueIdContents> parseUniqueId(std::span<const std::byte> bytes) {
  if (bytes.size() != CC_UNIQUE_ID_BYTES) return invalidArgument("unique id has the wrong size");
  Reader reader(bytes);
  Status header = checkMagicAndVersion(reader);
  if (!header.isOk())
    return invalidArgument("commId is not a ccUniqueId from ccGetUniqueId (" + header.message() +
                           ")");
  UniqueIdContents contents;
  Status address = reader.address(contents.rootAddress);
  if (!address.isOk() || contents.rootAddress.length == 0) {
    return invalidArgument("commId holds no valid root address");
  }
  CC_TRY(reader.raw(contents.secret));
  return contents;
}

}  // namespace cc::wire
