# shellcheck shell=bash
# Shell helpers the bench scripts source (after cd to the repository root):
#   . bench/stats.sh
# median: the median of the numbers on stdin (whitespace- or line-separated); the mean
# of the middle two for an even count.
median() {
  tr -s '[:blank:]' '\n' | sort -g |
    awk 'NF { v[++n] = $1 } END { print (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }'
}

# loopback_mpi: cc and Open MPI on this host over loopback, mpirun allowed as root (the
# benchmark scripts run ranks of both side by side).
loopback_mpi() {
  export CC_SOCKET_IFNAME=${CC_SOCKET_IFNAME:-lo}
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
}

# keep_heap: glibc keeps freed memory instead of returning each large block to the kernel
# (KEEP_HEAP=0 leaves the defaults). In this VM the first store to a fresh page costs
# ~8 us (docs/PERFORMANCE.md), and Open MPI's reduce-scatter, reduce and large all-reduce
# malloc and free temporaries every call: with glibc's defaults those rows measured page
# allocation (np=2 reduce-scatter of 4 MiB: 23 ms a call, 1.1 ms with the heap kept).
# A training job's allocator keeps its memory too. Applies to cc's ranks and the peers'.
keep_heap() {
  if [[ ${KEEP_HEAP:-1} != 0 ]]; then
    export MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=4294967296
  fi
}

# size_table_header SIZE...: the header of a markdown table with a collective and np column
# and one column per size in bytes (printed as 64K, 1.0M, ...).
size_table_header() {
  printf '| collective | np |'
  for size in "$@"; do printf ' %s |' "$(numfmt --to=iec "$size")"; done
  echo
  printf '|---|---|'
  for _ in "$@"; do printf -- '---|'; done
  echo
}

# comparison_rows FILE out|in: cc-bench's comparison with its peers in FILE, out of place or
# in place, as "size cc/first-peer" lines (the table runs from its heading to "time at the
# smallest"; collectives without an in-place form print no in-place table).
comparison_rows() {
  local heading="out of place"
  [[ $2 == in ]] && heading="in place"
  sed -n "/cc against its peers, $heading/,/time at the smallest/p" "$1" |
    awk '$1 ~ /^[0-9]+$/ { print $1, $4 }'
}

# placement_heading out|in: the line between a script's out-of-place and in-place tables.
placement_heading() {
  if [[ $1 == in ]]; then printf '\nIn place:\n\n'; fi
}
