// Starting ranks: under mpirun, or forked here with the unique id passed over pipes
// (see launch.h).
#include "launch.h"

#include <fmt/core.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cc_call.h"

namespace cc::bench {
namespace {

using Pipe = std::array<int, 2>;  // [0] read end, [1] write end; -1 when closed

void closeEnd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

std::string transportLabel(const std::string& transport) {
  if (!transport.empty()) return transport;
  const char* fromEnvironment = std::getenv("CC_TRANSPORT");
  return fromEnvironment != nullptr && *fromEnvironment != '\0' ? fromEnvironment : "auto";
}

void selectTransport(const std::string& transport) {
  if (!transport.empty() && setenv("CC_TRANSPORT", transport.c_str(), 1) != 0) {
    failRank(fmt::format("setenv(CC_TRANSPORT={}) failed: {}", transport, std::strerror(errno)));
  }
}

void writeId(int fd, const ccUniqueId& id, int peer) {
  const char* data = id.internal;
  size_t left = sizeof(id.internal);
  while (left > 0) {
    ssize_t written = write(fd, data, left);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0)
      failRank(
          fmt::format("handing the unique id to rank {} failed: {}", peer, std::strerror(errno)));
    data += written;
    left -= static_cast<size_t>(written);
  }
}

void readId(int fd, ccUniqueId& id) {
  char* data = id.internal;
  size_t left = sizeof(id.internal);
  while (left > 0) {
    ssize_t got = read(fd, data, left);
    if (got < 0 && errno == EINTR) continue;
    if (got == 0) failRank("rank 0 exited before handing over the unique id");
    if (got < 0) failRank(fmt::format("reading the unique id failed: {}", std::strerror(errno)));
    data += got;
    left -= static_cast<size_t>(got);
  }
}

// The whole life of forked rank `rank`; returns its exit status.
int runForkedRank(int rank, int nranks, std::vector<Pipe>& pipes, const RankProgram& program) {
  setRankForMessages(rank);
  signal(SIGPIPE, SIG_IGN);  // a dead reader shows up as a failed write, reported above
  // Keep only this rank's ends: rank 0 writes every pipe, rank r reads pipe r. A reader
  // then sees end-of-file, not a hang, when rank 0 dies.
  for (int r = 1; r < nranks; ++r) {
    if (rank != 0) closeEnd(pipes[r][1]);
    if (rank != r) closeEnd(pipes[r][0]);
  }
  bool first = true;
  for (const std::string& transport : program.transports) {
    selectTransport(transport);
    ccUniqueId id{};
    if (rank == 0) {
      checkCc(ccGetUniqueId(&id), nullptr, "ccGetUniqueId");
      for (int r = 1; r < nranks; ++r) writeId(pipes[r][1], id, r);
    } else {
      readId(pipes[rank][0], id);
    }
    ccComm_t comm = nullptr;
    checkCc(ccCommInitRank(&comm, nranks, id, rank), nullptr,
            fmt::format("ccCommInitRank(nranks={}, rank={}, CC_TRANSPORT={})", nranks, rank,
                        transport));
    program.measure(comm, rank, nranks, transportLabel(transport), first);
    checkCc(ccCommDestroy(comm), nullptr, "ccCommDestroy");
    first = false;
  }
  program.finish(rank);
  return 0;
}

std::string describeStatus(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status),
                       strsignal(WTERMSIG(status)));
  return "stopped";
}

}  // namespace

bool launchedByMpirun() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "WORLD_SIZE"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0') return true;
  }
  return false;
}

int runUnderMpirun(const RankProgram& program) {
  std::string transport = program.transports.empty() ? std::string() : program.transports.front();
  selectTransport(transport);
  ccComm_t comm = nullptr;
  checkCc(ccCommInitFromEnv(&comm), nullptr, "ccCommInitFromEnv");
  int rank = 0;
  int nranks = 0;
  checkCc(ccCommUserRank(comm, &rank), comm, "ccCommUserRank");
  checkCc(ccCommCount(comm, &nranks), comm, "ccCommCount");
  setRankForMessages(rank);
  if (nranks < 2) failRank(fmt::format("needs at least 2 ranks, mpirun started {}", nranks));
  program.measure(comm, rank, nranks, transportLabel(transport), true);
  checkCc(ccCommDestroy(comm), nullptr, "ccCommDestroy");
  program.finish(rank);
  return 0;
}

int runForked(int nranks, const RankProgram& program) {
  std::vector<Pipe> pipes(static_cast<size_t>(nranks), Pipe{-1, -1});
  for (int r = 1; r < nranks; ++r) {
    if (pipe(pipes[r].data()) != 0) {
      fmt::print(stderr, "cc-bench: pipe() failed: {}\n", std::strerror(errno));
      return 1;
    }
  }
  std::fflush(stdout);  // or the children would print what is buffered again
  std::fflush(stderr);
  std::vector<pid_t> children;
  bool forkFailed = false;
  // Like mpirun (--bind-to core when ranks fit the cores), one core per rank; otherwise
  // two spinning ranks can share a core while another sits idle, and every step costs a
  // context switch (seen here: 11 us instead of 0.3 us per small all-reduce).
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  std::vector<int> cores;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &allowed)) cores.push_back(cpu);
    }
  }
  const bool bind = !cores.empty() && nranks <= static_cast<int>(cores.size()) &&
                    std::getenv("CC_BENCH_NO_BIND") == nullptr;
  for (int rank = 0; rank < nranks; ++rank) {
    pid_t pid = fork();
    if (pid == 0) {
      if (bind) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cores[static_cast<size_t>(rank)], &one);
        (void)sched_setaffinity(0, sizeof(one), &one);
      }
      int status = runForkedRank(rank, nranks, pipes, program);
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(status);
    }
    if (pid < 0) {
      fmt::print(stderr, "cc-bench: fork() for rank {} failed: {}\n", rank, std::strerror(errno));
      forkFailed = true;
      break;
    }
    children.push_back(pid);
  }
  for (Pipe& ends : pipes) {
    closeEnd(ends[0]);
    closeEnd(ends[1]);
  }
  if (forkFailed) {
    for (pid_t child : children) kill(child, SIGTERM);
  }

  // On the first failure the others would only wait for it until cc's timeout: stop them.
  bool anyFailed = forkFailed;
  std::vector<bool> reaped(children.size(), false);
  size_t running = children.size();
  while (running > 0) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0 && errno == EINTR) continue;
    if (pid < 0) break;
    size_t rank = 0;
    while (rank < children.size() && children[rank] != pid) ++rank;
    if (rank == children.size()) continue;  // not one of ours (popen's, say)
    reaped[rank] = true;
    --running;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    fmt::print(stderr, "cc-bench: rank {} (pid {}) {}\n", rank, pid, describeStatus(status));
    if (!anyFailed) {
      for (size_t other = 0; other < children.size(); ++other) {
        if (!reaped[other]) kill(children[other], SIGTERM);
      }
    }
    anyFailed = true;
  }
  return anyFailed ? 1 : 0;
}

}  // namespace cc::bench
