#include "comm/launcher.h"

#include <openssl/sha.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "core/bootstrap.h"
#include "core/log.h"

#ifdef CC_HAVE_PMIX
#include <pmix.h>
#endif

namespace cc::comm {
namespace {

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return (value != nullptr && *value != '\0') ? value : nullptr;
}

Result<int> envInt(const char* name, int low, int high) {
  const char* text = env(name);
  if (text == nullptr) return invalidArgument(std::string(name) + " is not set");
  int value = 0;
  auto [end, error] = std::from_chars(text, text + std::strlen(text), value);
  if (error != std::errc() || *end != '\0' || value < low || value > high) {
    return invalidArgument(std::string(name) + "=" + text + " is not an integer in [" +
                           std::to_string(low) + ", " + std::to_string(high) + "]");
  }
  return value;
}

// Each InitFromEnv in a process publishes under its own key.
std::atomic<int> gGeneration{0};

Result<wire::UniqueIdContents> decodeId(std::span<const std::byte> bytes) {
  return wire::parseUniqueId(bytes);
}

#ifdef CC_HAVE_PMIX
// Open MPI's mpirun (4.x and 5.x) and srun --mpi=pmix: rank 0 puts the id, everyone
// fences, the others get it. The id travels over the launcher's own channel.
Result<LaunchInfo> viaPmix(const Config& config) {
  pmix_proc_t me;
  pmix_status_t rc = PMIx_Init(&me, nullptr, 0);
  if (rc != PMIX_SUCCESS)
    return Status(ccSystemError, std::string("PMIx_Init failed: ") + PMIx_Error_string(rc));
  struct Finalize {
    ~Finalize() { PMIx_Finalize(nullptr, 0); }
  } finalize;
  pmix_proc_t wildcard;
  PMIX_PROC_CONSTRUCT(&wildcard);
  std::memcpy(wildcard.nspace, me.nspace, sizeof(wildcard.nspace));
  wildcard.rank = PMIX_RANK_WILDCARD;
  pmix_value_t* sizeValue = nullptr;
  rc = PMIx_Get(&wildcard, PMIX_JOB_SIZE, nullptr, 0, &sizeValue);
  if (rc != PMIX_SUCCESS)
    return Status(ccSystemError, std::string("PMIx_Get(job size): ") + PMIx_Error_string(rc));
  LaunchInfo info;
  info.launcher = "pmix";
  info.rank = static_cast<int>(me.rank);
  info.nranks = static_cast<int>(sizeValue->data.uint32);
  PMIX_VALUE_RELEASE(sizeValue);
  std::string key = "cc.uid." + std::to_string(gGeneration.fetch_add(1));
  char encoded[CC_UNIQUE_ID_BYTES];
  if (info.rank == 0) {
    CC_ASSIGN_OR_RETURN(info.id, bootstrap::startRoot(config));
    wire::encodeUniqueId(info.id, encoded);
    pmix_value_t value;
    PMIX_VALUE_CONSTRUCT(&value);
    value.type = PMIX_BYTE_OBJECT;
    value.data.bo.bytes = encoded;
    value.data.bo.size = sizeof(encoded);
    rc = PMIx_Put(PMIX_GLOBAL, key.c_str(), &value);
    if (rc != PMIX_SUCCESS)
      return Status(ccSystemError, std::string("PMIx_Put: ") + PMIx_Error_string(rc));
  }
  rc = PMIx_Commit();
  if (rc != PMIX_SUCCESS)
    return Status(ccSystemError, std::string("PMIx_Commit: ") + PMIx_Error_string(rc));
  pmix_info_t collect;
  bool yes = true;
  PMIX_INFO_LOAD(&collect, PMIX_COLLECT_DATA, &yes, PMIX_BOOL);
  rc = PMIx_Fence(&wildcard, 1, &collect, 1);
  PMIX_INFO_DESTRUCT(&collect);
  if (rc != PMIX_SUCCESS)
    return Status(ccSystemError, std::string("PMIx_Fence: ") + PMIx_Error_string(rc));
  if (info.rank != 0) {
    pmix_proc_t root = wildcard;
    root.rank = 0;
    pmix_value_t* value = nullptr;
    rc = PMIx_Get(&root, key.c_str(), nullptr, 0, &value);
    if (rc != PMIX_SUCCESS)
      return Status(ccSystemError, std::string("PMIx_Get(id): ") + PMIx_Error_string(rc));
    if (value->type != PMIX_BYTE_OBJECT || value->data.bo.size != CC_UNIQUE_ID_BYTES) {
      PMIX_VALUE_RELEASE(value);
      return remoteError("PMIx returned a malformed unique id");
    }
    auto id = decodeId(std::as_bytes(std::span(value->data.bo.bytes, value->data.bo.size)));
    PMIX_VALUE_RELEASE(value);
    if (!id.isOk()) return id.status();
    info.id = id.value();
  }
  return info;
}
#endif

// MPICH's Hydra (mpiexec) speaks PMI-1 on the descriptor in PMI_FD: a line protocol of
// "cmd=... key=value" words.
class Pmi1 {
 public:
  explicit Pmi1(int fd) : fd_(fd) {}

  Result<std::string> command(const std::string& line, const std::string& expectedCmd,
                              int timeoutMs = 600000) {
    Deadline deadline = Deadline::afterMs(timeoutMs);
    CC_TRY(sendAll(fd_, std::as_bytes(std::span(line.data(), line.size())), deadline));
    std::string reply;
    char c = 0;
    while (reply.size() < 4096) {
      CC_TRY(recvAll(fd_, std::as_writable_bytes(std::span(&c, 1)), deadline));
      if (c == '\n') break;
      reply += c;
    }
    if (reply.rfind("cmd=" + expectedCmd, 0) != 0)
      return remoteError("PMI-1: unexpected reply '" + reply + "'");
    return reply;
  }

  static std::string field(const std::string& reply, const std::string& name) {
    size_t at = reply.find(" " + name + "=");
    if (at == std::string::npos) return "";
    size_t begin = at + name.size() + 2;
    size_t end = reply.find(' ', begin);
    return reply.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
  }

 private:
  int fd_;
};

// The process's PMI-1 session, as MPI_Init and MPI_Finalize hold it: one init on the
// connection, and before the connection closes at exit the finalize handshake. Hydra counts
// a process whose connection closes without it as failed and kills the job's other ranks
// (SIGKILL, "BAD TERMINATION"), even when it exited 0; so the session stays open for the
// process's life and an atexit handler finalizes it.
struct Pmi1Session {
  std::mutex mutex;
  int fd = -1;
  std::string kvs;
  bool finalized = false;
};

Pmi1Session& pmi1Session() {
  static Pmi1Session* session = new Pmi1Session();  // outlives the atexit handler
  return *session;
}

void finalizePmi1AtExit() {
  Pmi1Session& session = pmi1Session();
  std::lock_guard lock(session.mutex);
  if (session.fd < 0 || session.finalized) return;
  session.finalized = true;
  // Bounded: a launcher that is gone already must not hold the exit up. Nothing to report
  // a failure to at exit.
  (void)Pmi1(session.fd).command("cmd=finalize\n", "finalize_ack", 10000);
}

// The session's KVS name, initializing the connection on the process's first call.
Result<std::string> pmi1Open(int fd) {
  Pmi1Session& session = pmi1Session();
  std::lock_guard lock(session.mutex);
  if (session.finalized) return invalidArgument("PMI-1: the session is finalized (at exit)");
  if (session.fd >= 0) {
    if (session.fd != fd) {
      return invalidArgument("PMI_FD changed from " + std::to_string(session.fd) + " to " +
                             std::to_string(fd) + " within one process");
    }
    return session.kvs;
  }
  Pmi1 pmi(fd);
  CC_TRY(pmi.command("cmd=init pmi_version=1 pmi_subversion=1\n", "response_to_init").status());
  CC_ASSIGN_OR_RETURN(std::string kvsReply, pmi.command("cmd=get_my_kvsname\n", "my_kvsname"));
  session.fd = fd;
  session.kvs = Pmi1::field(kvsReply, "kvsname");
  std::atexit(finalizePmi1AtExit);
  return session.kvs;
}

Result<LaunchInfo> viaPmi1(const Config& config) {
  LaunchInfo info;
  info.launcher = "pmi1";
  CC_ASSIGN_OR_RETURN(int fd, envInt("PMI_FD", 0, 1 << 20));
  CC_ASSIGN_OR_RETURN(info.rank, envInt("PMI_RANK", 0, wire::kMaxRanks - 1));
  CC_ASSIGN_OR_RETURN(info.nranks, envInt("PMI_SIZE", 1, wire::kMaxRanks));
  CC_ASSIGN_OR_RETURN(std::string kvs, pmi1Open(fd));
  Pmi1 pmi(fd);
  std::string key = "cc-uid-" + std::to_string(gGeneration.fetch_add(1));
  if (info.rank == 0) {
    CC_ASSIGN_OR_RETURN(info.id, bootstrap::startRoot(config));
    char encoded[CC_UNIQUE_ID_BYTES];
    wire::encodeUniqueId(info.id, encoded);
    std::string value = wire::toHex(std::as_bytes(std::span(encoded)));
    CC_TRY(pmi.command("cmd=put kvsname=" + kvs + " key=" + key + " value=" + value + "\n",
                       "put_result")
               .status());
  }
  CC_TRY(pmi.command("cmd=barrier_in\n", "barrier_out").status());
  if (info.rank != 0) {
    CC_ASSIGN_OR_RETURN(std::string reply,
                        pmi.command("cmd=get kvsname=" + kvs + " key=" + key + "\n", "get_result"));
    std::array<std::byte, CC_UNIQUE_ID_BYTES> bytes{};
    CC_TRY(wire::fromHex(Pmi1::field(reply, "value"), bytes));
    CC_ASSIGN_OR_RETURN(info.id, decodeId(bytes));
  }
  return info;
}

// torchrun-style and plain Slurm: rank 0 runs the root at MASTER_ADDR:port, where port is
// CC_MASTER_PORT, or MASTER_PORT + 1 under torchrun (whose agent already listens on
// MASTER_PORT), or MASTER_PORT. There is no private channel to carry a secret, so it
// comes from CC_BOOTSTRAP_SECRET, or is derived from the job's identity (with a warning).
Result<LaunchInfo> viaMasterAddress(const Config& config, int rank, int nranks,
                                    const std::string& launcher) {
  LaunchInfo info;
  info.launcher = launcher;
  info.rank = rank;
  info.nranks = nranks;
  const char* address = env("MASTER_ADDR");
  if (address == nullptr) return invalidArgument(launcher + " launch: MASTER_ADDR is not set");
  int port = 0;
  if (env("CC_MASTER_PORT") != nullptr) {
    CC_ASSIGN_OR_RETURN(port, envInt("CC_MASTER_PORT", 1, 65535));
  } else {
    CC_ASSIGN_OR_RETURN(port, envInt("MASTER_PORT", 1, 65534));
    if (env("TORCHELASTIC_RUN_ID") != nullptr) port += 1;
  }
  CC_ASSIGN_OR_RETURN(info.id.rootAddress,
                      resolveAddress(address, static_cast<uint16_t>(port), config.socketFamily));
  std::string seed;
  if (const char* secret = env("CC_BOOTSTRAP_SECRET")) {
    seed = secret;
  } else {
    seed = std::string("cc-derived|") + address + "|" + std::to_string(port) + "|" +
           std::to_string(nranks) + "|" +
           (env("TORCHELASTIC_RUN_ID") ? env("TORCHELASTIC_RUN_ID") : "") + "|" +
           (env("SLURM_JOB_ID") ? env("SLURM_JOB_ID") : "");
    if (rank == 0) {
      log::warn(
          "{} launch without CC_BOOTSTRAP_SECRET: the bootstrap secret is derived from the job's "
          "address and id, "
          "so anyone who knows them can join; export CC_BOOTSTRAP_SECRET=<random string> on every "
          "rank",
          launcher);
    }
  }
  SHA256(reinterpret_cast<const unsigned char*>(seed.data()), seed.size(),
         reinterpret_cast<unsigned char*>(info.id.secret.data()));
  if (rank == 0) {
    Status started = bootstrap::startRootAt(info.id.rootAddress, info.id.secret, config.timeoutMs);
    if (!started.isOk()) {
      // MASTER_ADDR may name this host by an address not on an interface (NAT, alias).
      SocketAddress any;
      any.storage.ss_family = static_cast<sa_family_t>(info.id.rootAddress.family());
      any.length = info.id.rootAddress.length;
      any.setPort(static_cast<uint16_t>(port));
      Status fallback = bootstrap::startRootAt(any, info.id.secret, config.timeoutMs);
      if (!fallback.isOk())
        return started.withContext("starting the bootstrap root at " +
                                   info.id.rootAddress.toString());
    }
  }
  return info;
}

}  // namespace

Result<LaunchInfo> rendezvousFromEnvironment(const Config& config) {
#ifdef CC_HAVE_PMIX
  if (env("PMIX_RANK") != nullptr && env("PMIX_NAMESPACE") != nullptr) return viaPmix(config);
#else
  if (env("PMIX_RANK") != nullptr && env("MASTER_ADDR") == nullptr) {
    return invalidArgument(
        "launched under PMIx (mpirun or srun --mpi=pmix) but cc was built without PMIx; "
        "install libpmix-dev and rebuild, or set MASTER_ADDR/MASTER_PORT");
  }
#endif
  if (env("PMI_FD") != nullptr && env("PMI_RANK") != nullptr) return viaPmi1(config);
  if (env("RANK") != nullptr && env("WORLD_SIZE") != nullptr) {
    CC_ASSIGN_OR_RETURN(int nranks, envInt("WORLD_SIZE", 1, wire::kMaxRanks));
    CC_ASSIGN_OR_RETURN(int rank, envInt("RANK", 0, nranks - 1));
    return viaMasterAddress(config, rank, nranks, "torchrun");
  }
  if (env("SLURM_PROCID") != nullptr && env("SLURM_NTASKS") != nullptr) {
    CC_ASSIGN_OR_RETURN(int nranks, envInt("SLURM_NTASKS", 1, wire::kMaxRanks));
    CC_ASSIGN_OR_RETURN(int rank, envInt("SLURM_PROCID", 0, nranks - 1));
    if (env("MASTER_ADDR") == nullptr) {
      return invalidArgument(
          "srun without PMIx: run with srun --mpi=pmix, or export MASTER_ADDR and MASTER_PORT "
          "(e.g. the first host of $SLURM_JOB_NODELIST and a free port)");
    }
    return viaMasterAddress(config, rank, nranks, "slurm");
  }
  LaunchInfo info;
  info.launcher = "single";
  CC_ASSIGN_OR_RETURN(info.id, bootstrap::startRoot(config));
  return info;
}

}  // namespace cc::comm
