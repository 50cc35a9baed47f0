// The topology file: a System (hosts, their sockets, NUMA nodes, NICs, GPUs and links,
// the network between hosts, and optionally the ranks' placement) as JSON.
// docs/TOPOLOGY.md documents the format with an example. CC_TOPO_FILE loads a file in
// place of the detected system; CC_TOPO_DUMP_FILE writes the detected one.
//
// Parsing is strict, because a typo in a hand-written file should not silently become a
// different machine: unknown fields, wrong types and dangling indices are errors
// (ccInvalidArgument) that name the file, the field and the problem.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "topology/system.h"

namespace cc::topology {

inline constexpr const char* kTopologyFormat = "cc-topology";
inline constexpr int kTopologyVersion = 1;

// The whole system as the file's JSON text (indented, ends with a newline).
std::string toJson(const System& system);
// Parses and validates; `origin` (a path, or "CC_TOPO_FILE") prefixes every message.
Result<System> parseSystem(std::string_view text, const std::string& origin);

// One host alone, in the same shape as an element of the file's "hosts" (ranks can send
// their discovered host to each other in this form).
std::string hostToJson(const Host& host);
Result<Host> parseHost(std::string_view text, const std::string& origin);

Result<System> readSystemFile(const std::string& path);
Status writeSystemFile(const System& system, const std::string& path);

// CC_TOPO_FILE: the system it names, or nullopt when it is unset.
Result<std::optional<System>> systemFromEnvironment();
// CC_TOPO_DUMP_FILE: writes `system` there when it is set (and does nothing otherwise).
Status dumpToEnvironmentFile(const System& system);

}  // namespace cc::topology
