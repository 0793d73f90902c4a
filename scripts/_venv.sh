# Sourced by scripts/run and scripts/test: creates .venv and installs the project into it
# whenever pyproject.toml changed since the last install.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
EXTRAS="${1:-}"
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
STAMP="$VENV/.installed-$(cksum < "$ROOT/pyproject.toml" | cut -d' ' -f1)$EXTRAS"
if [ ! -f "$STAMP" ]; then
  echo "Installing offload-proxy$EXTRAS into $VENV ..." >&2
  if ! { "$VENV/bin/python" -m pip install --upgrade pip &&
         "$VENV/bin/python" -m pip install -e "$ROOT$EXTRAS"; } > "$VENV/install.log" 2>&1; then
    tail -n 40 "$VENV/install.log" >&2
    exit 1
  fi
  rm -f "$VENV"/.installed-*
  touch "$STAMP"
fi
