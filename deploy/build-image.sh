#!/usr/bin/env bash
# Builds the exporter's image from deploy/Containerfile with no image registry: `make image`.
#
#   1. the base: a minimal Debian bookworm root (python3, python3-venv, ca-certificates, libstdc++6,
#      merged /usr, no docs or man pages) made by mmdebstrap from Debian's packages,
#      cached as a root tarball in ${XDG_CACHE_HOME:-~/.cache}/prefilltui/image/ and
#      imported into podman as localhost/prefilltui-base:bookworm-KEY (KEY: a hash of the
#      package set, so a changed set makes a new root)
#   2. the wheels: the project's wheel built from a clean copy of the checkout, and its
#      dependencies' wheels for the base's CPython and glibc (read from the root's dpkg
#      status), fetched by pip; the build context holds nothing else
#   3. podman build --pull=never: pip inside installs with --no-index (no network)
#
# Environment: IMAGE (name:tag, default prefilltui:VERSION), PYTHON (whose pip builds
# the wheels, default .venv/bin/python), IMAGE_SOURCE (the source label, default the
# git remote's URL without credentials), IMAGE_ISOLATION (of the RUN steps, default
# chroot: no OCI runtime needed, so it builds where crun or runc refuse to start a
# container), IMAGE_ARCHIVE (also write the image there as an OCI archive), DEBIAN_MIRROR
# (mmdebstrap's default when empty).  Needs root (mmdebstrap's root mode, rootful
# podman), podman and mmdebstrap: apt-get install podman mmdebstrap.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

t0=$SECONDS
say() { printf '== image: %s [%ds]\n' "$*" $((SECONDS - t0)); }

for tool in podman mmdebstrap; do
    command -v "$tool" >/dev/null || { echo "image: $tool is missing: apt-get install podman mmdebstrap" >&2; exit 2; }
done

PYTHON=${PYTHON:-.venv/bin/python}
VERSION=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' prefilltui/__init__.py)
IMAGE=${IMAGE:-prefilltui:$VERSION}
# the label shows where the source is; a credential in the remote's URL never reaches it
SOURCE=${IMAGE_SOURCE:-$(git remote get-url origin 2>/dev/null | sed -E 's#://[^/@]*@#://#' || true)}
SOURCE=${SOURCE:-local checkout (no git remote)}
REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || REVISION="$REVISION-dirty"
ISOLATION=${IMAGE_ISOLATION:-chroot}
# the build's own files: a folder per build, so two builds at once never share one
WORK=$(mktemp -d "${TMPDIR:-/tmp}/prefilltui-image.XXXXXX")
tmp=
trap 'rm -rf "$WORK"; [ -z "$tmp" ] || rm -f "$tmp"' EXIT

# ---------------------------------------------------------------- 1. the base root
SUITE=bookworm
# libstdc++6: numpy's wheel links it (manylinux leaves it to the system)
PACKAGES=python3,python3-venv,ca-certificates,libstdc++6
MMDEBSTRAP_ARGS=(--variant=essential --include="$PACKAGES"
                 # merged /usr set up by the hook, not by the usrmerge package (which
                 # pulls perl in: 50 MB)
                 --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
                 --dpkgopt='path-exclude=/usr/share/man/*'
                 --dpkgopt='path-exclude=/usr/share/doc/*'
                 --dpkgopt='path-include=/usr/share/doc/*/copyright'
                 --dpkgopt='path-exclude=/usr/share/locale/*'
                 --dpkgopt='path-exclude=/usr/share/info/*')
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/prefilltui/image
KEY=$(printf '%s\n' "$SUITE" "${MMDEBSTRAP_ARGS[@]}" "${DEBIAN_MIRROR:-}" | sha256sum | cut -c1-12)
ROOT_TAR=$CACHE/base-$SUITE-$KEY.tar
BASE=localhost/prefilltui-base:$SUITE-$KEY
mkdir -p "$CACHE"
if [ ! -s "$ROOT_TAR" ]; then
    say "making the base root with mmdebstrap ($SUITE: $PACKAGES) into $ROOT_TAR"
    # written under another name and renamed: a build cut short leaves no half root
    tmp=$CACHE/.base-$SUITE-$KEY-$$.tar
    log=$CACHE/base-$SUITE-$KEY.log
    # shellcheck disable=SC2086
    mmdebstrap "${MMDEBSTRAP_ARGS[@]}" "$SUITE" "$tmp" ${DEBIAN_MIRROR:-} >"$log" 2>&1 \
        || { tail -n 30 "$log" >&2; echo "image: mmdebstrap failed (the whole log: $log)" >&2; exit 1; }
    mv "$tmp" "$ROOT_TAR"
    tmp=
fi
if ! podman image exists "$BASE"; then
    say "importing the base root as $BASE"
    podman import --quiet --change 'CMD ["/usr/bin/python3"]' "$ROOT_TAR" "$BASE" >/dev/null
fi

# ---------------------------------------------------------------- 2. the wheels
# the interpreter and C library the wheels must fit, as the root's dpkg says
status=$(tar -xOf "$ROOT_TAR" ./var/lib/dpkg/status)
PY=$(awk '/^Package: python3\.[0-9]+-minimal$/ {sub(/-minimal/, "", $2); sub(/python/, "", $2); print $2; exit}' <<<"$status")
GLIBC=$(awk '/^Package: libc6$/ {p=1} p && /^Version:/ {split($2, v, "-"); print v[1]; exit}' <<<"$status")
ARCH=$(uname -m)
[ -n "$PY" ] && [ -n "$GLIBC" ] || { echo "image: no python3 or libc6 in $ROOT_TAR" >&2; exit 1; }
CTX=$WORK/context
SRC=$WORK/src
mkdir -p "$CTX/wheels" "$SRC"
# a clean copy: setuptools' in-tree build/lib could carry a deleted module into the wheel
cp -r pyproject.toml README.md prefilltui themes "$SRC"/
find "$SRC" -name __pycache__ -prune -exec rm -rf {} +
say "building the project's wheel (prefilltui $VERSION) from the checkout"
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || date +%s) \
    "$PYTHON" -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$CTX/wheels" "$SRC"
# pip takes the listed platform tags literally: every manylinux the root's glibc runs
platforms=()
for ((minor = ${GLIBC#2.}; minor >= 17; minor--)); do platforms+=(--platform "manylinux_2_${minor}_$ARCH"); done
platforms+=(--platform "manylinux2014_$ARCH")
say "fetching the dependencies' wheels for CPython $PY, glibc $GLIBC, $ARCH"
"$PYTHON" -m pip download --quiet --disable-pip-version-check --only-binary=:all: \
    --python-version "$PY" --implementation cp --abi "cp${PY/./}" "${platforms[@]}" \
    --find-links "$CTX/wheels" -d "$CTX/wheels" "prefilltui==$VERSION" 2>&1 \
    | { grep -v 'is ignored: it is neither a file nor a directory' || true; }
[ -n "$(ls "$CTX"/wheels/numpy-*.whl 2>/dev/null)" ] || { echo "image: the dependencies' wheels were not fetched" >&2; exit 1; }

# ---------------------------------------------------------------- 3. the image
say "podman build -t $IMAGE (base $BASE, isolation $ISOLATION)"
# chroot isolation has the host's network only; the build uses none (pip --no-index)
net=(); [ "$ISOLATION" = chroot ] || net=(--network=none)
build=(podman build --quiet --pull=never "${net[@]}" --isolation "$ISOLATION"
       -f deploy/Containerfile --build-arg "BASE=$BASE" --build-arg "VERSION=$VERSION"
       --build-arg "SOURCE=$SOURCE" --build-arg "REVISION=$REVISION")
"${build[@]}" -t "$IMAGE" "$CTX" >/dev/null
# the build stage tagged (already built: instant), so it stays the next build's cache;
# then the stages earlier builds left untagged go (~260 MB a source change) with the
# roots of older package sets
"${build[@]}" --target build -t localhost/prefilltui-build-stage:latest "$CTX" >/dev/null
# (only those over an hour old: a build running beside this one may still need its own)
for title in "prefilltui build stage" "prefilltui exporter"; do
    podman image prune --force --filter "label=org.opencontainers.image.title=$title" \
        --filter until=1h >/dev/null
done
for old in $(podman images --format '{{.Repository}}:{{.Tag}}' --filter reference=localhost/prefilltui-base); do
    [ "$old" = "$BASE" ] || podman rmi "$old" >/dev/null 2>&1 || true
done
find "$CACHE" -maxdepth 1 -name "base-$SUITE-*" ! -name "base-$SUITE-$KEY.*" -delete
if [ -n "${IMAGE_ARCHIVE:-}" ]; then
    say "writing $IMAGE_ARCHIVE (OCI archive)"
    rm -f "$IMAGE_ARCHIVE"
    podman save --quiet --format oci-archive -o "$IMAGE_ARCHIVE" "$IMAGE"
fi
size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
say "built $IMAGE: $((size / 1000000)) MB ($(podman image inspect --format '{{.Id}}' "$IMAGE" | cut -c1-12))"
