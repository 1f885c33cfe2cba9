#!/usr/bin/env bash
# test_plot.sh — `ctrain plot` and `ctrain compare` through the real binary: fake run folders
# written here (and a real 2-rank training run with the research precision policies when
# `ctrain train` works) give a PNG with the right signature and size, a table whose figures
# are those computed here, and clear failures on bad input. Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
CTRAIN=${BUILD:-build}/ctrain
passed=0; failed=0
pass() { passed=$((passed + 1)); echo "ok $*"; }
fail() { failed=$((failed + 1)); echo "FAIL $*"; }
finish() { echo "$passed passed, $failed failed"; [ "$failed" -eq 0 ]; }
work=$(mktemp -d /tmp/ctrain-plot-test-XXXXXX)
trap 'rm -rf "$work"' EXIT

[ -x "$CTRAIN" ] || { fail "no $CTRAIN: build first (make)"; finish; exit 1; }
command -v gnuplot > /dev/null || { fail "gnuplot missing: install gnuplot-nox"; finish; exit 1; }

# is_png FILE MIN_BYTES: the 8-byte PNG signature and at least MIN_BYTES.
is_png() {
    [ -f "$1" ] && [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] \
        && [ "$(stat -c %s "$1")" -gt "$2" ]
}

# fake_run DIR NAME GROWTH: 60 train lines + 3 eval lines; logit_norm_mean = 10 + GROWTH*step,
# tokens_per_s = 1000 + step (median 1030.5), loss = 4 - step/30 (final 2), val/loss = loss+0.1.
fake_run() {
    mkdir -p "$1"
    printf '[run]\nname = %s\nsteps = 60\n[comm]\nworld_size = 4\n' "$2" > "$1/config.ini"
    awk -v g="$3" 'BEGIN {
        for (s = 1; s <= 60; s++) {
            printf "{\"step\": %d, \"loss\": %.17g, \"loss/ce\": %.17g, \"logit_mean\": -0.5, ", s, 4 - s/30, 4 - s/30
            printf "\"logit_norm_mean\": %.17g, \"logit_norm_max\": %.17g, \"lse_mean\": %.17g, ", 10 + g*s, 12 + g*s, 5 + g*s/2
            printf "\"logit_max_abs\": %.17g, \"head_weight_norm\": %.17g, \"grad_norm\": null, ", 3 + g*s, 20 + s/10
            printf "\"lr\": 0.001, \"tokens_per_s\": %d, \"world_size\": 4}\n", 1000 + s
            if (s % 20 == 0) printf "{\"step\": %d, \"val/loss\": %.17g, \"val/ce\": %.17g}\n", s, 4.1 - s/30, 4.1 - s/30
        } }' > "$1/metrics.jsonl"
}

fake_run "$work/amp" amp_n4 0.01
fake_run "$work/bf16" pure_bf16_n4 0.2
mkdir -p "$work/noname"; cp "$work/amp/metrics.jsonl" "$work/noname/"   # no config.ini

# 1. a two-panel plot of two runs
if "$CTRAIN" plot "$work/amp" "$work/bf16" --metric logit_norm_mean --metric val/loss \
       --out "$work/p.png" --title "amp vs pure_bf16" > "$work/p.log" 2>&1 && is_png "$work/p.png" 2048; then
    pass "plot: two runs, two panels -> PNG of $(stat -c %s "$work/p.png") bytes"
else
    fail "plot two runs: $(tail -3 "$work/p.log")"
fi

# 2. --logy, one run without config.ini (legend from the folder name)
if "$CTRAIN" plot "$work/noname" "$work/amp" --metric loss --logy --out "$work/l.png" > "$work/l.log" 2>&1 \
       && is_png "$work/l.png" 2048; then
    pass "plot --logy with a run without config.ini"
else
    fail "plot --logy: $(tail -3 "$work/l.log")"
fi

# expect_fail NAME EXIT_STATUS TEXT CMD...: the command fails with that status and says TEXT.
expect_fail() {
    local name=$1 want=$2 text=$3; shift 3
    "$@" > "$work/e.log" 2>&1; local rc=$?
    if [ "$rc" -eq "$want" ] && grep -qF -- "$text" "$work/e.log"; then
        pass "$name: exit $rc, says '$text'"
    else
        fail "$name: exit $rc (want $want), output: $(head -3 "$work/e.log")"
    fi
}

# 3. bad input fails clearly
expect_fail "missing run dir" 1 "does not exist" \
    "$CTRAIN" plot "$work/nope" --metric loss --out "$work/x.png"
mkdir -p "$work/empty"
expect_fail "dir without metrics.jsonl" 1 "has no metrics.jsonl" \
    "$CTRAIN" plot "$work/empty" --metric loss --out "$work/x.png"
expect_fail "unknown metric suggests the nearest" 1 "did you mean 'logit_norm_mean'" \
    "$CTRAIN" plot "$work/amp" --metric logit_norm_mea --out "$work/x.png"
# grad_norm is null on every line: not available
grep -qF "available: head_weight_norm logit_max_abs logit_mean" "$work/e.log" \
    && pass "unknown metric: list of available names" || fail "unknown metric: no list: $(cat "$work/e.log")"
expect_fail "no --out" 2 "no --out" "$CTRAIN" plot "$work/amp" --metric loss
expect_fail "no --metric" 2 "no --metric" "$CTRAIN" plot "$work/amp" --out "$work/x.png"
expect_fail "gnuplot missing" 1 "install gnuplot-nox" \
    env PATH=/nonexistent "$CTRAIN" plot "$work/amp" --metric loss --out "$work/x.png"
printf '{"step": 1, "loss": [1, 2]}\n' > "$work/empty/metrics.jsonl"
expect_fail "malformed metrics line" 1 "metrics.jsonl:1: nested objects and arrays" \
    "$CTRAIN" plot "$work/empty" --metric loss --out "$work/x.png"
[ ! -e "$work/x.png" ] && pass "no PNG is left behind by the failures" || fail "x.png written by a failing call"

# 4. compare: the figures computed above (CSV, exact numbers)
"$CTRAIN" compare "$work/amp" "$work/bf16" --csv > "$work/c.csv" 2> "$work/c.log" \
    || fail "compare --csv: $(cat "$work/c.log")"
row=$(grep '^pure_bf16_n4,' "$work/c.csv")
# run,world,lnm_final,lnm_max,lma_final,lma_max,lse_final,lse_max,hwn_final,hwn_max,loss,val,tok
want="pure_bf16_n4,4,22,22,15,15,11,11,26,26,2,2.1,1030.5"
[ "$row" = "$want" ] && pass "compare --csv row: $row" || fail "compare --csv row: got '$row', want '$want'"
"$CTRAIN" compare "$work/amp" "$work/bf16" > "$work/c.txt" 2>&1 \
    && grep -q '^amp_n4 ' "$work/c.txt" && grep -q 'logit_norm_mean' "$work/c.txt" \
    && pass "compare table names runs and columns" || fail "compare table: $(cat "$work/c.txt")"
expect_fail "compare: missing run dir" 1 "does not exist" "$CTRAIN" compare "$work/nope"

# 5. real runs when training works: 4 ranks (threads), full_shard, each research policy and
# pure_bf16; then plot and compare them. For a power-of-two world bf16_avg must give
# pure_bf16's losses bit for bit (premultiplying by 1/4 and rescaling are exact); bf16_fp32acc
# and bf16_sr must not (they change the sum's rounding).
losses() { grep -o '"loss": [^,}]*' "$1/metrics.jsonl" | tr '\n' ' '; }
policies="pure_bf16 bf16_fp32acc bf16_sr bf16_avg"
real_ok=0
if "$CTRAIN" prepare --text /usr/share/common-licenses/GPL-3 --out "$work/data" --tokenizer bytes \
       --val-fraction 0.1 > "$work/prep.log" 2>&1; then
    for p in $policies; do
        cat > "$work/$p.ini" <<EOF
[run]
name = $p
out_dir = $work/run_$p
steps = 8
seed = 7
log_every = 1
eval_every = 8
[data]
train = $work/data
val = $work/data
batch_size = 2
seq_len = 16
[model]
plugin = gpt
n_layer = 1
n_head = 2
d_model = 16
vocab_size = 256
seq_len = 16
[strategy]
plugin = full_shard
[precision]
plugin = $p
[comm]
plugin = threads
world_size = 4
[optim]
lr = 3e-3
warmup = 2
EOF
        if "$CTRAIN" train "$work/$p.ini" > "$work/train_$p.log" 2>&1; then
            real_ok=$((real_ok + 1))
        else
            fail "real run with precision $p: $(tail -2 "$work/train_$p.log")"
        fi
    done
    if [ "$real_ok" -eq 4 ]; then
        dirs=""; for p in $policies; do dirs="$dirs $work/run_$p"; done
        # shellcheck disable=SC2086
        "$CTRAIN" plot $dirs --metric loss --metric logit_norm_mean --out "$work/real.png" \
            > "$work/real.log" 2>&1 && is_png "$work/real.png" 2048 \
            && pass "plot of four real 4-rank runs" || fail "plot of real runs: $(tail -3 "$work/real.log")"
        # shellcheck disable=SC2086
        "$CTRAIN" compare $dirs > "$work/realc.txt" 2>&1 && grep -q '^bf16_sr  *4 ' "$work/realc.txt" \
            && pass "compare of four real runs (world 4)" || fail "compare real runs: $(cat "$work/realc.txt")"
        a=$(losses "$work/run_bf16_avg"); b=$(losses "$work/run_pure_bf16")
        [ -n "$a" ] && [ "$a" = "$b" ] && pass "bf16_avg == pure_bf16 bit for bit at world 4" \
            || fail "bf16_avg differs from pure_bf16 at world 4: $a vs $b"
        for p in bf16_fp32acc bf16_sr; do
            [ "$(losses "$work/run_$p")" != "$b" ] && pass "$p changes the losses (it rounds the sum differently)" \
                || fail "$p gives pure_bf16's losses bit for bit: its hooks were not used?"
        done
    fi
else
    echo "note: ctrain prepare does not work yet; skipped the real runs ($(tail -1 "$work/prep.log"))"
fi

finish
