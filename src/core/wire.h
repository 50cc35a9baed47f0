// The bootstrap wire format: every byte that arrives from outside the process is parsed
// here, by functions that take a byte span and either return a value or say what was
// wrong. They never trust a length they read: every field is bounds-checked and every
// message has a hard size limit. fuzz/wire_fuzz.cc drives all of them.
//
// A connection starts with a challenge-response (see auth.h); after it, messages are
// frames: u32 length, u32 type, then `length` bytes. All integers are little-endian.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/socket.h"
#include "core/status.h"

namespace cc::wire {

inline constexpr uint32_t kMagic = 0x31424343;  // "CCB1" on the wire
inline constexpr uint16_t kVersion = 1;
inline constexpr size_t kNonceBytes = 16;
inline constexpr size_t kMacBytes = 32;
inline constexpr size_t kSecretBytes = 32;
inline constexpr uint32_t kMaxFrameBytes = 16u << 20;
inline constexpr size_t kMaxHostNameBytes = 255;
inline constexpr size_t kMaxUnixNameBytes = 100;
inline constexpr int kMaxRanks = 1 << 20;

using Secret = std::array<std::byte, kSecretBytes>;
using Nonce = std::array<std::byte, kNonceBytes>;
using Mac = std::array<std::byte, kMacBytes>;

// What a connection is for; part of the authenticated response so that a response
// captured for one purpose cannot be replayed for another.
enum class Purpose : uint32_t { kRootRegister = 1, kPeerTcp = 2, kPeerShm = 3 };

enum class FrameType : uint32_t {
  kRegister = 1,
  kPeerTable = 2,
  kShmSetup = 3,
  kShmSetupReply = 4,
  kUcxAddress = 5,  // a UCP worker address (opaque bytes), on a ucx channel's control socket
};
// UCP worker addresses are a few hundred bytes over tcp and shared memory, a few KiB
// with many RDMA devices.
inline constexpr uint32_t kMaxUcxAddressBytes = 64u << 10;

struct Challenge {
  Nonce serverNonce{};
};
inline constexpr size_t kChallengeBytes = 4 + 2 + 2 + kNonceBytes;

struct Response {
  Purpose purpose = Purpose::kRootRegister;
  uint64_t context = 0;  // purpose-specific: the sender's rank and socket index
  Nonce clientNonce{};
  Mac mac{};
};
inline constexpr size_t kResponseBytes = 4 + 2 + 2 + 4 + 8 + kNonceBytes + kMacBytes;

struct FrameHeader {
  uint32_t length = 0;
  FrameType type = FrameType::kRegister;
};
inline constexpr size_t kFrameHeaderBytes = 8;

// What every rank tells the others about itself at bootstrap.
struct PeerInfo {
  int32_t rank = -1;
  uint32_t pid = 0;
  uint64_t hostHash = 0;     // same value <=> same host (hostname, boot id, net namespace)
  std::string hostName;      // for messages
  SocketAddress tcpAddress;  // this rank's TCP listener
  std::string unixName;      // this rank's abstract Unix listener (shm setup)
};

struct RegisterMessage {
  int32_t nranks = 0;
  PeerInfo self;
};

// Shared-memory setup between two ranks of one host (sent with file descriptors).
struct ShmSetup {
  uint32_t slots = 0;
  uint64_t slotBytes = 0;
  uint64_t probeAddress = 0;  // where the sender keeps probeValue, to test process_vm_readv
  uint64_t probeValue = 0;
};
inline constexpr size_t kShmSetupBytes = 4 + 8 + 8 + 8;
struct ShmSetupReply {
  uint64_t probeAddress = 0;
  uint64_t probeValue = 0;
  uint8_t canReadYou = 0;  // the sender could read the peer's probe: single copy allowed
};
inline constexpr size_t kShmSetupReplyBytes = 8 + 8 + 1;

// The contents of a ccUniqueId.
struct UniqueIdContents {
  SocketAddress rootAddress;
  Secret secret{};
};

// Encoders.
std::array<std::byte, kChallengeBytes> encodeChallenge(const Challenge& challenge);
std::array<std::byte, kResponseBytes> encodeResponse(const Response& response);
std::array<std::byte, kFrameHeaderBytes> encodeFrameHeader(const FrameHeader& header);
std::vector<std::byte> encodeRegister(const RegisterMessage& message);
std::vector<std::byte> encodePeerTable(const std::vector<PeerInfo>& peers);
std::vector<std::byte> encodeShmSetup(const ShmSetup& setup);
std::vector<std::byte> encodeShmSetupReply(const ShmSetupReply& reply);
void encodeUniqueId(const UniqueIdContents& contents, char (&out)[CC_UNIQUE_ID_BYTES]);

// Parsers: the only way bytes from outside become values.
Result<Challenge> parseChallenge(std::span<const std::byte> bytes);
Result<Response> parseResponse(std::span<const std::byte> bytes);
Result<FrameHeader> parseFrameHeader(std::span<const std::byte> bytes, uint32_t maxLength);
Result<RegisterMessage> parseRegister(std::span<const std::byte> bytes);
Result<std::vector<PeerInfo>> parsePeerTable(std::span<const std::byte> bytes, int expectedRanks);
Result<ShmSetup> parseShmSetup(std::span<const std::byte> bytes);
Result<ShmSetupReply> parseShmSetupReply(std::span<const std::byte> bytes);
Result<UniqueIdContents> parseUniqueId(std::span<const std::byte> bytes);

// Lower-case hex, for ids that travel through text channels (PMI-1) and for names.
std::string toHex(std::span<const std::byte> bytes);
Status fromHex(const std::string& text, std::span<std::byte> out);

// Little-endian building blocks, shared with the transports' own small messages.
class Writer {
 public:
  void u8(uint8_t value) { bytes_.push_back(static_cast<std::byte>(value)); }
  void u16(uint16_t value);
  void u32(uint32_t value);
  void u64(uint64_t value);
  void raw(std::span<const std::byte> data) {
    bytes_.insert(bytes_.end(), data.begin(), data.end());
  }
  void string(const std::string& text);  // u16 length + bytes
  void address(const SocketAddress& address);
  std::vector<std::byte>& bytes() { return bytes_; }

 private:
  std::vector<std::byte> bytes_;
};

class Reader {
 public:
  explicit Reader(std::span<const std::byte> bytes) : bytes_(bytes) {}
  Status u8(uint8_t& value);
  Status u16(uint16_t& value);
  Status u32(uint32_t& value);
  Status u64(uint64_t& value);
  Status raw(std::span<std::byte> out);
  Status string(std::string& text, size_t maxBytes);
  Status address(SocketAddress& address);
  size_t remaining() const { return bytes_.size() - offset_; }
  Status expectEnd() const;

 private:
  Status need(size_t count) const;
  std::span<const std::byte> bytes_;
  size_t offset_ = 0;
};

}  // namespace cc::wire
