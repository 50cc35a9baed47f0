// `cc-bench COLLECTIVE`: ties the pieces together. Every rank measures cc's rows; when
// peers are asked for, rank 0 also drives them, row by row between cc's rows, then prints
// the tables and writes the files.
#pragma once

#include "coll_options.h"

namespace cc::bench {

// Returns the process's exit status.
int runCollCommand(const CollOptions& options);

}  // namespace cc::bench
