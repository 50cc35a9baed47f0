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
