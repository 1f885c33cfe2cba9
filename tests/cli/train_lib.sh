# train_lib.sh — helpers for the end-to-end training tests (sourced, not run): a tiny config
# writer, metric extraction and comparisons that print one line per failure and count checks.
CTRAIN=${BUILD:-build}/ctrain
case $CTRAIN in /*) ;; *) CTRAIN=$PWD/$CTRAIN ;; esac   # sourced from the repository root
passed=0; failed=0
pass() { passed=$((passed + 1)); }
ok() { pass; echo "ok $*"; }
fail() { failed=$((failed + 1)); echo "FAIL $*"; }
finish() { echo "$passed passed, $failed failed"; [ "$failed" -eq 0 ]; }

# tiny_ini FILE OUT_DIR DATA VOCAB [extra INI lines...]: a 2-layer GPT for fast tests.
tiny_ini() {
    local file=$1 out=$2 data=$3 vocab=$4; shift 4
    {
        printf '[run]\nname = t\nout_dir = %s\nsteps = 20\nseed = 7\nlog_every = 1\n' "$out"
        printf '[data]\ntrain = %s\nval = %s\nbatch_size = 4\nseq_len = 32\n' "$data" "$data"
        printf '[model]\nplugin = gpt\nn_layer = 2\nn_head = 2\nd_model = 32\n'
        printf 'vocab_size = %s\nseq_len = 32\n' "$vocab"
        printf '[optim]\nlr = 3e-3\nwarmup = 5\n'
    } > "$file"
}

# small_run_setup WORK: byte-level shards of GPL-3 in WORK/data and WORK/t.ini, a one-block GPT
# (C = 16, 2 x 16 tokens a step, no validation) that runs tens of steps a second. Returns
# non-zero (after fail) when prepare fails.
small_run_setup() {
    "$CTRAIN" prepare --text /usr/share/common-licenses/GPL-3 --out "$1/data" --tokenizer bytes \
        --val-fraction 0.1 > "$1/prepare.log" 2>&1 \
        || { fail "prepare: $(tail -3 "$1/prepare.log")"; return 1; }
    tiny_ini "$1/t.ini" "$1/unused" "$1/data" 256
    sed -i -e 's/^n_layer = 2/n_layer = 1/' -e 's/^d_model = 32/d_model = 16/' \
        -e 's/^batch_size = 4/batch_size = 2/' -e 's/^seq_len = 32/seq_len = 16/' \
        -e 's/^val = .*/val =/' "$1/t.ini"
}

# metric_series RUN_DIR NAME: the value of NAME at every logged step, one per line, as written.
metric_series() {
    python3 - "$1/metrics.jsonl" "$2" <<'PY'
import json, signal, sys
signal.signal(signal.SIGPIPE, signal.SIG_DFL)
for line in open(sys.argv[1]):
    d = json.loads(line)
    if sys.argv[2] in d:
        print(repr(d[sys.argv[2]]))
PY
}

# compare_series A_DIR B_DIR NAME RTOL LABEL: every step's NAME within RTOL (0 = bit for bit).
compare_series() {
    local msg
    msg=$(python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" "$3" "$4" <<'PY'
import json, sys
def series(p, name):
    return [(d["step"], d[name]) for d in map(json.loads, open(p)) if name in d]
a, b = series(sys.argv[1], sys.argv[3]), series(sys.argv[2], sys.argv[3])
rtol = float(sys.argv[4])
if len(a) != len(b) or not a:
    print(f"different lengths: {len(a)} vs {len(b)} steps"); sys.exit(1)
worst = 0.0
for (sa, va), (sb, vb) in zip(a, b):
    if sa != sb: print(f"step mismatch {sa} vs {sb}"); sys.exit(1)
    rel = abs(va - vb) / max(abs(vb), 1e-30)
    worst = max(worst, rel)
    if (rtol == 0 and va != vb) or rel > rtol:
        print(f"step {sa}: {va!r} vs {vb!r} (relative difference {rel:.3g}, tolerance {rtol:g})"); sys.exit(1)
print(f"max relative difference {worst:.3g} over {len(a)} steps")
PY
    ) && { pass; echo "ok $5: $msg"; } || fail "$5: $msg"
}
