#include "progress.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace cc::parallel::train_tool {

namespace {

// A bar redrawn with \r only on a terminal of our own: Open MPI gives each rank a
// pseudo-terminal even when mpirun's output goes to a file or a pipe, where the
// redrawn bar would pile up on one line.
bool ownTerminal() {
  if (::isatty(STDOUT_FILENO) != 1) return false;
  for (const char* launcher : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"}) {
    if (std::getenv(launcher) != nullptr) return false;
  }
  return true;
}

}  // namespace

Progress::Progress(int64_t firstStep, int64_t lastStep, int printEvery)
    : terminal_(ownTerminal()),
      firstStep_(firstStep),
      lastStep_(lastStep),
      printEvery_(printEvery) {}

void Progress::report(const StepResult& result, double tokensPerSecond) {
  elapsed_ += result.seconds;
  const int64_t done = result.step - firstStep_;
  const int64_t total = lastStep_ - firstStep_;
  const double eta =
      done > 0 ? elapsed_ / static_cast<double>(done) * static_cast<double>(total - done) : 0;
  if (terminal_) {
    constexpr int kWidth = 30;
    const int filled = total > 0 ? static_cast<int>(kWidth * done / total) : kWidth;
    char bar[kWidth + 1];
    for (int i = 0; i < kWidth; ++i) bar[i] = i < filled ? '#' : '.';
    bar[kWidth] = '\0';
    std::printf("\r[%s] step %lld/%lld loss %.4f %.0f tok/s ETA %d:%02d ", bar,
                static_cast<long long>(result.step), static_cast<long long>(lastStep_), result.loss,
                tokensPerSecond, static_cast<int>(eta) / 60, static_cast<int>(eta) % 60);
    std::fflush(stdout);
    barShown_ = true;
    return;
  }
  if (result.step % printEvery_ == 0 || done == 1 || result.step == lastStep_) {
    std::printf("step %lld/%lld loss %.6f lr %.3e grad_norm %.4f tokens_per_s %.0f eta_s %.0f",
                static_cast<long long>(result.step), static_cast<long long>(lastStep_), result.loss,
                static_cast<double>(result.lr), result.gradNorm, tokensPerSecond, eta);
    // Per MoE block: tokens per expert min/max, max/mean, pairs dropped, load-balancing loss.
    for (const MoeStepStatistics& moe : result.moe) {
      std::printf(" | moe%d tokens %lld-%lld imbalance %.2f dropped %lld aux %.4f", moe.layer,
                  static_cast<long long>(moe.minTokens()), static_cast<long long>(moe.maxTokens()),
                  moe.imbalance(), static_cast<long long>(moe.totalDropped()), moe.auxLoss);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
}

void Progress::finish() {
  if (barShown_) std::printf("\n");
  barShown_ = false;
}

}  // namespace cc::parallel::train_tool
