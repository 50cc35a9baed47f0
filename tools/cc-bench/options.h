// Command-line options of `cc-bench p2p`, parsed by hand (the tool has no dependencies
// beyond cc and fmt). Sizes take the suffixes K, M, G, powers of 1024.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sweep.h"

namespace cc::bench {

struct P2pOptions {
  SweepOptions sweep;
  int nranks = 2;                                     // -np, for ranks forked locally
  std::vector<std::string> transports{"shm", "tcp"};  // --transport shm|tcp|both
  bool transportGiven = false;                        // --transport appeared on the line
  bool peerMpi = false;                               // --peer mpi
  std::string jsonPath;                               // --json FILE; empty: no JSON
};

// "64", "4K", "256M", "1G" -> bytes; nullopt for anything else.
std::optional<size_t> parseSize(std::string_view text);

// Parses the arguments after "p2p". On a bad line, returns nullopt and sets `error`.
std::optional<P2pOptions> parseP2pOptions(const std::vector<std::string_view>& args,
                                          std::string& error);

extern const char* const kP2pUsage;

}  // namespace cc::bench
