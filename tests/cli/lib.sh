# lib.sh — helpers sourced by tests/cli/test_*.sh: pass/fail counting with the summary line
# tests/run.sh sums ("N passed, N failed"), running ctrain with captured output, and compiling
# the ABI fixture plugin. Not a test itself (run.sh runs only test_*.sh).
# Use: source "$(dirname "$0")/lib.sh"; ...; ct_summary   (exits non-zero on failures)

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
CTRAIN="$BUILD/ctrain"
ct_passed=0
ct_failed=0
CT_TMP=$(mktemp -d /tmp/ctrain-cli-XXXXXX)
trap 'rm -rf "$CT_TMP"' EXIT

ct_pass() { ct_passed=$((ct_passed + 1)); echo "ok $1"; }
ct_fail() { ct_failed=$((ct_failed + 1)); echo "FAIL $1: $2"; }

ct_summary() {
    echo "$ct_passed passed, $ct_failed failed"
    [ "$ct_failed" -eq 0 ]
}

# Run a command; sets ct_rc, ct_out (stdout) and ct_err (stderr).
ct_run() {
    "$@" >"$CT_TMP/out" 2>"$CT_TMP/err"
    ct_rc=$?
    ct_out=$(cat "$CT_TMP/out")
    ct_err=$(cat "$CT_TMP/err")
}

# ct_expect_failure NAME "NEEDLE1|NEEDLE2..." command...: non-zero exit without a crash
# (exit status < 128: no signal), and stderr holds every needle (fixed strings, '|'-separated).
ct_expect_failure() {
    local name=$1 needles=$2
    shift 2
    ct_run "$@"
    if [ "$ct_rc" -eq 0 ]; then ct_fail "$name" "exited 0; expected a failure"; return; fi
    if [ "$ct_rc" -ge 128 ]; then ct_fail "$name" "crashed (exit $ct_rc): $ct_err"; return; fi
    local IFS='|' n
    for n in $needles; do
        if ! grep -qF -- "$n" "$CT_TMP/err"; then
            ct_fail "$name" "stderr lacks \"$n\"; stderr was: $ct_err"
            return
        fi
    done
    ct_pass "$name"
}

# ct_expect_success NAME NEEDLE command...: exit 0 and stdout holds NEEDLE (may be empty).
ct_expect_success() {
    local name=$1 needle=$2
    shift 2
    ct_run "$@"
    if [ "$ct_rc" -ne 0 ]; then ct_fail "$name" "exited $ct_rc: $ct_err"; return; fi
    if [ -n "$needle" ] && ! grep -qF -- "$needle" "$CT_TMP/out"; then
        ct_fail "$name" "stdout lacks \"$needle\"; stdout was: $ct_out"
        return
    fi
    ct_pass "$name"
}

# ct_fixture OUT.so [cc flags...]: compile tests/abi/fixture_plugin.c against the live SDK
# header (set FX_INCLUDE to use another include folder). Returns cc's status.
ct_fixture() {
    local out=$1
    shift
    cc -std=c11 -shared -fPIC -fvisibility=hidden -Wl,-z,defs -I"${FX_INCLUDE:-$ROOT/sdk/include}" \
        "$@" "$ROOT/tests/abi/fixture_plugin.c" -o "$out"
}

# ct_install_gpt_without DIR DEFINE: a copy of the install in DIR (DIR/ctrain and DIR/plugins,
# the binary's own plugin folder, searched first) whose gpt model is built from the same sources
# with -DDEFINE (GPT_WITHOUT_DECODE, GPT_WITHOUT_HIDDEN_ROWS): without an optional member, as an
# older plugin is. Returns cc's status; its messages are in DIR/build.log.
ct_install_gpt_without() {
    local dir=$1 define=$2
    mkdir -p "$dir/plugins"
    cp "$CTRAIN" "$dir/ctrain"
    cp "$(dirname "$CTRAIN")"/plugins/*.so "$dir/plugins/"
    cc -std=c11 -D_GNU_SOURCE -O2 -fPIC -shared -fopenmp "-D$define" -I"$ROOT/sdk/include" \
        $(pkg-config --cflags openblas) "$ROOT"/plugins/model/gpt/*.c \
        -o "$dir/plugins/model_gpt.so" $(pkg-config --libs openblas) -lm 2> "$dir/build.log"
}

# ct_prepare_licenses OUT: token shards of three of Debian's license texts (GPL-3, GPL-2,
# LGPL-2.1) under a 1000-piece sentencepiece model trained on them, no validation split, in
# OUT; prepare's output in OUT.log. Returns prepare's status.
ct_prepare_licenses() {
    "$CTRAIN" prepare --text /usr/share/common-licenses/GPL-3 --text /usr/share/common-licenses/GPL-2 \
        --text /usr/share/common-licenses/LGPL-2.1 --out "$1" --tokenizer sentencepiece \
        --vocab-size 1000 --val-fraction 0 > "$1.log" 2>&1
}

# Stop early (with a summary) when the binary is missing.
ct_need_ctrain() {
    if [ ! -x "$CTRAIN" ]; then
        ct_fail "setup" "$CTRAIN not built ---> make BUILD=$BUILD"
        ct_summary
        exit 1
    fi
}

# ct_shard FILE N VOCAB: a token shard (llm.c format, data.h) of N tokens below VOCAB, the
# largest (VOCAB-1) at position N/2, for configurations that must validate (validate opens the
# data as train does), and its [shard NAME] record in the meta.ini beside it (as `ctrain
# prepare` writes it), so the vocabulary check happens when the data is opened.
ct_shard() {
    python3 - "$1" "$2" "$3" <<'PY'
import os, re, struct, sys
path, n, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
toks = [(i * 7919) % vocab for i in range(n)]
toks[n // 2] = vocab - 1
hdr = [20240520, 1, n] + [0] * 253
with open(path, "wb") as f:
    f.write(struct.pack("<256i", *hdr))
    f.write(struct.pack("<%dH" % n, *toks))
meta = os.path.join(os.path.dirname(os.path.abspath(path)), "meta.ini")
name = os.path.basename(path)
old = open(meta).read() if os.path.exists(meta) else ""
old = re.sub(r"\n?\[shard %s\]\n(?:[^\[\n][^\n]*\n)*" % re.escape(name), "\n", old)
with open(meta, "w") as f:
    f.write(old.rstrip("\n") + "\n[shard %s]\ntokens = %d\nbytes = %d\nmax_token = %d\n"
            % (name, n, 1024 + 2 * n, max(toks)))
PY
}
