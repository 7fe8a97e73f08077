# Sourced by scripts/demo and scripts/test: creates or refreshes .venv at the repo root
# and installs the project with the extras named in $NCORE_EXTRAS. The install is redone
# only when pyproject.toml (or the extras) changed, so repeated runs start at once.
# NCORE_ZARR=2: .venv-zarr2 instead, with zarr-python 2.18 (scripts/zarr2-constraints.txt).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo/.venv"
constraints=()
if [ "${NCORE_ZARR:-3}" = 2 ]; then
    venv="$repo/.venv-zarr2"
    constraints=(-c "$repo/scripts/zarr2-constraints.txt")
fi
python="${PYTHON:-python3}"
extras="${NCORE_EXTRAS:-}"
if [ ! -x "$venv/bin/python" ]; then
    echo "creating $venv" >&2
    "$python" -m venv "$venv"
fi
stamp="$venv/.ncore-like-install"
hash="$(cat "$repo/pyproject.toml" "$repo/scripts/zarr2-constraints.txt" | sha256sum | cut -d' ' -f1)"
want="$hash [$extras]"
have="$(cat "$stamp" 2>/dev/null || true)"
# An install with the test extras also serves the demo, so only a missing extra reinstalls.
if [ "$have" != "$want" ] && { [ -n "$extras" ] || [ "${have%% *}" != "$hash" ]; }; then
    echo "installing ncore-like${extras:+[$extras]} into $venv" >&2
    "$venv/bin/python" -m pip install --quiet --upgrade pip >&2
    "$venv/bin/python" -m pip install --quiet -e "$repo${extras:+[$extras]}" "${constraints[@]}" >&2
    echo "$want" > "$stamp"
fi
export PATH="$venv/bin:$PATH"
cd "$repo"
