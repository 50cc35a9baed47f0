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
