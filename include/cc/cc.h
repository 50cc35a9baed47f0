/*
 * cc — a collective communication library for CPU clusters and GPUs.
 *
 * The API is shaped like NCCL's nccl.h: the same names with the prefix `cc`, the same
 * argument order. Every function returns a ccResult_t; nothing throws across this
 * boundary. When a call fails, ccGetLastError(comm) says what failed: the argument,
 * the peer rank, the operation and its sequence number.
 *
 * Operations on a communicator are ordered. A call on the NULL stream completes
 * before it returns; a call on a stream made with ccStreamCreate is queued and runs
 * in order in the background while the caller computes.
 */
#ifndef CC_CC_H_
#define CC_CC_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CC_MAJOR 0
#define CC_MINOR 1
#define CC_PATCH 0
#define CC_VERSION_CODE (CC_MAJOR * 10000 + CC_MINOR * 100 + CC_PATCH)

/* Opaque handles. */
typedef struct ccComm* ccComm_t;
typedef struct ccStream* ccStream_t;

/* Everything needed to join a communicator: the bootstrap root's address and a fresh
 * random secret. Treat it as a password: whoever holds it can join. */
#define CC_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[CC_UNIQUE_ID_BYTES];
} ccUniqueId;

typedef enum {
  ccSuccess = 0,
  ccSystemError = 2,     /* a system call failed (socket, mmap, ...) */
  ccInternalError = 3,   /* a bug in cc */
  ccInvalidArgument = 4, /* a bad argument: the message names it */
  ccInvalidUsage = 5,    /* a valid argument used wrongly (e.g. send to self outside a group) */
  ccRemoteError = 6,     /* a peer died or misbehaved */
  ccInProgress = 7,      /* queued work has not finished yet (ccStreamQuery) */
  ccTimeout = 8,         /* nothing moved for CC_TIMEOUT_MS */
  ccNumResults = 9
} ccResult_t;

typedef enum {
  ccInt8 = 0,
  ccChar = 0,
  ccUint8 = 1,
  ccInt32 = 2,
  ccInt = 2,
  ccUint32 = 3,
  ccInt64 = 4,
  ccUint64 = 5,
  ccFloat16 = 6,
  ccHalf = 6,
  ccFloat32 = 7,
  ccFloat = 7,
  ccFloat64 = 8,
  ccDouble = 8,
  ccBfloat16 = 9,
  ccNumTypes = 10
} ccDataType_t;

typedef enum { ccSum = 0, ccProd = 1, ccMax = 2, ccMin = 3, ccAvg = 4, ccNumOps = 5 } ccRedOp_t;

/* ccCommSplit: a rank passing this color gets no new communicator (*newcomm = NULL). */
#define CC_SPLIT_NOCOLOR (-1)

/* Library version as CC_VERSION_CODE. */
ccResult_t ccGetVersion(int* version);

/* Starts the bootstrap root in this process (a background thread that lives until the
 * communicator it serves is formed, or CC_TIMEOUT_MS passes) and writes its address and
 * a fresh secret into *uniqueId. Pass the id to every rank (over MPI, a file, a pipe). */
ccResult_t ccGetUniqueId(ccUniqueId* uniqueId);

/* Joins communicator `commId` as rank `rank` of `nranks`. Collective over all ranks. */
ccResult_t ccCommInitRank(ccComm_t* comm, int nranks, ccUniqueId commId, int rank);

/* Per-communicator settings (as NCCL's ncclConfig_t): start from CC_CONFIG_INITIALIZER
 * and set what differs; a field left at CC_CONFIG_UNDEF_INT takes its environment
 * variable's value (docs/CONFIG.md). Communicators split from this one inherit it. */
#define CC_CONFIG_UNDEF_INT (-2147483647 - 1)
typedef struct {
  size_t size;   /* sizeof(ccConfig_t): set by CC_CONFIG_INITIALIZER */
  int timeoutMs; /* every wait's deadline (CC_TIMEOUT_MS), at least 1 */
} ccConfig_t;
#define CC_CONFIG_INITIALIZER \
  { sizeof(ccConfig_t), CC_CONFIG_UNDEF_INT }

/* ccCommInitRank with settings that override the environment's for this communicator
 * (a trainer's own timeout, for example). `config` may be NULL. */
ccResult_t ccCommInitRankConfig(ccComm_t* comm, int nranks, ccUniqueId commId, int rank,
                                const ccConfig_t* config);
/* ccGetUniqueId whose bootstrap root waits for the ranks as long as config->timeoutMs. */
ccResult_t ccGetUniqueIdConfig(ccUniqueId* uniqueId, const ccConfig_t* config);

/* Creates `ndev` ranks in this process, one thread each behind the scenes; comms[i] is
 * rank i. `devlist` names a GPU per rank (ignored without CUDA; may be NULL). */
ccResult_t ccCommInitAll(ccComm_t* comms, int ndev, const int* devlist);

/* Creates the world communicator from the launcher's environment with no other
 * configuration: Open MPI's mpirun and srun --mpi=pmix (through PMIx), MPICH's mpiexec
 * (PMI-1), torchrun-style RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, Slurm's SLURM_PROCID
 * with MASTER_ADDR/MASTER_PORT; with none of them, a communicator of one rank.
 * docs/LAUNCHERS.md says how the ranks find each other under each. */
ccResult_t ccCommInitFromEnv(ccComm_t* comm);

/* Collective over `comm`: ranks with the same color form a new communicator, ordered by
 * key and then by their rank in `comm`. */
ccResult_t ccCommSplit(ccComm_t comm, int color, int key, ccComm_t* newcomm);

/* Frees the communicator. Operations already queued on streams keep it alive until they
 * have run; synchronize the streams first to see their results. */
ccResult_t ccCommDestroy(ccComm_t comm);

/* Stops every operation of this communicator (from any thread: a thread blocked inside
 * cc returns with an error) and frees it. Never blocks for long. */
ccResult_t ccCommAbort(ccComm_t comm);

/* The first error an operation on this communicator met, or ccSuccess. */
ccResult_t ccCommGetAsyncError(ccComm_t comm, ccResult_t* asyncError);

ccResult_t ccCommCount(const ccComm_t comm, int* count);
ccResult_t ccCommUserRank(const ccComm_t comm, int* rank);

/* Traffic counters (a cc extension; NCCL has none): what this rank moved on `comm`
 * since it was created, per kind of operation, so that a program can check what a
 * step costs. Bytes sent are the bytes of this rank's data that peers received (over a
 * channel, or read from this rank's shared memory by the direct algorithms); bytes
 * received are the bytes that arrived here from peers. Copies to oneself are not
 * traffic. `calls` counts collective calls, and for ccTrafficSendRecv the ccSend and
 * ccRecv calls to other ranks (each one). ccTrafficControl is cc's own small messages
 * (barriers, splits, CC_CHECK's call descriptors, the topology exchange at creation). */
typedef enum {
  ccTrafficAllReduce = 0,
  ccTrafficBroadcast = 1,
  ccTrafficReduce = 2,
  ccTrafficAllGather = 3,
  ccTrafficReduceScatter = 4,
  ccTrafficAllToAll = 5,
  ccTrafficAllToAllv = 6,
  ccTrafficSendRecv = 7,
  ccTrafficControl = 8,
  ccNumTrafficKinds = 9
} ccTrafficKind_t;
typedef struct {
  uint64_t calls;
  uint64_t bytesSent;
  uint64_t bytesReceived;
} ccTraffic_t;
ccResult_t ccCommGetTraffic(const ccComm_t comm, ccTrafficKind_t kind, ccTraffic_t* traffic);

/* Annotations (a cc extension, as NVTX ranges are beside NCCL): with CC_TRACE set, a range
 * of the caller's own work (a forward, a backward) becomes a span in this rank's trace
 * file, on a track of its own ("user ranges") beside the communicators' operations, so
 * that compute and communication show in one timeline. Ranges nest: pop closes the
 * latest range pushed on `comm` (ccInvalidArgument when none is open). The name is
 * copied. Without CC_TRACE they keep the nesting and record nothing. */
ccResult_t ccTraceRangePush(ccComm_t comm, const char* name);
ccResult_t ccTraceRangePop(ccComm_t comm);

/* Registered buffers, as NCCL's ncclMemAlloc and ncclCommRegister. ccMemAlloc returns
 * page-aligned memory that cc can share with the other ranks on this host (an anonymous
 * memfd: nothing is left behind when the process dies); ccMemFree releases it (NULL is a
 * no-op; memory still registered is refused with ccInvalidUsage). ccCommRegister makes
 * [buff, buff + size), which must lie inside one ccMemAlloc allocation, known to `comm`
 * and returns a handle for ccCommDeregister. A collective on one host whose send or
 * receive buffer lies inside a registration lets the other ranks read it in place
 * instead of copying it through cc's staging; each rank decides for its own buffers, so
 * registering on only some ranks is correct, just slower. A rank returns from such a
 * collective only once the others have finished reading its buffers. The peers map the
 * memory through /proc/<pid>/fd, so the ranks of a host must run as one user. */
ccResult_t ccMemAlloc(void** ptr, size_t size);
ccResult_t ccMemFree(void* ptr);
ccResult_t ccCommRegister(const ccComm_t comm, void* buff, size_t size, void** handle);
ccResult_t ccCommDeregister(const ccComm_t comm, void* handle);

/* A fixed string for a result code. */
const char* ccGetErrorString(ccResult_t result);

/* What the last failed call on `comm` (or, with comm NULL, on this thread) was about.
 * The pointer stays valid until the next cc call from this thread. */
const char* ccGetLastError(ccComm_t comm);

/* Point-to-point. Each send must meet a receive of the same byte count on the peer.
 * Inside ccGroupStart/ccGroupEnd, all operations progress together (so everyone can
 * send right and receive left without deadlock) and a rank may send to itself. */
ccResult_t ccSend(const void* sendbuff, size_t count, ccDataType_t datatype, int peer,
                  ccComm_t comm, ccStream_t stream);
ccResult_t ccRecv(void* recvbuff, size_t count, ccDataType_t datatype, int peer, ccComm_t comm,
                  ccStream_t stream);

ccResult_t ccGroupStart(void);
ccResult_t ccGroupEnd(void);

/* Returns once every rank of `comm` has entered the barrier. */
ccResult_t ccBarrier(ccComm_t comm, ccStream_t stream);

/* Collectives. NCCL's signatures and meaning: every rank of `comm` makes the same call
 * (same collective, count, datatype, op and root) in the same order. Counts are in
 * elements of `datatype`; a count of 0 is a valid no-op. sendbuff == recvbuff works in
 * place; for all-gather in place means sendbuff == recvbuff + rank * sendcount elements,
 * for reduce-scatter recvbuff == sendbuff + rank * recvcount elements.
 *
 * Results are bit-for-bit the same on every rank, and the same call on the same
 * communicator gives the same bits every time. ccAvg is a sum followed by a division by
 * the rank count; integer sums wrap; float16 and bfloat16 are reduced in float32 and
 * rounded once per reduction step. CC_ALGO and CC_CHUNK_BYTES override the tuner
 * (docs/CONFIG.md); CC_CHECK=1 verifies that every rank made the same call. */
ccResult_t ccAllReduce(const void* sendbuff, void* recvbuff, size_t count, ccDataType_t datatype,
                       ccRedOp_t op, ccComm_t comm, ccStream_t stream);
/* Copies `count` elements of root's sendbuff into every rank's recvbuff (sendbuff is
 * read only on the root). */
ccResult_t ccBroadcast(const void* sendbuff, void* recvbuff, size_t count, ccDataType_t datatype,
                       int root, ccComm_t comm, ccStream_t stream);
/* Reduces every rank's sendbuff into root's recvbuff (recvbuff is written only on the
 * root, and may be NULL elsewhere). */
ccResult_t ccReduce(const void* sendbuff, void* recvbuff, size_t count, ccDataType_t datatype,
                    ccRedOp_t op, int root, ccComm_t comm, ccStream_t stream);
/* recvbuff (nranks * sendcount elements) receives every rank's sendbuff in rank order. */
ccResult_t ccAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                       ccDataType_t datatype, ccComm_t comm, ccStream_t stream);
/* sendbuff holds nranks * recvcount elements; rank i's recvbuff receives the reduction of
 * everyone's block i. */
ccResult_t ccReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                           ccDataType_t datatype, ccRedOp_t op, ccComm_t comm, ccStream_t stream);
/* Block j (count elements) of sendbuff goes to rank j, which stores it as block i of its
 * recvbuff (i = this rank). Both buffers hold nranks * count elements; in place is not
 * supported (sendbuff and recvbuff must not overlap). */
ccResult_t ccAllToAll(const void* sendbuff, void* recvbuff, size_t count, ccDataType_t datatype,
                      ccComm_t comm, ccStream_t stream);
/* All-to-all with per-peer counts and displacements in elements, as MPI_Alltoallv:
 * sendcounts[j] elements at sendbuff + sdispls[j] go to rank j, and recvcounts[j]
 * elements from rank j land at recvbuff + rdispls[j]. recvcounts[j] here must equal
 * sendcounts[this rank] on rank j; a mismatch is an error, not a truncation. */
ccResult_t ccAllToAllv(const void* sendbuff, const size_t sendcounts[], const size_t sdispls[],
                       void* recvbuff, const size_t recvcounts[], const size_t rdispls[],
                       ccDataType_t datatype, ccComm_t comm, ccStream_t stream);

/* Gather and scatter (NCCL's guide builds them from grouped ncclSend/ncclRecv; cc names
 * them, and runs them so: their messages count as ccTrafficSendRecv). ccGather: root's
 * recvbuff (nranks * count elements) receives every rank's sendbuff in rank order; recvbuff
 * is read only on the root. ccScatter: block i of root's sendbuff (nranks * count) goes to
 * rank i's recvbuff; sendbuff is read only on the root. In place on the root: sendbuff (for
 * gather) or recvbuff (for scatter) is the root's own block. Inside ccGroupStart/End they
 * join the group. */
ccResult_t ccGather(const void* sendbuff, void* recvbuff, size_t count, ccDataType_t datatype,
                    int root, ccComm_t comm, ccStream_t stream);
ccResult_t ccScatter(const void* sendbuff, void* recvbuff, size_t count, ccDataType_t datatype,
                     int root, ccComm_t comm, ccStream_t stream);

/* Streams: an ordered queue of operations that a background thread runs while the
 * caller computes. Buffers passed to a queued operation must stay valid until the
 * stream is synchronized. */
ccResult_t ccStreamCreate(ccStream_t* stream);
/* Waits for everything queued so far; returns the first error among them. */
ccResult_t ccStreamSynchronize(ccStream_t stream);
/* ccSuccess when everything queued has finished, ccInProgress while some has not, or the
 * first error among finished operations. */
ccResult_t ccStreamQuery(ccStream_t stream);
/* Waits for the queued operations, then frees the stream. */
ccResult_t ccStreamDestroy(ccStream_t stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CC_CC_H_ */
