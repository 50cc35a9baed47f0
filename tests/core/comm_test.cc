// Communicators: barrier at every size, split, ranks as threads (ccCommInitAll), the
// torchrun-style launcher environment, the trace file, and the one wait (comm/wait.h):
// when it yields, and that its timeout counts from the last progress.
#include <cc/cc.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/wait.h"
#include "core/config.h"
#include "core/trace.h"
#include "core/wire.h"
#include "support/multi_rank.h"

namespace cc::testing {
namespace {

TEST(Communicator, BarrierAndQueriesAtEverySizeUpToEight) {
  for (int nranks = 1; nranks <= 8; ++nranks) {
    runRanks(nranks, [](RankContext& context) {
      ccComm_t comm = context.initComm();
      ASSERT_NE(comm, nullptr);
      int count = 0;
      int rank = -1;
      CC_ASSERT_OK(ccCommCount(comm, &count));
      CC_ASSERT_OK(ccCommUserRank(comm, &rank));
      EXPECT_EQ(count, context.nranks);
      EXPECT_EQ(rank, context.rank);
      for (int i = 0; i < 20; ++i) CC_ASSERT_OK(ccBarrier(comm, nullptr));
      CC_ASSERT_OK(ccCommDestroy(comm));
    });
  }
}

// The barrier really waits: no rank leaves before the last one arrives.
TEST(Communicator, BarrierWaitsForTheLastRank) {
  runRanks(4, [](RankContext& context) {
    ccComm_t comm = context.initComm();
    ASSERT_NE(comm, nullptr);
    CC_ASSERT_OK(ccBarrier(comm, nullptr));
    auto start = std::chrono::steady_clock::now();
    if (context.rank == 3) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    CC_ASSERT_OK(ccBarrier(comm, nullptr));
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_GE(waited, 0.29) << "rank " << context.rank << " left the barrier early";
    CC_ASSERT_OK(ccCommDestroy(comm));
  });
}

// A spinning wait yields its CPU only when CC_SPIN_YIELD says so or, by default, when the
// ranks on this host outnumber its usable CPUs (a busy thread given the core by a yield
// keeps it for the rest of its slice).
TEST(Wait, YieldsOnlyWhenRanksOutnumberCpus) {
  unsetenv("CC_SPIN_YIELD");
  unsetenv("CC_SPIN_US");
  Result<Config> defaults = Config::fromEnvironment();
  ASSERT_TRUE(defaults.isOk());
  EXPECT_EQ(defaults->spinYield, -1);
  EXPECT_EQ(defaults->spinMicros, -1) << "CC_SPIN_US is auto by default";
  setenv("CC_SPIN_US", "auto", 1);
  ASSERT_TRUE(Config::fromEnvironment().isOk());
  EXPECT_EQ(Config::fromEnvironment()->spinMicros, -1);
  setenv("CC_SPIN_US", "-2", 1);
  ASSERT_FALSE(Config::fromEnvironment().isOk());
  EXPECT_NE(Config::fromEnvironment().status().message().find("CC_SPIN_US"), std::string::npos);
  unsetenv("CC_SPIN_US");
  setenv("CC_SPIN_YIELD", "auto", 1);
  ASSERT_TRUE(Config::fromEnvironment().isOk());
  EXPECT_EQ(Config::fromEnvironment()->spinYield, -1);
  setenv("CC_SPIN_YIELD", "2", 1);
  Result<Config> bad = Config::fromEnvironment();
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().code(), ccInvalidArgument);
  EXPECT_NE(bad.status().message().find("CC_SPIN_YIELD"), std::string::npos)
      << bad.status().message();
  unsetenv("CC_SPIN_YIELD");

  Config config = *defaults;
  ASSERT_GE(comm::usableCpus(), 1);
  comm::noteRanksOnHost(comm::usableCpus());
  EXPECT_FALSE(comm::spinShouldYield(config)) << "as many ranks as CPUs";
  config.spinYield = 1;
  EXPECT_TRUE(comm::spinShouldYield(config));
  config.spinYield = -1;
  comm::noteRanksOnHost(comm::usableCpus() + 1);
  EXPECT_TRUE(comm::spinShouldYield(config)) << "more ranks than CPUs";
  comm::noteRanksOnHost(1);  // a smaller communicator later does not undo it
  EXPECT_TRUE(comm::spinShouldYield(config));
  config.spinYield = 0;
  EXPECT_FALSE(comm::spinShouldYield(config));
}

// CC_TIMEOUT_MS counts from the last progress, in the direct collectives as in the
// executor: with direct, rank 1 arrives 0.6 s late and rank 2 1.2 s late, more than the
// 1 s timeout after the start of rank 0's wait but never 1 s after the last arrival, so
// the call succeeds; a rank that then stays away 2.5 s is a timeout for the others, with
// direct and with ring.
TEST(Wait, TimeoutCountsFromTheLastProgress) {
  for (const char* algorithm : {"direct", "ring"}) {
    MultiRankOptions options;
    options.env["CC_TIMEOUT_MS"] = "1000";
    options.env["CC_ALGO"] = algorithm;
    options.timeoutSeconds = 60;
    runRanks(
        3,
        [&](RankContext& context) {
          ccComm_t comm = context.initComm();
          ASSERT_NE(comm, nullptr);
          std::vector<float> data(1024, static_cast<float>(context.rank + 1));
          // The ring's steps see no progress from a late rank further round the ring,
          // so there every rank arrives within the timeout.
          int lateMs = std::string(algorithm) == "direct" ? 600 : 300;
          std::this_thread::sleep_for(std::chrono::milliseconds(lateMs * context.rank));
          SCOPED_TRACE(algorithm);
          CC_ASSERT_OK(
              ccAllReduce(data.data(), data.data(), data.size(), ccFloat32, ccSum, comm, nullptr));
          for (float value : data) ASSERT_EQ(value, 6.0f);
          CC_ASSERT_OK(ccBarrier(comm, nullptr));
          if (context.rank == 2) std::this_thread::sleep_for(std::chrono::milliseconds(2500));
          auto start = std::chrono::steady_clock::now();
          ccResult_t late =
              ccAllReduce(data.data(), data.data(), data.size(), ccFloat32, ccSum, comm, nullptr);
          if (late == ccSuccess) {
            for (float value : data) ASSERT_EQ(value, 18.0f);
          }
          double waited =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          if (context.rank != 2) {
            EXPECT_EQ(late, ccTimeout) << algorithm << ": " << ccGetLastError(comm);
            EXPECT_GE(waited, 0.99) << algorithm;
            EXPECT_LT(waited, 2.4) << algorithm;
          }
          // Rank 2 may still succeed: with direct the others published their data before
          // they gave up, and one-shot reads it from their staging without waiting.
          (void)ccCommAbort(comm);
        },
        options);
  }
}

// ccCommInitRankConfig's timeout replaces CC_TIMEOUT_MS for this communicator and its
// splits: a receive that no one answers fails with ccTimeout after it, not after the
// environment's five minutes.
TEST(Communicator, ConfigTimeoutOverridesTheEnvironmentAndIsInherited) {
  runRanks(2, [](RankContext& context) {
    ccConfig_t config = CC_CONFIG_INITIALIZER;
    config.timeoutMs = 400;
    ccComm_t comm = nullptr;
    CC_ASSERT_OK(ccCommInitRankConfig(&comm, context.nranks, context.id, context.rank, &config));
    ccComm_t child = nullptr;
    CC_ASSERT_OK(ccCommSplit(comm, 0, context.rank, &child));
    for (ccComm_t target : {comm, child}) {
      if (context.rank == 0) {
        float value = 0;
        auto start = std::chrono::steady_clock::now();
        EXPECT_EQ(ccRecv(&value, 1, ccFloat32, 1, target, nullptr), ccTimeout);
        double waited =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        EXPECT_GE(waited, 0.39);
        EXPECT_LT(waited, 60.0) << "the environment's timeout applied, not the config's";
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(1200));
      }
    }
    ccCommAbort(child);
    ccCommAbort(comm);
  });
}

TEST(Communicator, ConfigIsChecked) {
  ccUniqueId id;
  CC_ASSERT_OK(ccGetUniqueId(&id));
  ccComm_t comm = nullptr;
  ccConfig_t config = CC_CONFIG_INITIALIZER;
  config.size = 3;
  EXPECT_EQ(ccCommInitRankConfig(&comm, 1, id, 0, &config), ccInvalidArgument);
  EXPECT_NE(std::string(ccGetLastError(nullptr)).find("config->size"), std::string::npos);
  config = CC_CONFIG_INITIALIZER;
  config.timeoutMs = 0;
  EXPECT_EQ(ccCommInitRankConfig(&comm, 1, id, 0, &config), ccInvalidArgument);
  EXPECT_NE(std::string(ccGetLastError(nullptr)).find("timeoutMs"), std::string::npos);
  config = CC_CONFIG_INITIALIZER;
  CC_ASSERT_OK(ccCommInitRankConfig(&comm, 1, id, 0, &config));
  CC_ASSERT_OK(ccCommDestroy(comm));
  // The unique id's root takes the same settings.
  config.timeoutMs = -5;
  EXPECT_EQ(ccGetUniqueIdConfig(&id, &config), ccInvalidArgument);
  EXPECT_NE(std::string(ccGetLastError(nullptr)).find("ccGetUniqueIdConfig"), std::string::npos);
  config.timeoutMs = 60000;
  CC_ASSERT_OK(ccGetUniqueIdConfig(&id, &config));
  CC_ASSERT_OK(ccCommInitRankConfig(&comm, 1, id, 0, &config));
  CC_ASSERT_OK(ccCommDestroy(comm));
}

TEST(Communicator, SplitByColorOrdersByKey) {
  runRanks(6, [](RankContext& context) {
    ccComm_t comm = context.initComm();
    ASSERT_NE(comm, nullptr);
    int color = context.rank % 2;
    int key = -context.rank;  // reverses the order within each color
    ccComm_t child = nullptr;
    CC_ASSERT_OK(ccCommSplit(comm, color, key, &child));
    ASSERT_NE(child, nullptr);
    int count = 0;
    int rank = -1;
    CC_ASSERT_OK(ccCommCount(child, &count));
    CC_ASSERT_OK(ccCommUserRank(child, &rank));
    EXPECT_EQ(count, 3);
    EXPECT_EQ(rank, 2 - context.rank / 2);
    // The child works: ring exchange of parent ranks.
    int right = (rank + 1) % count;
    int left = (rank + count - 1) % count;
    int mine = context.rank;
    int got = -1;
    CC_ASSERT_OK(ccGroupStart());
    CC_ASSERT_OK(ccSend(&mine, 1, ccInt32, right, child, nullptr));
    CC_ASSERT_OK(ccRecv(&got, 1, ccInt32, left, child, nullptr));
    CC_ASSERT_OK(ccGroupEnd());
    // Left neighbour in the child (keys reversed) is the parent rank two above, cyclically.
    int expectedParentOfLeft = color + 2 * ((context.rank / 2 + 1) % 3);
    EXPECT_EQ(got, expectedParentOfLeft);
    ccComm_t none = reinterpret_cast<ccComm_t>(0x1);
    CC_ASSERT_OK(ccCommSplit(comm, context.rank == 0 ? 0 : CC_SPLIT_NOCOLOR, 0, &none));
    if (context.rank == 0) {
      ASSERT_NE(none, nullptr);
      CC_ASSERT_OK(ccCommDestroy(none));
    } else {
      EXPECT_EQ(none, nullptr);
    }
    CC_ASSERT_OK(ccCommDestroy(child));
    CC_ASSERT_OK(ccCommDestroy(comm));
  });
}

TEST(Communicator, InitAllMakesRanksAsThreads) {
  const int n = 4;
  ccComm_t comms[n] = {};
  ASSERT_EQ(ccCommInitAll(comms, n, nullptr), ccSuccess) << ccGetLastError(nullptr);
  std::vector<int> received(n, -1);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      int mine = 100 + rank;
      EXPECT_EQ(ccGroupStart(), ccSuccess);
      EXPECT_EQ(ccSend(&mine, 1, ccInt32, (rank + 1) % n, comms[rank], nullptr), ccSuccess);
      EXPECT_EQ(ccRecv(&received[static_cast<size_t>(rank)], 1, ccInt32, (rank + n - 1) % n,
                       comms[rank], nullptr),
                ccSuccess);
      EXPECT_EQ(ccGroupEnd(), ccSuccess) << ccGetLastError(comms[rank]);
      EXPECT_EQ(ccBarrier(comms[rank], nullptr), ccSuccess);
    });
  }
  for (auto& thread : threads) thread.join();
  for (int rank = 0; rank < n; ++rank) {
    EXPECT_EQ(received[static_cast<size_t>(rank)], 100 + (rank + n - 1) % n);
    EXPECT_EQ(ccCommDestroy(comms[rank]), ccSuccess);
  }
}

// One thread drives every rank's communicator in one group, as NCCL users do with
// ncclCommInitAll.
TEST(Communicator, OneThreadDrivesAllRanksInOneGroup) {
  const int n = 3;
  ccComm_t comms[n] = {};
  ASSERT_EQ(ccCommInitAll(comms, n, nullptr), ccSuccess) << ccGetLastError(nullptr);
  std::vector<int> in(n, -1);
  std::vector<int> out = {7, 8, 9};
  ASSERT_EQ(ccGroupStart(), ccSuccess);
  for (int rank = 0; rank < n; ++rank) {
    ASSERT_EQ(
        ccSend(&out[static_cast<size_t>(rank)], 1, ccInt32, (rank + 1) % n, comms[rank], nullptr),
        ccSuccess);
    ASSERT_EQ(ccRecv(&in[static_cast<size_t>(rank)], 1, ccInt32, (rank + n - 1) % n, comms[rank],
                     nullptr),
              ccSuccess);
  }
  ASSERT_EQ(ccGroupEnd(), ccSuccess) << ccGetLastError(nullptr);
  for (int rank = 0; rank < n; ++rank) {
    EXPECT_EQ(in[static_cast<size_t>(rank)], out[static_cast<size_t>((rank + n - 1) % n)]);
    EXPECT_EQ(ccCommDestroy(comms[rank]), ccSuccess);
  }
}

int freePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

// ccCommInitFromEnv in the environment the caller set up gives this rank and size, and
// the communicator works.
void expectInitFromEnvGives(int expectedRank, int expectedSize) {
  ccComm_t comm = nullptr;
  CC_ASSERT_OK(ccCommInitFromEnv(&comm));
  int rank = -1;
  int count = 0;
  CC_ASSERT_OK(ccCommUserRank(comm, &rank));
  CC_ASSERT_OK(ccCommCount(comm, &count));
  EXPECT_EQ(rank, expectedRank);
  EXPECT_EQ(count, expectedSize);
  CC_ASSERT_OK(ccBarrier(comm, nullptr));
  CC_ASSERT_OK(ccCommDestroy(comm));
}

TEST(Launcher, TorchrunStyleEnvironment) {
  int port = freePort();
  runRanks(3, [port](RankContext& context) {
    setenv("RANK", std::to_string(context.rank).c_str(), 1);
    setenv("WORLD_SIZE", "3", 1);
    setenv("LOCAL_RANK", std::to_string(context.rank).c_str(), 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    setenv("CC_BOOTSTRAP_SECRET", "test-secret", 1);
    unsetenv("PMIX_RANK");
    unsetenv("PMI_FD");
    expectInitFromEnvGives(context.rank, 3);
  });
}

// A minimal PMI-1 server, as MPICH's Hydra runs one: each rank talks to it over the
// descriptor in PMI_FD with "cmd=..." lines. It runs in its own process, so that the
// test process stays single-threaded when it forks the ranks.
class FakePmiServer {
 public:
  // waitForFinalize: serve until every rank has finalized too, and exit 0 only if each rank
  // sent one init and one finalize (wait() returns the exit status).
  explicit FakePmiServer(int nranks, bool waitForFinalize = false)
      : nranks_(nranks), waitForFinalize_(waitForFinalize) {
    for (int rank = 0; rank < nranks; ++rank) {
      int pair[2];
      EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
      serverEnds_.push_back(pair[0]);
      rankEnds_.push_back(pair[1]);
    }
    server_ = fork();
    if (server_ == 0) {
      serve();
      _exit(0);
    }
    for (int fd : serverEnds_) close(fd);
  }
  ~FakePmiServer() {
    if (server_ > 0) {
      kill(server_, SIGKILL);
      waitpid(server_, nullptr, 0);
    }
    for (int fd : rankEnds_) close(fd);
  }
  int wait() {
    int status = 0;
    waitpid(server_, &status, 0);
    server_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  }
  int rankEnd(int rank) const { return rankEnds_[static_cast<size_t>(rank)]; }

 private:
  static std::string field(const std::string& line, const std::string& name) {
    size_t at = line.find(name + "=");
    if (at == std::string::npos) return "";
    size_t end = line.find(' ', at);
    return line.substr(at + name.size() + 1,
                       end == std::string::npos ? std::string::npos : end - at - name.size() - 1);
  }
  void reply(int rank, const std::string& text) {
    std::string line = text + "\n";
    ssize_t ignored = write(serverEnds_[static_cast<size_t>(rank)], line.data(), line.size());
    (void)ignored;
  }
  // Serves until every rank but 0 has fetched the id (and, waiting for it, every rank has
  // finalized), or a minute passes.
  void serve() {
    std::vector<std::string> buffers(static_cast<size_t>(nranks_));
    std::map<std::string, std::string> store;
    std::vector<int> inits(static_cast<size_t>(nranks_)), finalizes(inits);
    int inBarrier = 0;
    int gets = 0, finalized = 0;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while ((gets < nranks_ - 1 || (waitForFinalize_ && finalized < nranks_)) &&
           std::chrono::steady_clock::now() < deadline) {
      for (int rank = 0; rank < nranks_; ++rank) {
        char chunk[4096];
        ssize_t n =
            recv(serverEnds_[static_cast<size_t>(rank)], chunk, sizeof(chunk), MSG_DONTWAIT);
        if (n <= 0) continue;
        std::string& buffer = buffers[static_cast<size_t>(rank)];
        buffer.append(chunk, static_cast<size_t>(n));
        size_t newline;
        while ((newline = buffer.find('\n')) != std::string::npos) {
          std::string line = buffer.substr(0, newline);
          buffer.erase(0, newline + 1);
          std::string cmd = field(line, "cmd");
          if (cmd == "init") {
            reply(rank, "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0");
            ++inits[static_cast<size_t>(rank)];
          }
          if (cmd == "finalize") {
            reply(rank, "cmd=finalize_ack");
            ++finalizes[static_cast<size_t>(rank)];
            ++finalized;
          }
          if (cmd == "get_my_kvsname") reply(rank, "cmd=my_kvsname kvsname=kvs_test_0");
          if (cmd == "put") {
            store[field(line, "key")] = field(line, "value");
            reply(rank, "cmd=put_result rc=0");
          }
          if (cmd == "get") {
            reply(rank, "cmd=get_result rc=0 value=" + store[field(line, "key")]);
            ++gets;
          }
          if (cmd == "barrier_in" && ++inBarrier == nranks_) {
            for (int r = 0; r < nranks_; ++r) reply(r, "cmd=barrier_out");
            inBarrier = 0;
          }
        }
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (!waitForFinalize_) return;
    for (int rank = 0; rank < nranks_; ++rank) {
      if (inits[static_cast<size_t>(rank)] != 1 || finalizes[static_cast<size_t>(rank)] != 1) {
        std::fprintf(stderr, "fake PMI server: rank %d sent %d inits and %d finalizes\n", rank,
                     inits[static_cast<size_t>(rank)], finalizes[static_cast<size_t>(rank)]);
        _exit(1);
      }
    }
  }

  int nranks_;
  bool waitForFinalize_;
  std::vector<int> serverEnds_;
  std::vector<int> rankEnds_;
  pid_t server_ = -1;
};

TEST(Launcher, MpichPmi1Protocol) {
  const int n = 3;
  FakePmiServer server(n);
  runRanks(n, [&server, n](RankContext& context) {
    for (const char* name : {"PMIX_RANK", "PMIX_NAMESPACE", "RANK", "WORLD_SIZE"}) unsetenv(name);
    setenv("PMI_FD", std::to_string(server.rankEnd(context.rank)).c_str(), 1);
    setenv("PMI_RANK", std::to_string(context.rank).c_str(), 1);
    setenv("PMI_SIZE", std::to_string(n).c_str(), 1);
    expectInitFromEnvGives(context.rank, n);
  });
}

// Hydra kills a job whose process closes its PMI connection without the finalize handshake,
// even after exit(0): a process that exits normally finalizes its session once, however
// many communicators it made from the environment, after one init.
TEST(Launcher, MpichPmi1SessionIsFinalizedOnceAtExit) {
  const int n = 2;
  FakePmiServer server(n, /*waitForFinalize=*/true);
  std::vector<pid_t> children;
  for (int rank = 0; rank < n; ++rank) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      for (const char* name : {"PMIX_RANK", "PMIX_NAMESPACE", "RANK", "WORLD_SIZE"}) unsetenv(name);
      setenv("PMI_FD", std::to_string(server.rankEnd(rank)).c_str(), 1);
      setenv("PMI_RANK", std::to_string(rank).c_str(), 1);
      setenv("PMI_SIZE", std::to_string(n).c_str(), 1);
      for (int round = 0; round < 2; ++round) {
        ccComm_t comm = nullptr;
        if (ccCommInitFromEnv(&comm) != ccSuccess || ccCommDestroy(comm) != ccSuccess) _exit(2);
      }
      std::exit(0);  // atexit handlers run, as in a program that returns from main
    }
    children.push_back(child);
  }
  for (pid_t child : children) {
    int status = 0;
    waitpid(child, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
  EXPECT_EQ(server.wait(), 0) << "each rank: one init, one finalize";
}

TEST(Launcher, NoLauncherMeansOneRank) {
  runRanks(1, [](RankContext&) {
    for (const char* name :
         {"PMIX_RANK", "PMI_FD", "RANK", "WORLD_SIZE", "SLURM_PROCID", "OMPI_COMM_WORLD_SIZE"}) {
      unsetenv(name);
    }
    ccComm_t comm = nullptr;
    CC_ASSERT_OK(ccCommInitFromEnv(&comm));
    int count = 0;
    CC_ASSERT_OK(ccCommCount(comm, &count));
    EXPECT_EQ(count, 1);
    CC_ASSERT_OK(ccCommDestroy(comm));
  });
}

bool hasIpv6Loopback() {
  int fd = socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in6 address{};
  address.sin6_family = AF_INET6;
  address.sin6_addr = in6addr_loopback;
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  close(fd);
  return ok;
}

TEST(Tcp, BootstrapAndTransferOverIpv6) {
  if (!hasIpv6Loopback()) GTEST_SKIP() << "no IPv6 loopback (::1) on this machine";
  MultiRankOptions options;
  options.env["CC_TRANSPORT"] = "tcp";
  options.env["CC_SOCKET_FAMILY"] = "AF_INET6";
  runRanks(
      2,
      [](RankContext& context) {
        auto id = wire::parseUniqueId(std::as_bytes(std::span(context.id.internal)));
        ASSERT_TRUE(id.isOk());
        EXPECT_EQ(id->rootAddress.family(), AF_INET6) << id->rootAddress.toString();
        ccComm_t comm = context.initComm();
        ASSERT_NE(comm, nullptr);
        std::vector<int64_t> data(300000, context.rank == 0 ? 7 : 0);
        if (context.rank == 0) {
          CC_ASSERT_OK(ccSend(data.data(), data.size(), ccInt64, 1, comm, nullptr));
        } else {
          CC_ASSERT_OK(ccRecv(data.data(), data.size(), ccInt64, 0, comm, nullptr));
          EXPECT_EQ(std::count(data.begin(), data.end(), 7), static_cast<long>(data.size()));
        }
        CC_ASSERT_OK(ccCommDestroy(comm));
      },
      options);
}

TEST(Trace, WritesAChromeTraceFilePerRank) {
  std::string prefix = ::testing::TempDir() + "cc-trace-" + std::to_string(getpid());
  MultiRankOptions options;
  options.env["CC_TRACE"] = prefix;
  runRanks(
      2,
      [](RankContext& context) {
        ccComm_t comm = context.initComm();
        ASSERT_NE(comm, nullptr);
        int value = context.rank;
        // A user range around the exchange, with one nested inside it.
        CC_ASSERT_OK(ccTraceRangePush(comm, "step \"1\""));
        CC_ASSERT_OK(ccTraceRangePush(comm, "exchange"));
        if (context.rank == 0) {
          CC_ASSERT_OK(ccSend(&value, 1, ccInt32, 1, comm, nullptr));
        } else {
          CC_ASSERT_OK(ccRecv(&value, 1, ccInt32, 0, comm, nullptr));
        }
        CC_ASSERT_OK(ccTraceRangePop(comm));
        CC_ASSERT_OK(ccTraceRangePop(comm));
        CC_ASSERT_OK(ccCommDestroy(comm));
      },
      options);
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream file(prefix + ".rank" + std::to_string(rank) + ".json");
    ASSERT_TRUE(file.good()) << "no trace for rank " << rank;
    std::stringstream text;
    text << file.rdbuf();
    std::string json = text.str();
    EXPECT_EQ(json.rfind("{\"traceEvents\":[", 0), 0u);
    EXPECT_NE(json.find(rank == 0 ? "\"name\":\"send\"" : "\"name\":\"recv\""), std::string::npos)
        << json;
    EXPECT_NE(json.find("\"bytes\":4"), std::string::npos) << json;
    // The ranges on their own lane, named, the name escaped.
    const std::string lane = "\"tid\":" + std::to_string(TraceSink::kUserLane);
    EXPECT_NE(json.find("\"name\":\"user ranges\""), std::string::npos) << json;
    EXPECT_NE(json.find("{\"name\":\"exchange\",\"ph\":\"X\",\"pid\":" + std::to_string(rank) +
                        "," + lane),
              std::string::npos)
        << json;
    EXPECT_NE(json.find("{\"name\":\"step \\\"1\\\"\",\"ph\":\"X\""), std::string::npos) << json;
    std::remove((prefix + ".rank" + std::to_string(rank) + ".json").c_str());
  }
}

// Without CC_TRACE the ranges still nest: a pop with none open, a NULL name or comm are
// errors naming what is wrong.
TEST(Trace, RangesCheckTheirArguments) {
  runRanks(1, [](RankContext& context) {
    ccComm_t comm = context.initComm();
    ASSERT_NE(comm, nullptr);
    EXPECT_EQ(ccTraceRangePop(comm), ccInvalidArgument);
    EXPECT_NE(std::string(ccGetLastError(nullptr)).find("no range is open"), std::string::npos)
        << ccGetLastError(nullptr);
    EXPECT_EQ(ccTraceRangePush(comm, nullptr), ccInvalidArgument);
    EXPECT_NE(std::string(ccGetLastError(nullptr)).find("name is NULL"), std::string::npos)
        << ccGetLastError(nullptr);
    EXPECT_EQ(ccTraceRangePush(nullptr, "x"), ccInvalidArgument);
    EXPECT_EQ(ccTraceRangePush(comm, "outer"), ccSuccess);
    EXPECT_EQ(ccTraceRangePush(comm, "inner"), ccSuccess);
    EXPECT_EQ(ccTraceRangePop(comm), ccSuccess);
    EXPECT_EQ(ccTraceRangePop(comm), ccSuccess);
    EXPECT_EQ(ccTraceRangePop(comm), ccInvalidArgument);
    CC_ASSERT_OK(ccCommDestroy(comm));
  });
}

}  // namespace
}  // namespace cc::testing
