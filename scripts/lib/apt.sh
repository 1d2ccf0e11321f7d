# Sourced by the setup scripts.
# apt_ensure PKG...: installs the Debian packages that are not installed yet,
# in one transaction after an `apt-get update` (as root, else with sudo);
# nothing when all are there. scripts/setup.sh installs the union of every
# script's packages first (their --apt-packages), so each later finds its own.
apt_ensure() {
  local missing=() p sudo=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [[ ${#missing[@]} -gt 0 ]] || return 0
  printf '==> apt-get install %s\n' "${missing[*]}"
  [[ $(id -u) -eq 0 ]] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
