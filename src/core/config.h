// Run-time configuration from CC_* environment variables, read when a communicator is
// created. docs/CONFIG.md lists every variable with its default; keep the two in step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace cc {

// CC_TRANSPORT. auto: shm within a host; across hosts ucx where UCX finds an RDMA
// transport, else tcp. shm, tcp and ucx force one transport for every peer.
enum class TransportChoice { kAuto, kShm, kTcp, kUcx };
// CC_NET (as NCCL_NET): the transport between hosts when CC_TRANSPORT is auto.
// auto: ucx where UCX finds an RDMA transport, else tcp.
enum class NetChoice { kAuto, kTcp, kUcx };

// CC_ALGO's values, in the order of collectives::Algorithm.
inline constexpr const char* kAlgorithmNames[] = {"auto",     "ring",  "tree", "direct", "hd",
                                                  "pairwise", "bruck", "hier", "dbt"};

struct Config {
  // A wait that sees no progress for this long fails with ccTimeout.
  int64_t timeoutMs = 300000;
  // How long a waiting rank spins before it sleeps; 0 sleeps at once; -1 (auto, the
  // default): comm/wait.h's choice, longer when ranks outnumber cores.
  int64_t spinMicros = -1;
  // CC_SPIN_YIELD: whether a spinning rank yields its CPU between looks. -1 (auto): only
  // when the ranks on this host outnumber its CPUs (comm/wait.h says why); 0 never; 1
  // always.
  int spinYield = -1;
  TransportChoice transport = TransportChoice::kAuto;
  NetChoice net = NetChoice::kAuto;
  std::string socketIfname;                // CC_SOCKET_IFNAME: interface (or prefix) for sockets
  int socketFamily = 0;                    // CC_SOCKET_FAMILY: AF_INET, AF_INET6 or 0 for either
  int tcpSocketsPerPeer = 2;               // CC_NSOCKS_PERTHREAD
  size_t tcpStripeThreshold = 256 * 1024;  // messages at least this big use every socket
  size_t shmSlotBytes = 128 * 1024;        // CC_SHM_SLOT_BYTES
  int shmSlots = 8;                        // CC_SHM_SLOTS
  size_t shmCmaThreshold = 1 << 20;        // CC_SHM_CMA_THRESHOLD: with CC_SHM_USE_CMA=1, from here
  // CC_SHM_USE_CMA: the single copy (peers read a plain buffer where it lies, with
  // process_vm_readv). -1 (auto, the default): offered to the copy chooser (core/copy.h)
  // on a host whose kernel copies between processes at least half as fast as memcpy
  // (transport/shm/channel.h), and taken call by call where it ran faster; on the KVM
  // guests we measured it moved 0.15-0.36x of memcpy, so there it is not offered.
  // 1: always, from CC_SHM_CMA_THRESHOLD bytes. 0: never.
  int shmUseCma = -1;
  // CC_SHM_PREFAULT. Shared memory (pair rings, direct staging) is made resident and touched
  // page by page at creation (doorbell.h, writeEveryPage), so the first collectives do not
  // pay ~8 us a page in a VM. 0 leaves it lazy: faster creation, slower first calls
  // (docs/CONFIG.md has the measured figures).
  bool shmPrefault = true;
  // Collectives (src/collectives). CC_ALGO: auto, ring, tree, direct, hd
  // (halving-doubling), pairwise, bruck, hier (hierarchical: within hosts, then across), dbt
  // (double binary tree); an algorithm that cannot run a collective is passed over for that
  // collective (CC_DEBUG=INFO says so).
  int algorithm = 0;                // index into kAlgorithmNames
  size_t chunkBytes = 0;            // CC_CHUNK_BYTES; 0: the tuner's choice
  bool checkCalls = false;          // CC_CHECK=1: verify every rank made the same call
  size_t directBytes = 4 << 20;     // CC_DIRECT_BYTES: each rank's staging for direct
  std::string tracePath;            // CC_TRACE
  int flightRecorderEntries = 256;  // CC_FLIGHT_RECORDER_ENTRIES

  static Result<Config> fromEnvironment();
};

}  // namespace cc
