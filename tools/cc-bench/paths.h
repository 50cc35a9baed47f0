// Small helpers for running the peers' programs: where they live and how to pass an
// argument through the shell unharmed.
#pragma once

#include <string>
#include <string_view>

namespace cc::bench {

// The directory this executable lives in; the peers' programs are built into the same one.
std::string executableDirectory();

// `text` in single quotes, safe to paste into a /bin/sh command line.
std::string shellQuote(std::string_view text);

}  // namespace cc::bench
