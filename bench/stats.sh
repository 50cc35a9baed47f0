# shellcheck shell=bash
# Shell helpers the bench scripts source (after cd to the repository root):
#   . bench/stats.sh
# median: the median of the numbers on stdin (whitespace- or line-separated); the mean
# of the middle two for an even count.
median() {
  tr -s '[:blank:]' '\n' | sort -g |
    awk 'NF { v[++n] = $1 } END { print (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }'
}
