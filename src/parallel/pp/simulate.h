// Runs a plan (plan.h) on paper before it runs for real: checks it and predicts its time.
//
// The checks: every chunk of every micro-batch is forwarded once and backwarded once (B
// and W once each where split, B first, after its forward); every compute finds its input
// received before it and every send comes after the compute that produced the data; every
// send meets exactly one receive. Then the plan is run as the executor runs it: each
// stage queues its transfer groups, in plan order, on a stream that runs them one at a time
// in the background of its computes; a compute that reads received data first waits for the
// queue to drain. A transfer completes only once both sides' groups run (rendezvous: no
// transport buffering is assumed), and a group holds its queue until all its transfers
// complete. A plan that finishes so cannot deadlock on any transport that buffers more; one
// that cannot finish is refused, naming the group each stuck queue waits in.
//
// The prediction: under a cost model (the time of a forward, a B, a W and one transfer),
// each stage's compute spans, the makespan, and each stage's bubble, the fraction of the
// makespan it does not compute; also the most micro-batch chunks each stage holds in flight
// (forwarded, W not yet done), which is how many activation arenas it needs.
#pragma once

#include <string>
#include <vector>

#include "parallel/pp/plan.h"

namespace cc::parallel {

struct CostModel {
  double forward = 1;
  double backwardInput = 1;   // B
  double backwardWeight = 1;  // W (a whole backward costs B + W)
  double transfer = 0;        // one activation or gradient between two stages
};

struct ComputeSpan {
  int stage = 0;
  Action action;
  double start = 0, end = 0;
};

struct Simulation {
  double makespan = 0;
  std::vector<double> busy;    // per stage: time computing
  std::vector<double> bubble;  // per stage: 1 - busy / makespan
  double meanBubble = 0;
  std::vector<int> peakInFlight;                       // per stage
  std::vector<std::vector<int>> peakInFlightPerChunk;  // [stage][chunk]
  std::vector<ComputeSpan> spans;
};

// The checks above, then the simulation; the error names the stage, the action and what
// is wrong with it.
Result<Simulation> simulate(const Plan& plan, const CostModel& cost = {});
// The same with each stage's own costs (stages differ: the first embeds, the last has the
// head), e.g. as its executor measured them; one per stage.
Result<Simulation> simulate(const Plan& plan, const std::vector<CostModel>& stageCosts);

// The familiar pipeline picture as an SVG: stages as rows, time across, each compute a box
// (forward, B, W, or a whole backward, each its own colour) labelled with its micro-batch,
// and the predicted bubble in the title.
std::string planSvg(const Plan& plan, const Simulation& simulation);

}  // namespace cc::parallel
