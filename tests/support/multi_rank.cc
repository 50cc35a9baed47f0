#include "support/multi_rank.h"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace cc::testing {

ccComm_t RankContext::initComm() const {
  ccComm_t comm = nullptr;
  ccResult_t result = ccCommInitRank(&comm, nranks, id, rank);
  EXPECT_EQ(result, ccSuccess) << "rank " << rank
                               << ": ccCommInitRank: " << ccGetLastError(nullptr);
  return comm;
}

namespace {

// Tests must not send to the machine's other addresses: every test process, and the
// ranks it forks, use loopback unless the person running them chose an interface.
const bool kLoopbackByDefault = [] {
  setenv("CC_SOCKET_IFNAME", "lo", 0);
  return true;
}();

// Under the sanitizers, shared memory is left to fault in on first use: touching every
// page at creation (CC_SHM_PREFAULT, shadow pages included) made each communicator 2-3x
// slower to create there (Communicator.BarrierAndQueriesAtEverySizeUpToEight under TSan:
// 14-16 s, 4.5-6 s without). The release run covers the default.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
const bool kLazySharedMemoryUnderSanitizers = [] {
  setenv("CC_SHM_PREFAULT", "0", 0);
  return true;
}();
#endif

void writeAll(int fd, const void* data, size_t size) {
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, bytes, size);
    if (n <= 0) _exit(3);
    bytes += n;
    size -= static_cast<size_t>(n);
  }
}

void readAll(int fd, void* data, size_t size) {
  char* bytes = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = ::read(fd, bytes, size);
    if (n <= 0) _exit(4);
    bytes += n;
    size -= static_cast<size_t>(n);
  }
}

}  // namespace

MultiRankOptions transportOptions(const std::string& transport) {
  MultiRankOptions options;
  if (transport == "shm_cma") {
    options.env["CC_TRANSPORT"] = "shm";
    options.env["CC_SHM_USE_CMA"] = "1";
    options.env["CC_SHM_CMA_THRESHOLD"] = "4096";
  } else {
    options.env["CC_TRANSPORT"] = transport;
  }
  return options;
}

bool yamaAllowsSiblings() {
  std::FILE* file = std::fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
  if (file == nullptr) return true;  // no Yama: same-uid processes may read each other
  int scope = 1;
  if (std::fscanf(file, "%d", &scope) != 1) scope = 1;
  std::fclose(file);
  return scope == 0;
}

void runRanks(int nranks, const std::function<void(RankContext&)>& body,
              const MultiRankOptions& options) {
  std::vector<int> idPipes(static_cast<size_t>(2 * nranks), -1);
  for (int rank = 1; rank < nranks; ++rank) {
    ASSERT_EQ(pipe(&idPipes[static_cast<size_t>(2 * rank)]), 0);
  }
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> children;
  for (int rank = 0; rank < nranks; ++rank) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0) << "fork failed";
    if (pid == 0) {
      for (const auto& [name, value] : options.env) setenv(name.c_str(), value.c_str(), 1);
      RankContext context;
      context.rank = rank;
      context.nranks = nranks;
      if (rank == 0) {
        if (ccGetUniqueId(&context.id) != ccSuccess) {
          std::fprintf(stderr, "rank 0: ccGetUniqueId failed: %s\n", ccGetLastError(nullptr));
          _exit(5);
        }
        for (int peer = 1; peer < nranks; ++peer)
          writeAll(idPipes[static_cast<size_t>(2 * peer + 1)], &context.id, sizeof(context.id));
      } else {
        readAll(idPipes[static_cast<size_t>(2 * rank)], &context.id, sizeof(context.id));
      }
      for (int fd : idPipes) {
        if (fd >= 0) ::close(fd);
      }
      body(context);
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(::testing::Test::HasFailure() ? 1 : 0);
    }
    children.push_back(pid);
  }
  for (int fd : idPipes) {
    if (fd >= 0) ::close(fd);
  }

  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(options.timeoutSeconds);
  std::vector<bool> finished(children.size(), false);
  size_t remaining = children.size();
  while (remaining > 0) {
    for (size_t rank = 0; rank < children.size(); ++rank) {
      if (finished[rank]) continue;
      int status = 0;
      pid_t done = waitpid(children[rank], &status, WNOHANG);
      if (done == 0) continue;
      finished[rank] = true;
      --remaining;
      bool expectKilled = options.expectKilled.count(static_cast<int>(rank)) != 0;
      if (WIFSIGNALED(status)) {
        if (!(expectKilled && WTERMSIG(status) == SIGKILL)) {
          ADD_FAILURE() << "rank " << rank << " died with signal " << WTERMSIG(status);
        }
      } else if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
        ADD_FAILURE() << "rank " << rank << " exited with status " << WEXITSTATUS(status);
      } else if (expectKilled) {
        ADD_FAILURE() << "rank " << rank << " was expected to be killed but exited normally";
      }
    }
    if (remaining == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (size_t rank = 0; rank < children.size(); ++rank) {
        if (finished[rank]) continue;
        ADD_FAILURE() << "rank " << rank << " still running after " << options.timeoutSeconds
                      << " s: killed";
        kill(children[rank], SIGKILL);
        waitpid(children[rank], nullptr, 0);
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

std::set<std::string> listDevShm() {
  std::set<std::string> names;
  DIR* directory = opendir("/dev/shm");
  if (directory == nullptr) return names;
  while (dirent* entry = readdir(directory)) {
    std::string name = entry->d_name;
    if (name != "." && name != "..") names.insert(name);
  }
  closedir(directory);
  return names;
}

}  // namespace cc::testing
