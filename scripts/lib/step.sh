# Sourced by scripts/setup.sh and scripts/test.sh.
# step NAME CMD...: runs CMD and prints its wall and CPU time (user+system,
# children included), so a slow CI run shows where the minutes went (CI keeps
# to 60 minutes cold on 2 cores: measure a build before adding it).
step() {
  local name=$1 TIMEFORMAT
  shift
  TIMEFORMAT="==> $name: %0R s wall, %0U+%0S s CPU"
  time "$@"
}
