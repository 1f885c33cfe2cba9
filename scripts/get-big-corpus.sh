#!/usr/bin/env bash
# Fetch the large English corpus of the realistic-statistics model (docs/logit-growth.md, "A
# model with realistic statistics") and print the paths of its text files, one per line: the
# English documentation and books that Debian packages ship (the Linux kernel's documentation,
# Python's, PostgreSQL's, Git's, Perl's, the Debian Administrator's Handbook, GNU info manuals,
# two dictionaries, fortunes) plus the Austen novels of scripts/get-corpus.sh. Not for:
# tokenizing (ctrain prepare does), nor the default corpus of `make run` (get-corpus.sh).
#
# Usage: scripts/get-big-corpus.sh [DIR]   (default: ${CTRAIN_CORPUS_DIR:-$HOME/.cache/ctrain/corpus}/big)
# The .debs are fetched with `apt-get download` and unpacked into DIR, never installed; python3
# turns each package's files into one plain-text file DIR/NAME.txt (HTML: text outside script,
# style and pre; reST, POD, info and dictionary files as they are; no file of another
# language). Files already in DIR are reused. A package that cannot be fetched is left out with
# a warning on stderr; the script fails only if none could be.
set -euo pipefail
dir="${1:-${CTRAIN_CORPUS_DIR:-$HOME/.cache/ctrain/corpus}/big}"
here=$(cd "$(dirname "$0")" && pwd)
# NAME=DEBIAN-PACKAGE: one text file per package
sources=(kernel=linux-doc-6.1 python=python3.11-doc handbook=debian-handbook perl=perl-doc
         postgresql=postgresql-doc-15 git=git-doc gcide=dict-gcide wordnet=dict-wn
         fortunes=fortunes debref=debian-reference-en standards=gnu-standards
         maxima=maxima-doc octave=octave-doc gnuplot=gnuplot-doc)

command -v python3 > /dev/null 2>&1 \
    || { echo "get-big-corpus: python3 is missing ---> apt-get install python3" >&2; exit 1; }
mkdir -p "$dir"
work=$(mktemp -d "$dir/.fetch.XXXXXX")
trap 'rm -rf "$work"' EXIT
updated=0
got=0
for s in "${sources[@]}"; do
    name=${s%%=*} pkg=${s#*=}
    if [ -s "$dir/$name.txt" ]; then echo "$dir/$name.txt"; got=$((got + 1)); continue; fi
    if ! (cd "$work" && apt-get download -qq "$pkg" > /dev/null 2>&1); then
        if [ "$updated" -eq 0 ]; then
            sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
            $sudo_cmd apt-get update -qq > /dev/null 2>&1 || true
            updated=1
        fi
        if ! (cd "$work" && apt-get download -qq "$pkg" > /dev/null 2>&1); then
            echo "get-big-corpus: apt-get download $pkg failed; leaving $name out" \
                 "---> check that Debian's archive is reachable (apt-get update)" >&2
            continue
        fi
    fi
    rm -rf "$work/x"
    dpkg-deb -x "$work/${pkg}"_*.deb "$work/x"
    python3 - "$work/x/usr/share" "$name" "$dir/$name.txt" <<'EOF'
import glob, gzip, html.parser, os, re, sys
root, name, out = sys.argv[1:4]

def read(path):
    """A file's text; .gz and dictzip (.dz) files decompressed; undecodable bytes replaced."""
    opener = gzip.open if path.endswith((".gz", ".dz")) else open
    with opener(path, "rb") as f:
        return f.read().decode("utf-8", "replace")

class Text(html.parser.HTMLParser):
    """The text of an HTML page outside <script>, <style> and <pre> (code, not prose)."""
    skip_tags = {"script", "style", "pre"}
    block_tags = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "dt", "dd",
                  "title", "table", "section"}
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts, self.skip = [], 0
    def handle_starttag(self, tag, attrs):
        if tag in self.skip_tags: self.skip += 1
        if tag in self.block_tags: self.parts.append("\n")
    def handle_endtag(self, tag):
        if tag in self.skip_tags and self.skip: self.skip -= 1
        if tag in self.block_tags: self.parts.append("\n")
    def handle_data(self, data):
        if not self.skip: self.parts.append(data)

def html_text(path):
    p = Text()
    p.feed(read(path))
    text = "".join(p.parts)
    text = re.sub(r"[ \t\r\f\v]+", " ", text)
    return re.sub(r"\n\s*\n\s*", "\n\n", text).strip()

# per corpus file: (glob patterns under usr/share, how to read them)
recipes = {
    "kernel": (["doc/linux-doc-6.1/Documentation/**/*.rst.gz",
                "doc/linux-doc-6.1/Documentation/**/*.txt.gz"], read),
    "python": (["doc/python3.11/html/_sources/**/*.txt"], read),
    "handbook": (["doc/debian-handbook/html/en-US/*.html"], html_text),
    "perl": (["perl/5.*/pod/*.pod"], read),
    "postgresql": (["doc/postgresql-doc-15/html/*.html"], html_text),
    "git": (["doc/git-doc/*.txt", "doc/git-doc/*/*.txt"], read),
    "gcide": (["dictd/gcide.dict.dz"], read),
    "wordnet": (["dictd/wn.dict.dz"], read),
    "fortunes": (["games/fortunes/*"], read),
    "debref": (["debian-reference/*.en.html"], html_text),
    "standards": (["info/standards.info.gz", "info/maintain.info.gz"], read),
    "maxima": (["info/maxima.info*.gz"], read),
    "octave": (["info/octave.info*.gz", "info/liboctave.info*.gz"], read),
    "gnuplot": (["info/gnuplot.info.gz"], read),
}
patterns, how = recipes[name]
files = sorted({f for p in patterns for f in glob.glob(os.path.join(root, p), recursive=True)})
files = [f for f in files if os.path.isfile(f) and not f.endswith((".dat", ".u8"))]
if not files:
    sys.exit(f"get-big-corpus: {name}: no file matches {patterns} in the package")
tmp = out + ".tmp"
with open(tmp, "w", encoding="utf-8") as f:
    for path in files:
        text = how(path).strip()
        if text: f.write(text + "\n\n")
os.replace(tmp, out)
EOF
    rm -f "$work/${pkg}"_*.deb
    echo "$dir/$name.txt"
    got=$((got + 1))
done
[ "$got" -gt 0 ] || { echo "get-big-corpus: no package could be fetched" >&2; exit 1; }
"$here/get-corpus.sh"
