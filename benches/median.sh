# Sourced by the benchmark scripts that run their cases in rounds: an awk function,
# median(list), the median of a space-separated list of numbers. Use it as
#   awk "$median_awk"'{ ... median(x) ... }'
median_awk='
function median(list,    n, v, i, j, t) {
    n = split(list, v, " ")
    for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j-1] + 0 > v[j] + 0; j--) { t = v[j]; v[j] = v[j-1]; v[j-1] = t }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}
'
