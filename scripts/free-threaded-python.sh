#!/usr/bin/env bash
# Print the path of a free-threaded CPython 3.14 (python3.14t, built with --disable-gil), building it once when the
# machine has none: without the GIL, ingest's parse threads run their Python in parallel too (docs/scaling.md).
#
#   scripts/free-threaded-python.sh               # the interpreter's path on stdout, progress on stderr
#   "$(scripts/free-threaded-python.sh)" -m venv .venv-ft
#
# Takes, in order: $INGEST_FREE_THREADED_PYTHON; a python3.14t on PATH; the one this script built before, under
# ${XDG_CACHE_HOME:-~/.cache}/ingest/cpython-<version>t.  Otherwise it builds CPython $CPYTHON_VERSION (default below)
# there from its release tag's source, fetched through Go's module mirror (`go mod download`, which checks the
# archive against the Go checksum database): the one route to CPython's source from a machine that reaches package
# registries and nothing else.  Needs go, a C compiler, make, and the headers of OpenSSL, zlib, libffi, bz2, lzma,
# sqlite3 and readline (Debian: libssl-dev zlib1g-dev libffi-dev libbz2-dev liblzma-dev libsqlite3-dev
# libreadline-dev).  No --enable-optimizations: about 4 minutes on 2 cores instead of 20 or more, and the
# comparisons it serves (threads against processes) run on one interpreter.  Where python.org or uv are reachable,
# `uv python install 3.14t` gives an optimized build instead; set INGEST_FREE_THREADED_PYTHON to it.
set -euo pipefail
version=${CPYTHON_VERSION:-3.14.7}
minor=${version%.*}
say() { echo "free-threaded-python: $*" >&2; }

free_threaded() {  # whether $1 runs without the GIL
    "$1" -c 'import sys, sysconfig; sys.exit(not (sysconfig.get_config_var("Py_GIL_DISABLED") and not sys._is_gil_enabled()))' 2>/dev/null
}

if [ -n "${INGEST_FREE_THREADED_PYTHON:-}" ]; then
    free_threaded "$INGEST_FREE_THREADED_PYTHON" || { say "$INGEST_FREE_THREADED_PYTHON is not a free-threaded python"; exit 1; }
    echo "$INGEST_FREE_THREADED_PYTHON"
    exit 0
fi
if found=$(command -v "python${minor}t") && free_threaded "$found"; then
    echo "$found"
    exit 0
fi
prefix="${XDG_CACHE_HOME:-$HOME/.cache}/ingest/cpython-${version}t"
python="$prefix/bin/python${minor}t"
if [ -x "$python" ] && free_threaded "$python"; then
    echo "$python"
    exit 0
fi

command -v go >/dev/null || { say "needs go, to fetch CPython's source from Go's module mirror"; exit 1; }
say "building CPython $version without the GIL into $prefix (about 4 minutes on 2 cores)"
work=$(mktemp -d "${TMPDIR:-/tmp}/cpython-ft.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
# outside any Go module, in a module cache of its own (its files are read-only; the trap removes them)
source_dir=$(cd "$work" && GOMODCACHE="$work/gomod" GOFLAGS=-mod=mod \
    go mod download -json "github.com/python/cpython@v${version}+incompatible" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$source_dir" ] || { say "go mod download gave no source for CPython $version"; exit 1; }
cp -r "$source_dir" "$work/src"
chmod -R u+wx "$work/src"  # a module archive keeps no file modes: configure and its scripts must run
(
    cd "$work/src"
    ./configure --disable-gil --prefix="$prefix" --with-ensurepip=install >"$work/configure.log" 2>&1 ||
        { tail -20 "$work/configure.log" >&2; exit 1; }
    make -j"$(nproc)" >"$work/make.log" 2>&1 || { tail -30 "$work/make.log" >&2; exit 1; }
    make install >"$work/install.log" 2>&1 || { tail -30 "$work/install.log" >&2; exit 1; }
)
missing=$("$python" -c '
import importlib.util
print(" ".join(m for m in ("ssl", "zlib", "_ctypes", "bz2", "lzma", "sqlite3") if importlib.util.find_spec(m) is None))')
if [ -n "$missing" ] || ! free_threaded "$python"; then
    say "the build at $prefix lacks: ${missing:-free threading}; install the headers named above and run again"
    rm -rf "$prefix"
    exit 1
fi
echo "$python"
