// `--peer mpi` and `--peer gloo` for the collective subcommands: runs bench/ompi_coll.cc
// (under mpirun) and bench/gloo_coll.cc (N processes started here, TCP on 127.0.0.1) over
// the same rows as cc, one row at a time, interleaved with cc's rows.
//
// Interleaving works through gates: FIFOs in a private temporary directory, one per rank
// of each system. A rank waiting at its gate blocks in read() and uses no CPU, so while
// one system measures a row the others sleep. GateSet is the writing side (cc-bench's
// rank 0 holds every gate open read-write, so a peer's open never blocks and a peer sees
// end of file if cc-bench dies); the readers, cc's ranks > 0 included, use
// bench/coll_peer.h's Gate.
#pragma once

#include <cstdio>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "coll_options.h"
#include "coll_report.h"

namespace cc::bench {

// A private directory (mkdtemp), removed with everything in it on destruction.
class TempDirectory {
 public:
  TempDirectory();
  ~TempDirectory();
  TempDirectory(const TempDirectory&) = delete;
  TempDirectory& operator=(const TempDirectory&) = delete;
  const std::string& path() const { return path_; }  // empty when mkdtemp failed

 private:
  std::string path_;
};

// FIFOs PREFIX.first .. PREFIX.(nranks-1), made by create() before the readers start.
class GateSet {
 public:
  GateSet() = default;
  ~GateSet();
  GateSet(const GateSet&) = delete;
  GateSet& operator=(const GateSet&) = delete;

  // mkfifo for each rank in [first, nranks); false with `error` set on failure.
  static bool create(const std::string& prefix, int first, int nranks, std::string& error);
  // Opens them read-write (never blocks); false with `error` set on failure.
  bool open(const std::string& prefix, int first, int nranks, std::string& error);
  // One byte to every gate: each rank runs one row.
  void release();
  // Readers see end of file: they stop.
  void close();

 private:
  std::vector<int> fds_;
};

class PeerRun {
 public:
  // `name`: "mpi" or "gloo". Builds the command; start() runs it.
  PeerRun(std::string name, const CollOptions& options, int nranks, const std::string& workDir);
  ~PeerRun();
  PeerRun(const PeerRun&) = delete;
  PeerRun& operator=(const PeerRun&) = delete;

  // Starts the peer and waits until its ranks are ready at their gates. False (and the
  // reason in rows().note) when it cannot run.
  bool start();
  // Runs one row; the row lands in rows(). False once the peer has failed.
  bool step(const coll::Shape& shape);
  // Closes the gates and waits for the peer to exit.
  void finish();

  SystemRows& rows() { return rows_; }
  const SystemRows& rows() const { return rows_; }

 private:
  std::optional<std::string> readLine();
  void fail(const std::string& why);

  std::string name_;
  const CollOptions& options_;
  int nranks_;
  std::string gatePrefix_;
  std::string command_;
  GateSet gates_;
  std::FILE* output_ = nullptr;
  bool running_ = false;
  std::deque<std::string> lastLines_;  // the peer's other output, to explain a failure
  SystemRows rows_;
};

}  // namespace cc::bench
