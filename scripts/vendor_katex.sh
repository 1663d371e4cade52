#!/usr/bin/env bash
# Copy KaTeX (JS, CSS, fonts, licence) into docs/assets/katex/ from its npm package, so the
# documentation renders math without a request to another host.
# Usage: scripts/vendor_katex.sh [VERSION]   (needs npm; the copy is committed, the docs build needs no npm)
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-0.16.47}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "katex@$version" >/dev/null && tar xzf "katex-$version.tgz")
dest=docs/assets/katex
rm -rf "$dest"
mkdir -p "$dest/fonts"
cp "$tmp/package/dist/katex.min.js" "$tmp/package/dist/katex.min.css" "$dest/"
cp "$tmp/package/dist/fonts/"* "$dest/fonts/"
cp "$tmp/package/LICENSE" "$dest/LICENSE"
echo "$version" > "$dest/VERSION"
echo "KaTeX $version copied into $dest"
