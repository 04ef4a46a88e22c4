# Sourced by the build scripts: set $python to $PYTHON, else the newest python3.11+ on PATH.
# The caller defines die().
python=${PYTHON:-}
if [ -z "$python" ]; then
  for candidate in python3.13 python3.12 python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      python=$candidate; break
    fi
  done
fi
[ -n "$python" ] || die "Python 3.11 or newer is needed: apt-get install python3 python3-venv"
