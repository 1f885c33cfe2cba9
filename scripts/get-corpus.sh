#!/usr/bin/env bash
# Fetch the default training corpus and print the paths of its text files, one per line:
# Jane Austen's six novels (~4 MB of English prose, public domain, Project Gutenberg texts) as
# shipped in Debian's r-cran-janeaustenr package. Not for: tokenizing (ctrain prepare does).
#
# Usage: scripts/get-corpus.sh [DIR]   (default: ${CTRAIN_CORPUS_DIR:-$HOME/.cache/ctrain/corpus})
# The .deb is fetched with `apt-get download` and unpacked into DIR, not installed, so R is not
# pulled in; python3 (Debian's) turns the package's R data file into plain text. Files already
# in DIR are reused. If Debian's archive cannot be reached, prints the GNU licenses from
# /usr/share/common-licenses instead, with a warning on stderr (a small stand-in corpus).
set -euo pipefail
dir="${1:-${CTRAIN_CORPUS_DIR:-$HOME/.cache/ctrain/corpus}}"
pkg=r-cran-janeaustenr
books=(emma mansfieldpark northangerabbey persuasion prideprejudice sensesensibility)

print_books() { for b in "${books[@]}"; do echo "$dir/austen-$b.txt"; done; }

have_all=1
for b in "${books[@]}"; do [ -s "$dir/austen-$b.txt" ] || have_all=0; done
if [ "$have_all" -eq 1 ]; then print_books; exit 0; fi

fallback() {
    echo "get-corpus: $1; using /usr/share/common-licenses as a small stand-in corpus" \
         "---> check that Debian's archive is reachable (apt-get update) and rerun" >&2
    ls /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/GPL-2 \
       /usr/share/common-licenses/LGPL-2.1 /usr/share/common-licenses/GFDL-1.3 \
       /usr/share/common-licenses/Apache-2.0 /usr/share/common-licenses/MPL-2.0
    exit 0
}

command -v python3 >/dev/null 2>&1 || fallback "python3 is missing (scripts/install-deps.sh installs it)"
echo "get-corpus: fetching Jane Austen's novels (Debian's $pkg, a 1.6 MB .deb) into $dir;" \
     "unpacked there, not installed" >&2
mkdir -p "$dir"
work=$(mktemp -d "$dir/.fetch.XXXXXX")
trap 'rm -rf "$work"' EXIT
if ! (cd "$work" && apt-get download -qq "$pkg" >/dev/null 2>&1); then
    sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq >/dev/null 2>&1 || true
    (cd "$work" && apt-get download -qq "$pkg" >/dev/null 2>&1) \
        || fallback "apt-get download $pkg failed"
fi
dpkg-deb -x "$work"/${pkg}_*.deb "$work/x"
rdb="$work/x/usr/lib/R/site-library/janeaustenr/data/Rdata.rdb"
[ -f "$rdb" ] || fallback "$pkg has no $rdb"

# Rdata.rdb is R's lazy-load database: zlib blocks, each a 4-byte big-endian length then a
# zlib stream holding one serialized R object (XDR format). Each book is a character vector of
# lines (STRSXP of CHARSXPs) whose first line is its title; files are named after the title.
python3 - "$rdb" "$dir" "${books[@]}" <<'EOF'
import struct, sys, zlib
rdb, out_dir, names = sys.argv[1], sys.argv[2], sys.argv[3:]
data = open(rdb, "rb").read()
pos, blocks = 0, []
while pos < len(data):
    d = zlib.decompressobj()
    blocks.append(d.decompress(data[pos + 4:]))
    pos = len(data) - len(d.unused_data)

def lines_of(b):
    assert b[:2] == b"X\n", "not an XDR serialization"
    i = 2
    version = struct.unpack(">i", b[i:i + 4])[0]; i += 12
    if version == 3:
        n = struct.unpack(">i", b[i:i + 4])[0]; i += 4 + n
    flags = struct.unpack(">i", b[i:i + 4])[0]; i += 4
    assert flags & 0xFF == 16, "not a character vector"
    count = struct.unpack(">i", b[i:i + 4])[0]; i += 4
    out = []
    for _ in range(count):
        flags, n = struct.unpack(">ii", b[i:i + 8]); i += 8
        assert flags & 0xFF == 9, "not a string"
        out.append(b"" if n < 0 else b[i:i + n]); i += max(n, 0)
    return out

import os, re
written = set()
for b in blocks:
    if b[:2] != b"X\n": continue
    lines = lines_of(b)
    title = next(l for l in lines if l.strip()).decode("utf-8").lower()  # "PRIDE AND PREJUDICE"
    name = re.sub(r"[^a-z]", "", title.replace(" and ", " "))
    assert name in names, f"unexpected book {title!r}"
    text = b"\n".join(lines).strip() + b"\n"
    tmp = f"{out_dir}/austen-{name}.txt.tmp"
    open(tmp, "wb").write(text)
    os.replace(tmp, f"{out_dir}/austen-{name}.txt")
    written.add(name)
assert written == set(names), f"missing books: {set(names) - written}"
EOF
print_books
