// The bootstrap lets no one in: strangers that connect to the root and send garbage,
// nothing, a forged response, or (knowing the secret) a huge length are dropped, and the
// job completes. Also: the challenge-response itself, both ways.
#include <cc/cc.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "core/auth.h"
#include "core/wire.h"
#include "support/multi_rank.h"

namespace cc::testing {
namespace {

wire::UniqueIdContents contentsOf(const ccUniqueId& id) {
  return wire::parseUniqueId(std::as_bytes(std::span(id.internal))).value();
}

TEST(Bootstrap, StrangersAreDroppedAndTheJobCompletes) {
  runRanks(
      3,
      [](RankContext& context) {
        std::vector<FileDescriptor> strangers;
        if (context.rank == 0) {
          wire::UniqueIdContents id = contentsOf(context.id);
          Deadline deadline = Deadline::afterMs(5000);
          // 1. Garbage.
          auto garbage = connectTcp(id.rootAddress, deadline);
          ASSERT_TRUE(garbage.isOk());
          std::vector<std::byte> junk(200, std::byte{0x5a});
          (void)sendAll(garbage->get(), junk, deadline);
          strangers.push_back(std::move(garbage).value());
          // 2. Silence: connect and never speak.
          auto silent = connectTcp(id.rootAddress, deadline);
          ASSERT_TRUE(silent.isOk());
          strangers.push_back(std::move(silent).value());
          // 3. A well-formed response with a forged MAC.
          auto forged = connectTcp(id.rootAddress, deadline);
          ASSERT_TRUE(forged.isOk());
          std::array<std::byte, wire::kChallengeBytes> challenge{};
          ASSERT_TRUE(recvAll(forged->get(), challenge, deadline).isOk());
          wire::Response response;
          response.purpose = wire::Purpose::kRootRegister;
          (void)sendAll(forged->get(), wire::encodeResponse(response), deadline);
          strangers.push_back(std::move(forged).value());
          // 4. Knows the secret, then announces a frame of almost 4 GiB.
          auto huge = connectTcp(id.rootAddress, deadline);
          ASSERT_TRUE(huge.isOk());
          ASSERT_TRUE(auth::clientHandshake(huge->get(), id.secret, wire::Purpose::kRootRegister, 0,
                                            deadline)
                          .isOk());
          (void)sendAll(huge->get(),
                        wire::encodeFrameHeader({0xfffffff0u, wire::FrameType::kRegister}),
                        deadline);
          strangers.push_back(std::move(huge).value());
        }
        ccComm_t comm = context.initComm();
        ASSERT_NE(comm, nullptr);
        CC_ASSERT_OK(ccBarrier(comm, nullptr));
        CC_ASSERT_OK(ccCommDestroy(comm));
      },
      [] {
        MultiRankOptions options;
        options.timeoutSeconds = 30;
        return options;
      }());
}

// A rank that registers with the root and then dies can never join; the ranks waiting
// for the table must hear so at once, not at CC_TIMEOUT_MS (5 minutes by default).
TEST(Bootstrap, ARankThatDiesAfterRegisteringFailsTheOthersAtOnce) {
  runRanks(2, [](RankContext& context) {
    std::thread impostor;
    if (context.rank == 0) {
      // Plays rank 3 of 4 (rank 2 never comes): registers, then its process "dies".
      impostor = std::thread([id = contentsOf(context.id)] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        Deadline deadline = Deadline::afterMs(5000);
        auto fd = connectTcp(id.rootAddress, deadline);
        ASSERT_TRUE(fd.isOk());
        ASSERT_TRUE(
            auth::clientHandshake(fd->get(), id.secret, wire::Purpose::kRootRegister, 3, deadline)
                .isOk());
        wire::RegisterMessage message;
        message.nranks = 4;
        message.self.rank = 3;
        message.self.hostName = "impostor";
        ASSERT_TRUE(auth::sendFrame(fd->get(), wire::FrameType::kRegister,
                                    wire::encodeRegister(message), deadline)
                        .isOk());
      });
    }
    auto start = std::chrono::steady_clock::now();
    ccComm_t comm = nullptr;
    ccResult_t result = ccCommInitRank(&comm, 4, context.id, context.rank);
    double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_NE(result, ccSuccess);
    EXPECT_LT(elapsed, 3.0) << "waited " << elapsed << " s for a rank that had died";
    if (impostor.joinable()) impostor.join();
  });
}

// A client with the wrong secret is refused, and a server with the wrong secret cannot
// fool a client either.
TEST(Bootstrap, ChallengeResponseNeedsTheSameSecretOnBothSides) {
  for (bool sameSecret : {true, false}) {
    int pair[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
    FileDescriptor serverEnd(pair[0]);
    FileDescriptor clientEnd(pair[1]);
    wire::Secret serverSecret{};
    wire::Secret clientSecret{};
    serverSecret[0] = std::byte{1};
    clientSecret[0] = sameSecret ? std::byte{1} : std::byte{2};
    Status serverStatus;
    uint64_t context = 0;
    std::thread server([&] {
      serverStatus = auth::serverHandshake(serverEnd.get(), serverSecret, wire::Purpose::kPeerTcp,
                                           context, Deadline::afterMs(2000));
      if (!serverStatus.isOk()) serverEnd.reset();  // as the real server does: drop
    });
    Status clientStatus = auth::clientHandshake(
        clientEnd.get(), clientSecret, wire::Purpose::kPeerTcp, 77, Deadline::afterMs(2000));
    server.join();
    EXPECT_EQ(serverStatus.isOk(), sameSecret) << serverStatus.message();
    EXPECT_EQ(clientStatus.isOk(), sameSecret) << clientStatus.message();
    if (sameSecret) {
      EXPECT_EQ(context, 77u);
    }
  }
}

TEST(Bootstrap, PurposeIsAuthenticated) {
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
  FileDescriptor serverEnd(pair[0]);
  FileDescriptor clientEnd(pair[1]);
  wire::Secret secret{};
  Status serverStatus;
  std::thread server([&] {
    uint64_t context = 0;
    serverStatus = auth::serverHandshake(serverEnd.get(), secret, wire::Purpose::kRootRegister,
                                         context, Deadline::afterMs(2000));
    serverEnd.reset();
  });
  (void)auth::clientHandshake(clientEnd.get(), secret, wire::Purpose::kPeerShm, 0,
                              Deadline::afterMs(2000));
  server.join();
  EXPECT_FALSE(serverStatus.isOk());
}

}  // namespace
}  // namespace cc::testing
