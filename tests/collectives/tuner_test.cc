// The tuner's choices where they depend on the host's CPU count (docs/PERFORMANCE.md,
// "All-reduce and reduce when ranks outnumber the CPUs"): the count comes from the
// topology plan, so a CC_TOPO_FILE that lists 2 or 16 CPUs decides them whatever this
// machine has, and every rank of a communicator must choose alike, or the ranks of a
// direct collective would wait on each other until the timeout. (Whether each choice
// computes the right result is the forced-algorithm matrices' job, collectives_test.)
#include "collectives/tuner.h"

#include <cc/cc.h>
#include <stdlib.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "collectives/collective.h"
#include "comm/handles.h"
#include "support/multi_rank.h"

namespace cc::testing {
namespace {

using collectives::Algorithm;
using collectives::CollectiveKind;

// laptop.json (one host, one NUMA node, CPUs "0-15") with its CPU list replaced: a host
// of `cpus` CPUs. Returns the file's path.
std::string hostWithCpus(int cpus) {
  std::ifstream in(CC_TOPOLOGY_FILES "/laptop.json");
  std::stringstream text;
  text << in.rdbuf();
  std::string json = text.str();
  const std::string from = "\"cpus\": \"0-15\"";
  const size_t at = json.find(from);
  EXPECT_NE(at, std::string::npos) << "laptop.json no longer lists \"0-15\"";
  if (at == std::string::npos) return "";
  json.replace(at, from.size(), "\"cpus\": \"0-" + std::to_string(cpus - 1) + "\"");
  std::string path = ::testing::TempDir() + "cc_tuner_" + std::to_string(cpus) + "_cpus.json";
  std::ofstream(path) << json;
  return path;
}

struct Asked {
  CollectiveKind kind;
  size_t bytes;
};

collectives::Choice chooseFor(const comm::Communicator& comm, Asked asked,
                              Algorithm forced = Algorithm::kAuto) {
  collectives::CollectiveArgs args;
  args.kind = asked.kind;
  args.type = ccFloat32;
  args.count = asked.bytes / sizeof(float);
  return collectives::choose(comm, args, forced, 0);
}

// Runs `expect` on every rank of an `nranks` communicator planned on topology `file`,
// after checking that every rank chooses the same for every collective and size.
void onTopology(const std::string& file, int nranks,
                const std::function<void(const comm::Communicator&)>& expect) {
  ASSERT_FALSE(file.empty());
  MultiRankOptions options;
  options.env["CC_TOPO_FILE"] = file;
  runRanks(
      nranks,
      [&](RankContext& context) {
        ccComm_t handle = context.initComm();
        auto comm = comm::communicatorOf(handle);
        ASSERT_NE(comm, nullptr);
        // Every rank's choices, as integers, gathered and compared with rank 0's.
        std::vector<int32_t> mine;
        for (CollectiveKind kind : {CollectiveKind::kAllReduce, CollectiveKind::kReduce,
                                    CollectiveKind::kBroadcast, CollectiveKind::kAllGather,
                                    CollectiveKind::kReduceScatter, CollectiveKind::kAllToAll}) {
          for (size_t bytes = 1024; bytes <= (size_t{16} << 20); bytes *= 2) {
            const size_t count = bytes / sizeof(float);
            const bool perRank = kind == CollectiveKind::kAllGather ||
                                 kind == CollectiveKind::kReduceScatter ||
                                 kind == CollectiveKind::kAllToAll;
            if (perRank && count % static_cast<size_t>(nranks) != 0) continue;
            collectives::Choice choice = chooseFor(*comm, {kind, perRank ? bytes / nranks : bytes});
            mine.push_back(static_cast<int32_t>(choice.algorithm));
            mine.push_back(choice.oneShot ? 1 : 0);
            mine.push_back(static_cast<int32_t>(choice.chunkBytes));
          }
        }
        std::vector<int32_t> all(mine.size() * static_cast<size_t>(nranks));
        ASSERT_EQ(ccAllGather(mine.data(), all.data(), mine.size(), ccInt32, handle, nullptr),
                  ccSuccess);
        for (int r = 1; r < nranks; ++r) {
          std::vector<int32_t> theirs(all.begin() + static_cast<ptrdiff_t>(r * mine.size()),
                                      all.begin() + static_cast<ptrdiff_t>((r + 1) * mine.size()));
          EXPECT_EQ(theirs, std::vector<int32_t>(all.begin(),
                                                 all.begin() + static_cast<ptrdiff_t>(mine.size())))
              << "rank " << r << " chose differently from rank 0";
        }
        expect(*comm);
        EXPECT_EQ(ccCommDestroy(handle), ccSuccess);
      },
      options);
}

// The same on a host of `cpus` CPUs (laptop.json's, resized).
void onHostOf(int cpus, int nranks, const std::function<void(const comm::Communicator&)>& expect) {
  onTopology(hostWithCpus(cpus), nranks, [&](const comm::Communicator& comm) {
    ASSERT_EQ(comm.plan().cpusOfHost, std::vector<int>{cpus});
    expect(comm);
  });
}

bool directOneShot(const collectives::Choice& choice) {
  return choice.algorithm == Algorithm::kDirect && choice.oneShot;
}
bool directSliced(const collectives::Choice& choice) {
  return choice.algorithm == Algorithm::kDirect && !choice.oneShot;
}

// As many CPUs as ranks, or more: the model's own limits (one-shot up to 64 KiB, a
// reduce stays direct at every size).
TEST(Tuner, WithCpusToSpareOneShotReachesItsLimitAndReduceStaysDirect) {
  onHostOf(16, 4, [](const comm::Communicator& comm) {
    EXPECT_TRUE(directOneShot(chooseFor(comm, {CollectiveKind::kAllReduce, 64 << 10})));
    EXPECT_TRUE(directSliced(chooseFor(comm, {CollectiveKind::kAllReduce, 128 << 10})));
    EXPECT_TRUE(directOneShot(chooseFor(comm, {CollectiveKind::kReduce, 64 << 10})));
    for (size_t bytes : {size_t{256} << 10, size_t{1} << 20, size_t{4} << 20}) {
      EXPECT_EQ(chooseFor(comm, {CollectiveKind::kReduce, bytes}).algorithm, Algorithm::kDirect)
          << bytes;
    }
  });
}

// A reduce on a host with more ranks than CPUs takes the ring from 16 KiB, at every size
// above, unless CC_ALGO says direct; below, direct's one-shot.
void expectRingReducesFrom16KiB(const comm::Communicator& comm) {
  EXPECT_TRUE(directOneShot(chooseFor(comm, {CollectiveKind::kReduce, 8 << 10})));
  for (size_t bytes = size_t{16} << 10; bytes <= (size_t{16} << 20); bytes *= 4) {
    EXPECT_EQ(chooseFor(comm, {CollectiveKind::kReduce, bytes}).algorithm, Algorithm::kRing)
        << bytes;
    EXPECT_EQ(chooseFor(comm, {CollectiveKind::kReduce, bytes}, Algorithm::kDirect).algorithm,
              Algorithm::kDirect)
        << bytes;
  }
}

// Two ranks on two CPUs: not more ranks than CPUs, so the reduce stays direct.
TEST(Tuner, TwoRanksOnTwoCpusKeepTheDirectReduce) {
  onHostOf(2, 2, [](const comm::Communicator& comm) {
    for (size_t bytes = size_t{16} << 10; bytes <= (size_t{16} << 20); bytes *= 4) {
      EXPECT_EQ(chooseFor(comm, {CollectiveKind::kReduce, bytes}).algorithm, Algorithm::kDirect)
          << bytes;
    }
  });
}

// Four ranks on two CPUs: a one-shot all-reduce only up to 128 KiB x 2 / 4^2 = 16 KiB;
// the reduce takes the ring from 16 KiB.
TEST(Tuner, FourRanksOnTwoCpusSliceTheAllReduceFrom16KiB) {
  onHostOf(2, 4, [](const comm::Communicator& comm) {
    EXPECT_TRUE(directOneShot(chooseFor(comm, {CollectiveKind::kAllReduce, 16 << 10})));
    EXPECT_TRUE(directSliced(chooseFor(comm, {CollectiveKind::kAllReduce, 32 << 10})));
    EXPECT_TRUE(directSliced(chooseFor(comm, {CollectiveKind::kAllReduce, 64 << 10})));
    expectRingReducesFrom16KiB(comm);
  });
}

// Eight ranks on two CPUs (four a CPU): all-reduce one-shot only to 4 KiB; the reduce
// takes the ring from 16 KiB.
TEST(Tuner, EightRanksOnTwoCpusTakeTheRingForReduces) {
  onHostOf(2, 8, [](const comm::Communicator& comm) {
    EXPECT_TRUE(directOneShot(chooseFor(comm, {CollectiveKind::kAllReduce, 4 << 10})));
    EXPECT_TRUE(directSliced(chooseFor(comm, {CollectiveKind::kAllReduce, 8 << 10})));
    expectRingReducesFrom16KiB(comm);
    // The all-reduce keeps direct: only the reduce moved.
    EXPECT_EQ(chooseFor(comm, {CollectiveKind::kAllReduce, 1 << 20}).algorithm, Algorithm::kDirect);
  });
}

// With more ranks than CPUs, the pipelined algorithms hand a vector on in chunks of at
// least 256 KiB (each hand-off may wait for a core), where with CPUs to spare the
// pipeline's rule (bytes / 4n, from 32 KiB) cuts finer; a vector smaller than that goes as
// one chunk. CC_CHUNK_BYTES still decides when set.
TEST(Tuner, PipelinesWithMoreRanksThanCpusHandOnLargerChunks) {
  constexpr size_t kOversubscribedLeast = 256 << 10;
  const auto chunkOf = [](const comm::Communicator& comm, CollectiveKind kind, size_t bytes,
                          Algorithm forced) {
    collectives::Choice choice = chooseFor(comm, {kind, bytes}, forced);
    EXPECT_EQ(choice.algorithm, forced) << bytes;
    return choice.chunkBytes;
  };
  for (int nranks : {4, 8}) {
    onHostOf(2, nranks, [&](const comm::Communicator& comm) {
      for (size_t bytes = size_t{16} << 10; bytes <= (size_t{4} << 20); bytes *= 4) {
        // The reduce's own choice there (expectRingReducesFrom16KiB).
        collectives::Choice reduce = chooseFor(comm, {CollectiveKind::kReduce, bytes});
        EXPECT_EQ(reduce.algorithm, Algorithm::kRing) << bytes;
        EXPECT_GE(reduce.chunkBytes, kOversubscribedLeast) << bytes;
        for (Algorithm pipelined : {Algorithm::kRing, Algorithm::kTree}) {
          EXPECT_GE(chunkOf(comm, CollectiveKind::kAllReduce, bytes, pipelined),
                    kOversubscribedLeast)
              << bytes;
          EXPECT_GE(chunkOf(comm, CollectiveKind::kBroadcast, bytes, pipelined),
                    kOversubscribedLeast)
              << bytes;
        }
      }
      // The direct algorithms keep their own blocks, and the all-reduce stays direct.
      EXPECT_EQ(chooseFor(comm, {CollectiveKind::kAllReduce, 1 << 20}).algorithm,
                Algorithm::kDirect);
      // CC_CHUNK_BYTES (the forced chunk) still decides.
      collectives::CollectiveArgs args;
      args.kind = CollectiveKind::kReduce;
      args.type = ccFloat32;
      args.count = (1 << 20) / sizeof(float);
      EXPECT_EQ(collectives::choose(comm, args, Algorithm::kRing, 32 << 10).chunkBytes,
                size_t{32} << 10);
    });
  }
  // As many CPUs as ranks: the pipeline's rule, 1 MiB / (4 x 4) = 64 KiB, and 32 KiB
  // below 512 KiB.
  onHostOf(16, 4, [&](const comm::Communicator& comm) {
    EXPECT_EQ(chunkOf(comm, CollectiveKind::kReduce, 1 << 20, Algorithm::kRing), size_t{64} << 10);
    EXPECT_EQ(chunkOf(comm, CollectiveKind::kBroadcast, 256 << 10, Algorithm::kTree),
              size_t{32} << 10);
  });
}

// Ranks on one machine (they share memory, so direct runs) planned by a file of two
// hosts of 16 and 2 CPUs: three ranks on the first, one on the second, which alone has
// more ranks than CPUs. The CPU rules must not split them (onTopology checks that all
// choose alike): a plan of several hosts counts no ranks per CPU.
TEST(Tuner, HostsOfDifferentSizesInOnePlanChooseAlike) {
  std::ifstream in(CC_TOPOLOGY_FILES "/two_hosts_uneven.json");
  std::stringstream text;
  text << in.rdbuf();
  std::string json = text.str();
  const std::string small = "\"cpus\": \"0-7\"";  // the second host's only NUMA node
  const size_t at = json.rfind(small);
  ASSERT_NE(at, std::string::npos) << "two_hosts_uneven.json no longer lists \"0-7\"";
  json.replace(at, small.size(), "\"cpus\": \"0-1\"");
  const std::string file = ::testing::TempDir() + "cc_tuner_uneven_hosts.json";
  std::ofstream(file) << json;
  onTopology(file, 4, [](const comm::Communicator& comm) {
    ASSERT_EQ(comm.plan().hostCount, 2);
    EXPECT_EQ(comm.plan().cpusOfHost, (std::vector<int>{16, 2}));
  });
}

}  // namespace
}  // namespace cc::testing
