# Sourced by bench/sustained-gemm.sh and bench/sustained-attn.sh.
# sampled CMD...: run CMD while nvidia-smi samples the power, the SM clock, the temperature and
# the clock-event reasons every 20 ms; print the mean over samples above 250 W (the kernels,
# not the pauses between runs).
sampled() {
  nvidia-smi --query-gpu=power.draw,clocks.sm,temperature.gpu,clocks_event_reasons.active \
    --format=csv,noheader,nounits -lms 20 > /tmp/sustained-smi.txt &
  local smi=$!
  "$@"
  kill $smi; sleep 2
  awk -F', ' '$1+0 > 250 {p+=$1; c+=$2; t=$3; r[$4]++; n++}
    END {if (!n) {print "  no busy samples"; exit}
         printf "  %d busy samples: %.0f W, SM clock %.0f MHz, %d C, clock-event reasons:", n, p/n, c/n, t
         for (k in r) printf " %s x%d", k, r[k]; print ""}' /tmp/sustained-smi.txt
  sleep 5
}
