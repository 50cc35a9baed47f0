#include "topology/file.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

namespace cc::topology {
namespace {

using nlohmann::json;

// ---- writing ------------------------------------------------------------------------------

json endpointToJson(const Endpoint& end) {
  return std::string(toString(end.kind)) + ":" + std::to_string(end.index);
}

json hostObject(const Host& host) {
  json sockets = json::array();
  for (const Socket& socket : host.sockets) {
    sockets.push_back({{"os_index", socket.osIndex}, {"l3_bytes", socket.l3Bytes}});
  }
  json numaNodes = json::array();
  for (const NumaNode& node : host.numaNodes) {
    numaNodes.push_back({{"os_index", node.osIndex},
                         {"socket", node.socket},
                         {"cpus", formatCpuList(node.cpus)},
                         {"cores", node.cores},
                         {"memory_bytes", node.memoryBytes},
                         {"l3_bytes", node.l3Bytes}});
  }
  json nics = json::array();
  for (const Nic& nic : host.nics) {
    nics.push_back({{"name", nic.name},
                    {"kind", toString(nic.kind)},
                    {"numa", nic.numa},
                    {"speed_gbps", nic.speedGbps},
                    {"up", nic.up},
                    {"virtual", nic.isVirtual},
                    {"pci", nic.pciBusId},
                    {"port", nic.port},
                    {"gid", nic.gid},
                    {"netdev", nic.netdev}});
  }
  json gpus = json::array();
  for (const Gpu& gpu : host.gpus) {
    gpus.push_back({{"index", gpu.index},
                    {"name", gpu.name},
                    {"pci", gpu.pciBusId},
                    {"numa", gpu.numa},
                    {"memory_bytes", gpu.memoryBytes}});
  }
  json links = json::array();
  for (const Link& link : host.links) {
    links.push_back({{"a", endpointToJson(link.a)},
                     {"b", endpointToJson(link.b)},
                     {"kind", toString(link.kind)},
                     {"bandwidth_gbs", link.bandwidthGBs},
                     {"latency_us", link.latencyUs}});
  }
  return {{"name", host.name},  {"identity", host.identity},
          {"sockets", sockets}, {"numa_nodes", numaNodes},
          {"nics", nics},       {"gpus", gpus},
          {"links", links}};
}

json systemObject(const System& system) {
  json hosts = json::array();
  for (const Host& host : system.hosts) hosts.push_back(hostObject(host));
  json network = json::array();
  for (const NetworkLink& link : system.networkLinks) {
    network.push_back({{"hosts", {link.hostA, link.hostB}},
                       {"nics", {link.nicA, link.nicB}},
                       {"bandwidth_gbs", link.bandwidthGBs},
                       {"latency_us", link.latencyUs}});
  }
  json ranks = json::array();
  for (const RankPlace& place : system.ranks) {
    ranks.push_back({{"host", place.host}, {"numa", place.numa}, {"gpu", place.gpu}});
  }
  return {{"format", kTopologyFormat},
          {"version", kTopologyVersion},
          {"hosts", hosts},
          {"network", network},
          {"ranks", ranks}};
}

// ---- reading: one small reader per JSON type, each naming the field on failure ---------

std::string member(const std::string& where, std::string_view key) {
  return where.empty() ? std::string(key) : where + "." + std::string(key);
}
std::string element(const std::string& where, size_t index) {
  return where + "[" + std::to_string(index) + "]";
}

Status expectObject(const json& value, const std::string& where,
                    std::initializer_list<std::string_view> known) {
  if (!value.is_object()) {
    return invalidArgument((where.empty() ? "top level" : where) + ": expected an object, found " +
                           value.type_name());
  }
  for (const auto& item : value.items()) {
    bool isKnown = false;
    for (std::string_view key : known) isKnown = isKnown || key == item.key();
    if (isKnown) continue;
    std::string list;
    for (std::string_view key : known) list += (list.empty() ? "" : ", ") + std::string(key);
    return invalidArgument(member(where, item.key()) + ": unknown field (expected one of " + list +
                           ")");
  }
  return Status::ok();
}

// The member `key` of `object`, or nullptr when absent (then `required` decides).
Result<const json*> find(const json& object, const std::string& where, const char* key,
                         bool required) {
  const auto found = object.find(key);
  if (found != object.end()) return &*found;
  if (required) return invalidArgument(member(where, key) + ": missing");
  return static_cast<const json*>(nullptr);
}

Status readString(const json& object, const std::string& where, const char* key, bool required,
                  std::string& out) {
  CC_ASSIGN_OR_RETURN(const json* value, find(object, where, key, required));
  if (value == nullptr) return Status::ok();
  if (!value->is_string()) {
    return invalidArgument(member(where, key) + ": expected a string, found " + value->type_name());
  }
  out = value->get<std::string>();
  return Status::ok();
}

Status readBool(const json& object, const std::string& where, const char* key, bool& out) {
  CC_ASSIGN_OR_RETURN(const json* value, find(object, where, key, false));
  if (value == nullptr) return Status::ok();
  if (!value->is_boolean()) {
    return invalidArgument(member(where, key) + ": expected true or false, found " +
                           value->type_name());
  }
  out = value->get<bool>();
  return Status::ok();
}

Status readInt(const json& object, const std::string& where, const char* key, bool required,
               int64_t low, int64_t high, int64_t& out) {
  CC_ASSIGN_OR_RETURN(const json* value, find(object, where, key, required));
  if (value == nullptr) return Status::ok();
  if (!value->is_number_integer()) {
    return invalidArgument(member(where, key) + ": expected an integer, found " + value->dump());
  }
  // Unsigned JSON numbers above INT64_MAX are out of range whatever the bounds.
  const bool tooBig =
      value->is_number_unsigned() &&
      value->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  const int64_t number = tooBig ? std::numeric_limits<int64_t>::max() : value->get<int64_t>();
  if (tooBig || number < low || number > high) {
    return invalidArgument(member(where, key) + ": " + value->dump() + " is not in [" +
                           std::to_string(low) + ", " + std::to_string(high) + "]");
  }
  out = number;
  return Status::ok();
}

template <typename Integer>
Status readInteger(const json& object, const std::string& where, const char* key, bool required,
                   int64_t low, Integer& out) {
  int64_t value = static_cast<int64_t>(out);
  int64_t high = std::numeric_limits<int64_t>::max();
  if constexpr (sizeof(Integer) < sizeof(int64_t)) high = std::numeric_limits<Integer>::max();
  CC_TRY(readInt(object, where, key, required, low, high, value));
  out = static_cast<Integer>(value);
  return Status::ok();
}

Status readRate(const json& object, const std::string& where, const char* key, bool required,
                double& out) {
  CC_ASSIGN_OR_RETURN(const json* value, find(object, where, key, required));
  if (value == nullptr) return Status::ok();
  if (!value->is_number() || !std::isfinite(value->get<double>()) || value->get<double>() < 0) {
    return invalidArgument(member(where, key) + ": expected a number >= 0, found " + value->dump());
  }
  out = value->get<double>();
  return Status::ok();
}

// An array member; absent optional arrays read as empty.
Result<const json*> findArray(const json& object, const std::string& where, const char* key,
                              bool required) {
  CC_ASSIGN_OR_RETURN(const json* value, find(object, where, key, required));
  if (value != nullptr && !value->is_array()) {
    return invalidArgument(member(where, key) + ": expected an array, found " + value->type_name());
  }
  return value;
}

// Reads each element of the array `key` with `readOne(element, where)`.
template <typename T, typename ReadOne>
Status readArray(const json& object, const std::string& where, const char* key, bool required,
                 std::vector<T>& out, ReadOne readOne) {
  CC_ASSIGN_OR_RETURN(const json* array, findArray(object, where, key, required));
  if (array == nullptr) return Status::ok();
  for (size_t i = 0; i < array->size(); ++i) {
    T item;
    CC_TRY(readOne((*array)[i], element(member(where, key), i), item));
    out.push_back(std::move(item));
  }
  return Status::ok();
}

Status readSocket(const json& value, const std::string& where, Socket& socket) {
  CC_TRY(expectObject(value, where, {"os_index", "l3_bytes"}));
  CC_TRY(readInteger(value, where, "os_index", false, 0, socket.osIndex));
  return readInteger(value, where, "l3_bytes", false, 0, socket.l3Bytes);
}

Status readNumaNode(const json& value, const std::string& where, NumaNode& node) {
  CC_TRY(expectObject(value, where,
                      {"os_index", "socket", "cpus", "cores", "memory_bytes", "l3_bytes"}));
  CC_TRY(readInteger(value, where, "os_index", false, 0, node.osIndex));
  CC_TRY(readInteger(value, where, "socket", true, 0, node.socket));
  std::string cpus;
  CC_TRY(readString(value, where, "cpus", true, cpus));
  auto parsed = parseCpuList(cpus);
  if (!parsed) {
    return invalidArgument(member(where, "cpus") + ": \"" + cpus +
                           "\" is not a CPU list like \"0-15,32-47\"");
  }
  node.cpus = std::move(*parsed);
  CC_TRY(readInteger(value, where, "cores", true, 0, node.cores));
  CC_TRY(readInteger(value, where, "memory_bytes", false, 0, node.memoryBytes));
  return readInteger(value, where, "l3_bytes", false, 0, node.l3Bytes);
}

Status readNic(const json& value, const std::string& where, Nic& nic) {
  CC_TRY(expectObject(
      value, where,
      {"name", "kind", "numa", "speed_gbps", "up", "virtual", "pci", "port", "gid", "netdev"}));
  CC_TRY(readString(value, where, "name", true, nic.name));
  std::string kind;
  CC_TRY(readString(value, where, "kind", true, kind));
  const auto parsedKind = nicKindFromString(kind);
  if (!parsedKind) {
    return invalidArgument(member(where, "kind") + ": \"" + kind +
                           "\" is not ethernet, infiniband or roce");
  }
  nic.kind = *parsedKind;
  nic.up = true;  // a hand-written NIC is there to be used
  CC_TRY(readInteger(value, where, "numa", false, -1, nic.numa));
  CC_TRY(readRate(value, where, "speed_gbps", false, nic.speedGbps));
  CC_TRY(readBool(value, where, "up", nic.up));
  CC_TRY(readBool(value, where, "virtual", nic.isVirtual));
  CC_TRY(readString(value, where, "pci", false, nic.pciBusId));
  CC_TRY(readInteger(value, where, "port", false, 0, nic.port));
  CC_TRY(readString(value, where, "gid", false, nic.gid));
  return readString(value, where, "netdev", false, nic.netdev);
}

Status readGpu(const json& value, const std::string& where, Gpu& gpu) {
  CC_TRY(expectObject(value, where, {"index", "name", "pci", "numa", "memory_bytes"}));
  gpu.index = -1;
  CC_TRY(readInteger(value, where, "index", false, 0, gpu.index));
  CC_TRY(readString(value, where, "name", false, gpu.name));
  CC_TRY(readString(value, where, "pci", false, gpu.pciBusId));
  CC_TRY(readInteger(value, where, "numa", false, -1, gpu.numa));
  return readInteger(value, where, "memory_bytes", false, 0, gpu.memoryBytes);
}

Status readEndpoint(const json& object, const std::string& where, const char* key, Endpoint& end) {
  std::string text;
  CC_TRY(readString(object, where, key, true, text));
  const size_t colon = text.find(':');
  const auto kind = endpointKindFromString(std::string_view(text).substr(0, colon));
  char* last = nullptr;
  const long index =
      colon == std::string::npos ? -1 : std::strtol(text.c_str() + colon + 1, &last, 10);
  if (!kind || index < 0 || index > std::numeric_limits<int>::max() ||
      last == text.c_str() + colon + 1 || *last != '\0') {
    return invalidArgument(member(where, key) + ": \"" + text + "\" is not numa:N, nic:N or gpu:N");
  }
  end = Endpoint{*kind, static_cast<int>(index)};
  return Status::ok();
}

Status readLink(const json& value, const std::string& where, Link& link) {
  CC_TRY(expectObject(value, where, {"a", "b", "kind", "bandwidth_gbs", "latency_us"}));
  CC_TRY(readEndpoint(value, where, "a", link.a));
  CC_TRY(readEndpoint(value, where, "b", link.b));
  std::string kind;
  CC_TRY(readString(value, where, "kind", true, kind));
  const auto parsedKind = linkKindFromString(kind);
  if (!parsedKind) {
    return invalidArgument(member(where, "kind") + ": \"" + kind +
                           "\" is not memory, pcie, gpu-peer or nvlink");
  }
  link.kind = *parsedKind;
  CC_TRY(readRate(value, where, "bandwidth_gbs", true, link.bandwidthGBs));
  return readRate(value, where, "latency_us", true, link.latencyUs);
}

Status readHost(const json& value, const std::string& where, Host& host) {
  CC_TRY(expectObject(value, where,
                      {"name", "identity", "sockets", "numa_nodes", "nics", "gpus", "links"}));
  CC_TRY(readString(value, where, "name", true, host.name));
  CC_TRY(readString(value, where, "identity", false, host.identity));
  CC_TRY(readArray(value, where, "sockets", true, host.sockets, readSocket));
  CC_TRY(readArray(value, where, "numa_nodes", true, host.numaNodes, readNumaNode));
  CC_TRY(readArray(value, where, "nics", false, host.nics, readNic));
  CC_TRY(readArray(value, where, "gpus", false, host.gpus, readGpu));
  for (size_t i = 0; i < host.gpus.size(); ++i) {
    if (host.gpus[i].index < 0) host.gpus[i].index = static_cast<int>(i);  // default: position
  }
  return readArray(value, where, "links", false, host.links, readLink);
}

// A pair [x, y] of integers (a network link's hosts or NICs).
Status readPair(const json& object, const std::string& where, const char* key, int& first,
                int& second) {
  CC_ASSIGN_OR_RETURN(const json* array, findArray(object, where, key, true));
  if (array->size() != 2 || !(*array)[0].is_number_integer() || !(*array)[1].is_number_integer()) {
    return invalidArgument(member(where, key) + ": expected two integers, found " + array->dump());
  }
  const int64_t a = (*array)[0].get<int64_t>();
  const int64_t b = (*array)[1].get<int64_t>();
  if (a < 0 || b < 0 || a > std::numeric_limits<int>::max() ||
      b > std::numeric_limits<int>::max()) {
    return invalidArgument(member(where, key) + ": " + array->dump() +
                           " holds a negative or huge index");
  }
  first = static_cast<int>(a);
  second = static_cast<int>(b);
  return Status::ok();
}

Status readNetworkLink(const json& value, const std::string& where, NetworkLink& link) {
  CC_TRY(expectObject(value, where, {"hosts", "nics", "bandwidth_gbs", "latency_us"}));
  CC_TRY(readPair(value, where, "hosts", link.hostA, link.hostB));
  CC_TRY(readPair(value, where, "nics", link.nicA, link.nicB));
  CC_TRY(readRate(value, where, "bandwidth_gbs", true, link.bandwidthGBs));
  return readRate(value, where, "latency_us", true, link.latencyUs);
}

Status readRankPlace(const json& value, const std::string& where, RankPlace& place) {
  CC_TRY(expectObject(value, where, {"host", "numa", "gpu"}));
  CC_TRY(readInteger(value, where, "host", true, 0, place.host));
  CC_TRY(readInteger(value, where, "numa", false, -1, place.numa));
  return readInteger(value, where, "gpu", false, -1, place.gpu);
}

Status readSystem(const json& value, System& system) {
  CC_TRY(expectObject(value, "", {"format", "version", "hosts", "network", "ranks"}));
  std::string format;
  CC_TRY(readString(value, "", "format", true, format));
  if (format != kTopologyFormat) {
    return invalidArgument("format: \"" + format + "\" is not \"" + kTopologyFormat + "\"");
  }
  int version = 0;
  CC_TRY(readInteger(value, "", "version", true, 0, version));
  if (version != kTopologyVersion) {
    return invalidArgument("version: " + std::to_string(version) +
                           " is not supported (this cc reads " + std::to_string(kTopologyVersion) +
                           ")");
  }
  CC_TRY(readArray(value, "", "hosts", true, system.hosts, readHost));
  CC_TRY(readArray(value, "", "network", false, system.networkLinks, readNetworkLink));
  return readArray(value, "", "ranks", false, system.ranks, readRankPlace);
}

Result<json> parseJson(std::string_view text, const std::string& origin) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::parse_error& error) {
    return invalidArgument(origin + ": not valid JSON: " + error.what());
  }
}

}  // namespace

std::string toJson(const System& system) { return systemObject(system).dump(2) + "\n"; }

std::string hostToJson(const Host& host) { return hostObject(host).dump(); }

Result<System> parseSystem(std::string_view text, const std::string& origin) {
  CC_ASSIGN_OR_RETURN(json document, parseJson(text, origin));
  System system;
  CC_TRY(readSystem(document, system).withContext(origin));
  CC_TRY(validate(system).withContext(origin));
  return system;
}

Result<Host> parseHost(std::string_view text, const std::string& origin) {
  CC_ASSIGN_OR_RETURN(json document, parseJson(text, origin));
  System system;
  system.hosts.emplace_back();
  CC_TRY(readHost(document, "host", system.hosts[0]).withContext(origin));
  CC_TRY(validate(system).withContext(origin));
  return std::move(system.hosts[0]);
}

Result<System> readSystemFile(const std::string& path) {
  std::ifstream file(path);
  if (!file) return systemError("topology file " + path + ": cannot open", errno);
  std::ostringstream text;
  text << file.rdbuf();
  if (file.bad()) return systemError("topology file " + path + ": cannot read", errno);
  return parseSystem(text.str(), path);
}

Status writeSystemFile(const System& system, const std::string& path) {
  std::ofstream file(path, std::ios::trunc);
  if (!file) return systemError("topology file " + path + ": cannot create", errno);
  file << toJson(system);
  file.close();
  if (!file) return systemError("topology file " + path + ": cannot write", errno);
  return Status::ok();
}

Result<std::optional<System>> systemFromEnvironment() {
  const char* path = std::getenv("CC_TOPO_FILE");
  if (path == nullptr || *path == '\0') return std::optional<System>();
  auto system = readSystemFile(path);
  if (!system.isOk()) return system.status().withContext("CC_TOPO_FILE");
  return std::optional<System>(std::move(system).value());
}

Status dumpToEnvironmentFile(const System& system) {
  const char* path = std::getenv("CC_TOPO_DUMP_FILE");
  if (path == nullptr || *path == '\0') return Status::ok();
  return writeSystemFile(system, path).withContext("CC_TOPO_DUMP_FILE");
}

}  // namespace cc::topology
