// The router of a mixture-of-experts block (Switch Transformer, GShard): softmax over the
// experts' logits, each token's top K experts with their probabilities renormalised to sum
// to one (the gates), a capacity per expert, the Switch load-balancing loss and the router
// z-loss, and the backward of all of it down to the logits. The experts themselves are the
// dense MLP's layers (linear.h, gelu.h) run on the rows routed to them.
//
// Capacity and drop order (GShard's): an expert takes at most `capacity` (token, choice)
// pairs per micro-batch. Pairs claim slots in priority order: every token's first choice, in
// token order, then every token's second choice, and so on; a pair that finds its expert
// full is dropped (that expert adds nothing to the token, whose residual passes unchanged).
// For K > 1 the gates are the K probabilities renormalised to sum to one (GShard's top-2,
// Mixtral), over all K choices before dropping, so a dropped choice is simply a missing term.
// For K = 1 the gate is the probability itself, as in the Switch Transformer: renormalised it
// would be 1, and the router would learn nothing from the model's loss.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace cc::parallel::layers {

// Slots per expert for `tokens` tokens: ceil(tokens x topK / experts x factor), or for
// factor 0 (dropless) `tokens` (an expert is chosen at most once per token).
inline int64_t expertCapacity(int64_t tokens, int topK, int experts, double factor) {
  if (factor <= 0) return tokens;
  return static_cast<int64_t>(
      std::ceil(static_cast<double>(tokens) * topK / experts * factor - 1e-9));
}

// Where every (token, choice) pair of one micro-batch went.
struct Routing {
  int tokens = 0, experts = 0, topK = 0;
  std::vector<int32_t> choice;  // [N, K]: expert ids, most probable first (ties: lower id)
  std::vector<int64_t> row;     // [N, K]: the pair's row in the send order, -1 if dropped
  std::vector<int64_t> routed;  // [E]: pairs that chose the expert
  std::vector<int64_t> kept;    // [E]: of them, within capacity
  // The send order: expert-major (so also destination-major under expert parallelism),
  // slot order inside an expert. rowToken[r] is the token of send row r.
  std::vector<int64_t> expertBegin;  // [E + 1]
  std::vector<int32_t> rowToken;     // [S]
  std::vector<int32_t> rowChoice;    // [S]: which of the token's K choices
  int64_t sent() const { return expertBegin.empty() ? 0 : expertBegin.back(); }
};

// probs[N, E] = softmax of each row of logits (in place allowed); lse[N] the rows'
// log-sum-exp (the z-loss reads it).
template <typename T>
void routerSoftmax(T* probs, T* lse, const T* logits, size_t tokens, size_t experts) {
  for (size_t t = 0; t < tokens; ++t) {
    const T* in = logits + t * experts;
    T* out = probs + t * experts;
    T max = in[0];
    for (size_t e = 1; e < experts; ++e) max = std::max(max, in[e]);
    T sum = 0;
    for (size_t e = 0; e < experts; ++e) {
      out[e] = std::exp(in[e] - max);
      sum += out[e];
    }
    for (size_t e = 0; e < experts; ++e) out[e] /= sum;
    lse[t] = max + std::log(sum);
  }
}

// The top-K choices, the gates [N, K] (renormalised for K > 1) and the capacity assignment
// (the drop order above).
template <typename T>
void route(Routing& r, T* gates, const T* probs, int tokens, int experts, int topK,
           int64_t capacity) {
  const size_t n = static_cast<size_t>(tokens);
  const size_t k = static_cast<size_t>(topK);
  const size_t e = static_cast<size_t>(experts);
  r.tokens = tokens;
  r.experts = experts;
  r.topK = topK;
  r.choice.assign(n * k, 0);
  r.row.assign(n * k, -1);
  r.routed.assign(e, 0);
  r.kept.assign(e, 0);
  std::vector<int32_t> order(e);
  std::vector<int64_t> slot(n * k, -1);
  for (size_t t = 0; t < n; ++t) {
    const T* p = probs + t * e;
    for (size_t i = 0; i < e; ++i) order[i] = static_cast<int32_t>(i);
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                      [p](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    T sum = 0;
    for (size_t c = 0; c < k; ++c) sum += p[order[c]];
    if (k == 1) sum = 1;  // Switch: the gate is the probability
    for (size_t c = 0; c < k; ++c) {
      r.choice[t * k + c] = order[c];
      gates[t * k + c] = p[order[c]] / sum;
    }
  }
  for (size_t c = 0; c < k; ++c) {
    for (size_t t = 0; t < n; ++t) {
      const size_t x = static_cast<size_t>(r.choice[t * k + c]);
      ++r.routed[x];
      if (r.kept[x] < capacity) slot[t * k + c] = r.kept[x]++;
    }
  }
  r.expertBegin.assign(e + 1, 0);
  for (size_t x = 0; x < e; ++x) r.expertBegin[x + 1] = r.expertBegin[x] + r.kept[x];
  r.rowToken.assign(static_cast<size_t>(r.sent()), 0);
  r.rowChoice.assign(r.rowToken.size(), 0);
  for (size_t t = 0; t < n; ++t) {
    for (size_t c = 0; c < k; ++c) {
      if (slot[t * k + c] < 0) continue;
      const int64_t row = r.expertBegin[static_cast<size_t>(r.choice[t * k + c])] + slot[t * k + c];
      r.row[t * k + c] = row;
      r.rowToken[static_cast<size_t>(row)] = static_cast<int32_t>(t);
      r.rowChoice[static_cast<size_t>(row)] = static_cast<int32_t>(c);
    }
  }
}

// The Switch load-balancing loss alpha E sum_i f_i P_i, f_i = routed_i / (N K) the fraction
// of the pairs that chose expert i (before capacity), P_i the mean router probability of i.
template <typename T>
double loadBalancingLoss(const Routing& r, const T* probs, double alpha) {
  const size_t n = static_cast<size_t>(r.tokens);
  const size_t e = static_cast<size_t>(r.experts);
  double total = 0;
  for (size_t i = 0; i < e; ++i) {
    double p = 0;
    for (size_t t = 0; t < n; ++t) p += static_cast<double>(probs[t * e + i]);
    const double f = static_cast<double>(r.routed[i]) / static_cast<double>(n * r.topK);
    total += f * p / static_cast<double>(n);
  }
  return alpha * static_cast<double>(e) * total;
}

// The router z-loss beta (1/N) sum_t lse_t^2 (ST-MoE).
template <typename T>
double routerZLoss(const T* lse, size_t tokens, double beta) {
  double total = 0;
  for (size_t t = 0; t < tokens; ++t) total += static_cast<double>(lse[t]) * lse[t];
  return beta * total / static_cast<double>(tokens);
}

// dlogits[N, E] (overwritten) from dgates[N, K] (d(objective)/d(gate), zero for a dropped
// choice) through the renormalisation and the softmax, plus lossScale times the gradients of
// the load-balancing loss (alpha) and the z-loss (beta).
template <typename T>
void routerBackward(T* dlogits, const T* dgates, const T* gates, const T* probs, const T* lse,
                    const Routing& r, double alpha, double beta, T lossScale, T* scratch) {
  const size_t n = static_cast<size_t>(r.tokens);
  const size_t e = static_cast<size_t>(r.experts);
  const size_t k = static_cast<size_t>(r.topK);
  // d(aux)/d(p[t, i]) = alpha E f_i / N, the same for every token.
  T* daux = scratch;  // [E]
  for (size_t i = 0; i < e; ++i) {
    const double f = static_cast<double>(r.routed[i]) / static_cast<double>(n * k);
    daux[i] =
        static_cast<T>(lossScale * alpha * static_cast<double>(e) * f / static_cast<double>(n));
  }
  const T dz = static_cast<T>(lossScale * beta * 2.0 / static_cast<double>(n));
  T* dp = scratch + e;  // [E]
  for (size_t t = 0; t < n; ++t) {
    const T* p = probs + t * e;
    const T* g = gates + t * k;
    const T* dg = dgates + t * k;
    for (size_t i = 0; i < e; ++i) dp[i] = daux[i];
    if (k == 1) {
      dp[r.choice[t]] += dg[0];  // gate = p
    } else {
      // gate_c = p_c / S, S = the sum of the K chosen probabilities.
      T sum = 0, dot = 0;
      for (size_t c = 0; c < k; ++c) {
        sum += p[r.choice[t * k + c]];
        dot += dg[c] * g[c];
      }
      for (size_t c = 0; c < k; ++c) dp[r.choice[t * k + c]] += (dg[c] - dot) / sum;
    }
    T inner = 0;
    for (size_t i = 0; i < e; ++i) inner += dp[i] * p[i];
    T* out = dlogits + t * e;
    for (size_t i = 0; i < e; ++i) out[i] = p[i] * (dp[i] - inner) + dz * lse[t] * p[i];
  }
}

}  // namespace cc::parallel::layers
