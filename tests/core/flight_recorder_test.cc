// The flight recorder keeps the newest operations and says which one is still running.
#include <gtest/gtest.h>

#include "core/trace.h"

namespace cc {
namespace {

TEST(FlightRecorder, KeepsTheNewestAndShowsTheRunningOne) {
  FlightRecorder recorder(4);
  for (uint64_t sequence = 0; sequence < 10; ++sequence) {
    recorder.begin(sequence, "send", "send", 1, 100 + sequence, 1000);
    if (sequence != 9) recorder.finish(sequence, OpState::kDone);
  }
  std::string text = recorder.dump(4);
  EXPECT_EQ(text.find("#5 "), std::string::npos) << text;  // evicted
  EXPECT_NE(text.find("#6 send to rank 1, 106 bytes: done"), std::string::npos) << text;
  EXPECT_NE(text.find("#9 send to rank 1, 109 bytes: RUNNING after"), std::string::npos) << text;
}

TEST(FlightRecorder, NamesTheDirectionOfMessagesInsideACall) {
  FlightRecorder recorder(8);
  recorder.begin(0, "barrier", "recv", 2, 0, 1000);
  EXPECT_NE(recorder.dump(8).find("#0 barrier recv from rank 2, 0 bytes: RUNNING"),
            std::string::npos)
      << recorder.dump(8);
}

TEST(FlightRecorder, EmptyRecorderSaysSo) {
  FlightRecorder recorder(8);
  EXPECT_NE(recorder.dump(8).find("no operations"), std::string::npos);
}

}  // namespace
}  // namespace cc
