# shellcheck shell=bash
# Shared by scripts/dev and scripts/test (sourced, not run).

REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV_DIR="${VENV_DIR:-$REPO_DIR/.venv}"
PY="$VENV_DIR/bin/python"
LOCK_FILE="$REPO_DIR/requirements.lock"
LOCK_STAMP="$VENV_DIR/.requirements.lock.sha256"

if [[ -t 1 ]]; then
  _BOLD=$'\033[1m' _RED=$'\033[31m' _YELLOW=$'\033[33m' _GREEN=$'\033[32m' _RESET=$'\033[0m'
else
  _BOLD="" _RED="" _YELLOW="" _GREEN="" _RESET=""
fi

say() { printf '%s==>%s %s\n' "$_BOLD" "$_RESET" "$*"; }
ok() { printf '%s  ok%s %s\n' "$_GREEN" "$_RESET" "$*"; }
warn() { printf '%sWARNING:%s %s\n' "$_YELLOW" "$_RESET" "$*" >&2; }
die() {
  printf '%sERROR:%s %s\n' "$_RED" "$_RESET" "$*" >&2
  exit 1
}

# A Python 3.11 for the virtualenv (Django 5.2 + PySpark 4.3 are pinned for 3.11).
find_python() {
  local candidate
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
      "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
      command -v "$candidate"
      return 0
    fi
  done
  return 1
}

# Create .venv if missing; install requirements.lock only when it changed since the last install
# (its sha256 is kept in .venv), so a second run costs nothing.
ensure_venv() {
  if [[ ! -x "$PY" ]]; then
    local python
    python="$(find_python)" ||
      die "Python 3.11 not found. Install it (Debian: apt-get install python3.11 python3.11-venv) and run again."
    say "Creating the virtualenv in ${VENV_DIR#"$REPO_DIR"/} with $python"
    "$python" -m venv "$VENV_DIR" ||
      die "could not create the virtualenv (Debian: apt-get install python3.11-venv)"
  fi
  local want have
  want="$(sha256sum "$LOCK_FILE" | cut -d' ' -f1)"
  have="$(cat "$LOCK_STAMP" 2>/dev/null || true)"
  if [[ "$want" == "$have" ]]; then
    ok "dependencies match requirements.lock"
    return 0
  fi
  say "Installing requirements.lock into the virtualenv (first time: ~1 GB, mostly PySpark; a few minutes)"
  # Show what is downloaded and installed, not the hundred "already satisfied" lines.
  "$PY" -m pip install --disable-pip-version-check --progress-bar off -r "$LOCK_FILE" |
    grep --line-buffered -v '^Requirement already satisfied' ||
    true
  "$PY" -m pip install --disable-pip-version-check --quiet --no-deps -r "$LOCK_FILE" ||
    die "pip install failed (see above). Check the network to PyPI, then run again."
  printf '%s\n' "$want" >"$LOCK_STAMP"
  ok "dependencies installed"
}

# Exits 1, naming each unreachable service and how to start it.
require_services() {
  (cd "$REPO_DIR" && "$PY" -m rescaler.preflight "$@") ||
    die "a service the suite needs is down (see above); start it and run again."
}

require_java() {
  command -v java >/dev/null 2>&1 ||
    die "Java is not installed; Spark needs it (Debian: apt-get install -y openjdk-17-jre-headless)."
}

# The browser of the e2e tests: Debian's chromium (Playwright cannot download its own here).
require_chromium() {
  if [[ -n "${CHROMIUM:-}" ]] || command -v chromium >/dev/null 2>&1; then
    return 0
  fi
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    say "Installing Debian's chromium for the browser tests (once; about 100 MB)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } ||
      die "could not install chromium (apt-get install -y chromium); the e2e tests need it."
    return 0
  fi
  die "chromium is not installed; the e2e tests need it (as root: apt-get install -y chromium, or set CHROMIUM to a Chromium binary)."
}

# Seconds since the epoch, for durations.
now_s() { date +%s; }
