# Sourced by scripts/run and scripts/test: ONE .venv for both, holding the server and the test
# extra (which includes the replay charts). It is installed once and re-installed only when
# pyproject.toml changes, so switching between scripts/run and scripts/test never reinstalls
# (and works offline once installed).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
STAMP="$VENV/.installed-$(cksum < "$ROOT/pyproject.toml" | cut -d' ' -f1)"
if [ ! -f "$STAMP" ]; then
  echo "Installing offload-proxy[test] into $VENV (once; again only when pyproject.toml changes) ..." >&2
  if ! "$VENV/bin/python" -m pip install -e "$ROOT[test]" > "$VENV/install.log" 2>&1; then
    tail -n 40 "$VENV/install.log" >&2
    exit 1
  fi
  rm -f "$VENV"/.installed-*
  touch "$STAMP"
fi
