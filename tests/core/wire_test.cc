// The bootstrap's parsers: every message round-trips, and every malformed input (short,
// long, wrong magic, wrong version, lengths that lie) is an error, never a crash.
#include "core/wire.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

namespace cc::wire {
namespace {

PeerInfo samplePeer(int rank) {
  PeerInfo peer;
  peer.rank = rank;
  peer.pid = 4242;
  peer.hostHash = 0x1122334455667788ull;
  peer.hostName = "node-" + std::to_string(rank);
  auto address = resolveAddress("127.0.0.1", 5555);
  peer.tcpAddress = address.value();
  peer.unixName = "cc-abcdef";
  return peer;
}

TEST(Wire, RegisterRoundTrips) {
  RegisterMessage message{4, samplePeer(3)};
  auto parsed = parseRegister(encodeRegister(message));
  ASSERT_TRUE(parsed.isOk()) << parsed.status().message();
  EXPECT_EQ(parsed->nranks, 4);
  EXPECT_EQ(parsed->self.rank, 3);
  EXPECT_EQ(parsed->self.hostName, "node-3");
  EXPECT_EQ(parsed->self.tcpAddress.toString(), "127.0.0.1:5555");
  EXPECT_EQ(parsed->self.unixName, "cc-abcdef");
}

TEST(Wire, RegisterRejectsRankOutOfRange) {
  RegisterMessage message{2, samplePeer(5)};
  EXPECT_FALSE(parseRegister(encodeRegister(message)).isOk());
}

TEST(Wire, EveryTruncationOfARegisterIsAnError) {
  auto bytes = encodeRegister(RegisterMessage{4, samplePeer(1)});
  for (size_t length = 0; length < bytes.size(); ++length) {
    EXPECT_FALSE(parseRegister(std::span(bytes).first(length)).isOk()) << "length " << length;
  }
  bytes.push_back(std::byte{0});
  EXPECT_FALSE(parseRegister(bytes).isOk()) << "trailing byte accepted";
}

TEST(Wire, StringLengthThatLiesIsAnError) {
  auto bytes = encodeRegister(RegisterMessage{4, samplePeer(1)});
  // The host name's u16 length sits after nranks(4) rank(4) pid(4) hash(8).
  bytes[20] = std::byte{0xff};
  bytes[21] = std::byte{0xff};
  EXPECT_FALSE(parseRegister(bytes).isOk());
}

TEST(Wire, PeerTableRoundTripsAndChecksCountAndOrder) {
  std::vector<PeerInfo> peers = {samplePeer(0), samplePeer(1), samplePeer(2)};
  auto bytes = encodePeerTable(peers);
  auto parsed = parsePeerTable(bytes, 3);
  ASSERT_TRUE(parsed.isOk()) << parsed.status().message();
  EXPECT_EQ((*parsed)[2].hostName, "node-2");
  EXPECT_FALSE(parsePeerTable(bytes, 4).isOk());
  std::swap(peers[0], peers[1]);
  EXPECT_FALSE(parsePeerTable(encodePeerTable(peers), 3).isOk());
}

TEST(Wire, FrameHeaderEnforcesTheLimit) {
  auto ok = encodeFrameHeader({100, FrameType::kRegister});
  EXPECT_TRUE(parseFrameHeader(ok, 4096).isOk());
  auto huge = encodeFrameHeader({0xfffffff0u, FrameType::kRegister});
  EXPECT_FALSE(parseFrameHeader(huge, 4096).isOk());
  auto overLimit = encodeFrameHeader({4097, FrameType::kRegister});
  EXPECT_FALSE(parseFrameHeader(overLimit, 4096).isOk());
  auto badType = encodeFrameHeader({1, static_cast<FrameType>(77)});
  EXPECT_FALSE(parseFrameHeader(badType, 4096).isOk());
}

TEST(Wire, ChallengeChecksMagicAndVersion) {
  Challenge challenge;
  challenge.serverNonce[0] = std::byte{7};
  auto bytes = encodeChallenge(challenge);
  auto parsed = parseChallenge(bytes);
  ASSERT_TRUE(parsed.isOk());
  EXPECT_EQ(parsed->serverNonce[0], std::byte{7});
  auto badMagic = bytes;
  badMagic[0] = std::byte{0};
  EXPECT_FALSE(parseChallenge(badMagic).isOk());
  auto badVersion = bytes;
  badVersion[4] = std::byte{9};
  auto result = parseChallenge(badVersion);
  ASSERT_FALSE(result.isOk());
  EXPECT_NE(result.status().message().find("wire version"), std::string::npos);
}

TEST(Wire, ResponseRejectsUnknownPurpose) {
  Response response;
  response.purpose = Purpose::kPeerTcp;
  response.context = 99;
  auto bytes = encodeResponse(response);
  ASSERT_TRUE(parseResponse(bytes).isOk());
  bytes[8] = std::byte{42};
  EXPECT_FALSE(parseResponse(bytes).isOk());
}

TEST(Wire, UniqueIdRoundTripsIpv4AndIpv6) {
  for (const char* host : {"127.0.0.1", "::1"}) {
    UniqueIdContents id;
    id.rootAddress = resolveAddress(host, 1234).value();
    id.secret[5] = std::byte{9};
    char encoded[CC_UNIQUE_ID_BYTES];
    encodeUniqueId(id, encoded);
    auto parsed = parseUniqueId(std::as_bytes(std::span(encoded)));
    ASSERT_TRUE(parsed.isOk()) << host;
    EXPECT_EQ(parsed->rootAddress.toString(), id.rootAddress.toString());
    EXPECT_EQ(parsed->secret, id.secret);
  }
  char zeros[CC_UNIQUE_ID_BYTES] = {};
  EXPECT_FALSE(parseUniqueId(std::as_bytes(std::span(zeros))).isOk());
}

TEST(Wire, ShmSetupBoundsGeometry) {
  ShmSetup setup{8, 131072, 0x1000, 77};
  ASSERT_TRUE(parseShmSetup(encodeShmSetup(setup)).isOk());
  setup.slots = 1;
  EXPECT_FALSE(parseShmSetup(encodeShmSetup(setup)).isOk());
  setup.slots = 12;  // not a power of two: 32-bit slot counters would collide at the wrap
  EXPECT_FALSE(parseShmSetup(encodeShmSetup(setup)).isOk());
  setup.slots = 8;
  setup.slotBytes = 100;
  EXPECT_FALSE(parseShmSetup(encodeShmSetup(setup)).isOk());
  setup.slotBytes = 1ull << 40;
  EXPECT_FALSE(parseShmSetup(encodeShmSetup(setup)).isOk());
}

}  // namespace
}  // namespace cc::wire
