# Sourced by scripts/test: the dashboard's page tests drive a real headless Chromium (Debian's
# `chromium` package). When none is on PATH (nor $CHROMIUM) and this machine can install
# packages (apt-get, as root or with password-less sudo), it is installed once; otherwise the
# page tests say what is missing (they fail under CI=true).
if [ -z "${CHROMIUM:-}" ] && ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" = 0 ] || { sudo -n true 2>/dev/null && SUDO="sudo -n"; } || SUDO="none"
  if [ "$SUDO" != "none" ] && command -v apt-get >/dev/null 2>&1; then
    echo "Installing Chromium for the dashboard's page tests (apt-get install chromium; once) ..." >&2
    LOG="${TMPDIR:-/tmp}/offload-proxy-chromium-install.log"
    export DEBIAN_FRONTEND=noninteractive
    # one install at a time (two test runs starting together): the second waits, then finds it
    exec 9>"${TMPDIR:-/tmp}/offload-proxy-chromium-install.lock"
    flock 9 2>/dev/null || true
    if command -v chromium >/dev/null 2>&1; then
      :
    elif ! $SUDO apt-get install -y --no-install-recommends chromium > "$LOG" 2>&1; then
      $SUDO apt-get update > "$LOG" 2>&1 && $SUDO apt-get install -y --no-install-recommends chromium >> "$LOG" 2>&1 \
        || { echo "Could not install Chromium (see $LOG); the page tests will say so." >&2; tail -n 5 "$LOG" >&2; }
    fi
    exec 9>&-
  fi
fi
