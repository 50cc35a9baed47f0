// The C++ wrapper: owning handles, a group guard, deduced datatypes, errors as exceptions.
#include <cc/cc.hpp>
#include <vector>

#include "support/multi_rank.h"

namespace cc::testing {
namespace {

TEST(CppWrapper, RingExchangeWithAGroupGuard) {
  runRanks(3, [](RankContext& context) {
    cc::Comm comm = cc::Comm::initRank(context.nranks, context.id, context.rank);
    EXPECT_EQ(comm.rank(), context.rank);
    EXPECT_EQ(comm.size(), 3);
    std::vector<double> out(100, context.rank + 0.5);
    std::vector<double> in(100, -1);
    {
      cc::Group group;
      comm.send(std::span(out), (comm.rank() + 1) % 3);
      comm.recv(std::span(in), (comm.rank() + 2) % 3);
    }
    EXPECT_EQ(in[99], (context.rank + 2) % 3 + 0.5);
    cc::Stream stream;
    comm.barrier(&stream);
    stream.synchronize();
    EXPECT_TRUE(stream.done());
  });
}

TEST(CppWrapper, CollectivesTakeTheirSizesFromSpans) {
  runRanks(3, [](RankContext& context) {
    cc::Comm comm = cc::Comm::initRank(3, context.id, context.rank);
    std::vector<float> data(10, static_cast<float>(context.rank + 1));
    comm.allReduce(std::span(data));
    EXPECT_EQ(data[9], 6.0f);
    std::vector<int32_t> mine(2, context.rank), everyone(6, -1);
    comm.allGather(std::span<const int32_t>(mine), std::span(everyone));
    EXPECT_EQ(everyone, (std::vector<int32_t>{0, 0, 1, 1, 2, 2}));
    std::vector<int32_t> blocks{1, 2, 3}, mineReduced(1);
    comm.reduceScatter(std::span<const int32_t>(blocks), std::span(mineReduced), ccMax);
    EXPECT_EQ(mineReduced[0], context.rank + 1);
    std::vector<double> value(1, context.rank == 2 ? 7.5 : 0.0);
    comm.broadcast(std::span(value), 2);
    EXPECT_EQ(value[0], 7.5);
    std::vector<int64_t> out{10 * context.rank, 10 * context.rank + 1, 10 * context.rank + 2},
        in(3);
    comm.allToAll(std::span<const int64_t>(out), std::span(in));
    EXPECT_EQ(in[2], 20 + context.rank);
    try {
      std::vector<int32_t> tooSmall(5);
      comm.allGather(std::span<const int32_t>(mine), std::span(tooSmall));
      ADD_FAILURE() << "no exception";
    } catch (const cc::Error& error) {
      EXPECT_EQ(error.code(), ccInvalidArgument);
    }
  });
}

TEST(CppWrapper, SharedBuffersRegisterAndGoInOrder) {
  runRanks(2, [](RankContext& context) {
    cc::Comm comm = cc::Comm::initRank(2, context.id, context.rank);
    cc::SharedBuffer<float> data(1 << 18);
    for (float& value : data.span()) value = static_cast<float>(context.rank + 1);
    {
      cc::Registration registration = comm.registerBuffer(data.span());
      comm.allReduce(data.span());
      EXPECT_EQ(data.data()[(1 << 18) - 1], 3.0f);
      comm.barrier();
    }
    std::vector<float> plain(4);
    try {
      (void)comm.registerBuffer(std::span(plain));
      ADD_FAILURE() << "no exception";
    } catch (const cc::Error& error) {
      EXPECT_EQ(error.code(), ccInvalidArgument);
    }
  });
}

TEST(CppWrapper, ErrorsBecomeExceptionsWithTheMessage) {
  runRanks(1, [](RankContext& context) {
    cc::Comm comm = cc::Comm::initRank(1, context.id, 0);
    std::vector<int32_t> data(4);
    try {
      comm.send(std::span(data), 5);
      ADD_FAILURE() << "no exception";
    } catch (const cc::Error& error) {
      EXPECT_EQ(error.code(), ccInvalidArgument);
      EXPECT_NE(std::string(error.what()).find("peer 5"), std::string::npos) << error.what();
    }
  });
}

}  // namespace
}  // namespace cc::testing
