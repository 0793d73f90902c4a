# Sourced by scripts/run, scripts/demo and scripts/test: ONE .venv for all of them. scripts/run
# and scripts/demo install the server only; scripts/test sets VENV_EXTRA=test before sourcing
# this and adds the test extra (pytest, the SDKs, playwright, matplotlib, …). Each is installed
# once and again only when pyproject.toml changes: a stamp per extra, keyed on pyproject.toml
# (the test extra's stamp covers the server too), so switching between the scripts never
# reinstalls and works offline once installed. pip's own output is shown (on stderr).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="${PYTHON:-python3}"
EXTRA="${VENV_EXTRA:-}"
KEY="$(cksum < "$ROOT/pyproject.toml" | cut -d' ' -f1)"
STAMP="$VENV/.installed-${EXTRA:-server}-$KEY"
if [ ! -f "$STAMP" ] && { [ -n "$EXTRA" ] || [ ! -f "$VENV/.installed-test-$KEY" ]; }; then
  if [ ! -x "$VENV/bin/python" ]; then
    echo "Creating $VENV ..." >&2
    "$PY" -m venv "$VENV"
  fi
  if [ -n "$EXTRA" ]; then
    what="offload-proxy[$EXTRA] (the server and the $EXTRA tools: ~800 MB, about 2-3 minutes the first time)"
  else
    what="offload-proxy (the server only: ~130 MB, about a minute the first time)"
  fi
  echo "Installing $what into $VENV; again only when pyproject.toml changes ..." >&2
  if ! "$VENV/bin/python" -m pip install --disable-pip-version-check -e "$ROOT${EXTRA:+[$EXTRA]}" >&2; then
    echo "pip install failed (see above); run the script again once fixed." >&2
    exit 1
  fi
  rm -f "$VENV"/.installed-*
  touch "$STAMP"
  [ -z "$EXTRA" ] || touch "$VENV/.installed-server-$KEY"
  echo "Installed." >&2
fi
