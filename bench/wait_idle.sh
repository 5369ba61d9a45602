# wait_idle.sh - sourced by the benchmark scripts: wait_idle BATCH waits
# until the 1-minute load average is below 1.0 (at most 10 minutes, then
# measures anyway) and says so through the caller's say(); with $wait != 1
# it only says the load (not waiting).
load1() { cut -d' ' -f1 /proc/loadavg; }
wait_idle() {
  if [ "${wait:-1}" != 1 ]; then
    say "# $(date +%T) batch $1: load $(load1) (not waiting: --no-wait)"
    return 0
  fi
  local t0=$SECONDS
  while awk -v l="$(load1)" 'BEGIN { exit !(l >= 1.0) }'; do
    if [ $((SECONDS - t0)) -ge 600 ]; then
      say "# $(date +%T) batch $1: load $(load1) still >= 1.0 after 10 minutes; measuring anyway"
      return 0
    fi
    sleep 20
  done
  say "# $(date +%T) batch $1: load $(load1) after waiting $((SECONDS - t0)) s"
}
