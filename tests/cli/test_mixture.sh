#!/usr/bin/env bash
# test_mixture.sh — [data] train = NAME:WEIGHT, ... (a weighted mixture of datasets, each in its
# [data.NAME] section) through the real binary on a tiny GPT: the windows each dataset dealt
# (metrics.jsonl's mix/NAME/tokens) equal a NumPy-free Python replica of the documented draw
# (splitmix64 of seed and window index against the normalised cumulative weights) exactly, and
# lie within 4.5 binomial standard deviations of the weights; the same seed gives the same
# losses and draws, another seed other draws; a run stopped at step 4 and resumed equals the
# straight run bit for bit (world 2), and world 1 with the same global batch draws the same;
# a single dataset keeps its old checkpoint format (no data.bin, the rank file's position);
# bad specs name the key; what-if refuses a mixture with a hint. Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
. tests/cli/train_lib.sh
work=$(mktemp -d /tmp/ctrain-mixture-XXXXXX)
trap 'rm -rf "$work"' EXIT
[ -x "$CTRAIN" ] || { fail "no $CTRAIN: build first (make)"; finish; exit 1; }
cd "$work"
for n in GPL-3 GPL-2 LGPL-2.1; do
    "$CTRAIN" prepare --text "/usr/share/common-licenses/$n" --out "d_$n" --tokenizer bytes \
        --val-fraction 0.1 > "prep_$n.log" 2>&1 || fail "prepare $n: $(tail -2 "prep_$n.log")"
done
{ printf '[run]\nname = m\nout_dir = unused\nsteps = 200\nseed = 7\nlog_every = 50\n'
  printf '[data]\ntrain = web:5, books:3, code:2\nbatch_size = 8\nseq_len = 16\n'
  printf '[data.web]\npath = d_GPL-3\n[data.books]\npath = d_GPL-2\n[data.code]\npath = d_LGPL-2.1\n'
  printf '[model]\nplugin = gpt\nn_layer = 1\nn_head = 2\nd_model = 16\nvocab_size = 256\nseq_len = 16\n'
  printf '[optim]\nlr = 3e-3\nwarmup = 2\n'; } > m.ini
train() { # OUT [args...]: train m.ini into OUT; output in OUT.log
    local out=$1; shift
    "$CTRAIN" train m.ini --set run.out_dir="$out" "$@" > "$out.log" 2>&1 || fail "train $out: $(tail -3 "$out.log")"
}
# draws RUN SEED WEIGHTS...: the last row's mix/*/tokens against the replica and the bound
draws() {
    python3 - "$@" <<'PY'
import json, math, sys
run, seed, ws = sys.argv[1], int(sys.argv[2]), [(w.split(":")[0], float(w.split(":")[1])) for w in sys.argv[3:]]
M = (1 << 64) - 1
last = [json.loads(l) for l in open(run + "/metrics.jsonl")][-1]
T = 16
total = sum(last[f"mix/{n}/tokens"] for n, _ in ws) // T
s = sum(w for _, w in ws)
cum, acc = [], 0.0
for _, w in ws:
    acc += w / s
    cum.append(acc)
cum[-1] = 1.0
count = [0] * len(ws)
for j in range(total):
    z = ((seed ^ 0x6d69787475726521) + (j + 1) * 0x9e3779b97f4a7c15) & M
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M
    z ^= z >> 31
    u = (z >> 11) * 2.0 ** -53
    count[next(i for i, c in enumerate(cum) if u < c or i == len(cum) - 1)] += 1
worst = 0.0
for (n, w), c in zip(ws, count):
    got = last[f"mix/{n}/tokens"] // T
    if got != c:
        print(f"{n}: {got} windows in metrics.jsonl, the replica draws {c}"); sys.exit(1)
    p = w / s
    sd = math.sqrt(total * p * (1 - p))
    worst = max(worst, abs(c - total * p) / sd)
    if abs(c - total * p) > 4.5 * sd:
        print(f"{n}: {c} of {total} windows, expected {total * p:.1f} +- 4.5 x {sd:.1f}"); sys.exit(1)
    if abs(last[f"mix/{n}/fraction"] - c / total) > 1e-12:
        print(f"{n}: fraction {last[f'mix/{n}/fraction']} != {c}/{total}"); sys.exit(1)
print(f"{total} windows, " + ", ".join(f"{n} {c}" for (n, _), c in zip(ws, count)) + f", worst {worst:.2f} sd")
PY
}

# --- 1. the realised mixture: the documented draw, within the binomial bound ----------------
train S7
msg=$(draws S7 7 web:5 books:3 code:2) && ok "realised mixture = the documented draw, within 4.5 sd of 0.5/0.3/0.2 (weights normalised): $msg" \
    || fail "realised mixture: $msg"
train S7b
compare_series S7b S7 loss 0 "the same seed: the same losses"
compare_series S7b S7 mix/books/tokens 0 "the same seed: the same draws"
train S8 --set run.seed=8
msg=$(draws S8 8 web:5 books:3 code:2) && [ "$(metric_series S8 mix/books/tokens)" != "$(metric_series S7 mix/books/tokens)" ] \
    && ok "another seed: other draws, again the documented ones ($msg)" || fail "seed 8: $msg"

# --- 2. resume mid-run equals the uninterrupted run (world 2), and world 1 draws the same ---
R=(--set run.steps=8 --set run.log_every=1 --set data.batch_size=2 --set comm.plugin=threads
   --set comm.world_size=2 --set run.checkpoint_every=4)
train straight "${R[@]}"
train resumed "${R[@]}" --stop-after 4
"$CTRAIN" train m.ini --set run.out_dir=resumed "${R[@]}" --resume > resumed2.log 2>&1 \
    || fail "resume: $(tail -3 resumed2.log)"
[ -f resumed/checkpoints/step_00000004/data.bin ] && ok "a mixture's checkpoint holds data.bin" || fail "no data.bin"
compare_series resumed straight loss 0 "stopped at step 4 and resumed: the losses of the straight run, bit for bit"
for n in web books code; do compare_series resumed straight "mix/$n/tokens" 0 "resumed: $n's windows as the straight run's"; done
train w1 --set run.steps=8 --set run.log_every=1 --set data.batch_size=4
for n in web books code; do compare_series w1 straight "mix/$n/tokens" 0 "world 1 x 4 draws as world 2 x 2: $n"; done
compare_series w1 straight loss 1e-5 "world 1 x 4 trains the losses of world 2 x 2 (same windows; reduction order only)"
"$CTRAIN" train m.ini --set run.out_dir=resumed "${R[@]}" --set run.steps=10 --set data.train=web:5,books:3 --resume > other.log 2>&1
[ $? -ne 0 ] && grep -qF "the checkpoint's data mixture is web:5, books:3, code:2" other.log \
    && ok "resuming with another mixture is refused, naming both" || fail "other mixture: $(tail -2 other.log)"

# --- 3. one dataset without the new syntax: the checkpoint's data state as before ------------
"$CTRAIN" train m.ini --set run.out_dir=single --set data.train=d_GPL-3 --set run.steps=3 \
    --set data.batch_size=2 > single.log 2>&1 || fail "single: $(tail -3 single.log)"
python3 - single/checkpoints/step_00000003 <<'PY' && ok "one dataset: no data.bin; the rank file's loader position is 3 steps x 2 windows" || fail "single dataset's checkpoint"
import os, struct, sys
d = sys.argv[1]
assert not os.path.exists(d + "/data.bin")
b = open(d + "/rank_00000.bin", "rb").read()
epoch, pos = struct.unpack_from("<QQ", b, 8 + 4 + 4 + 4 + 8 + 4)
assert (epoch, pos) == (0, 6), (epoch, pos)
PY
! grep -q '"mix/' single/metrics.jsonl && ok "one dataset: no mix/ metrics" || fail "mix metrics for one dataset"

# --- 4. bad specs name the key ----------------------------------------------------------------
bad() { # LABEL NEEDLES --set...: validate fails naming the needles
    local label=$1 needles=$2; shift 2
    "$CTRAIN" validate m.ini "$@" > bad.log 2>&1
    local rc=$? IFS='|' n
    [ $rc -ne 0 ] && [ $rc -lt 128 ] || { fail "$label: rc $rc"; return; }
    for n in $needles; do grep -qF -- "$n" bad.log || { fail "$label: lacks \"$n\": $(cat bad.log)"; return; }; done
    ok "$label"
}
bad "weight 0 names [data] train and the weight" "[data] train: the weight of books is 0, not a positive finite number" --set data.train=web:1,books:0
bad "a negative weight" "the weight of web is -1" --set "data.train=web:-1, books:1"
bad "an infinite weight" "the weight of web is inf" --set "data.train=web:inf, books:1"
bad "an unknown name names the missing section" "names the dataset news, but there is no [data.news] section" --set "data.train=web:1, news:1"
bad "a name given twice" "[data] train names web twice" --set "data.train=web:1, web:2"
bad "a dataset without path names its section" "[data.books] has no path" --unset data.books.path
bad "an unknown key of [data.web]" "[data.web] unknown key 'paht'" --set data.web.paht=x
bad "a mixture in [data] val is refused" "[data] val = web:1 reads as a mixture" --set data.val=web:1
bad "a dataset's missing shards name its section" "[data.code] path = nowhere" --set data.code.path=nowhere
python3 -c "import json; open('j.jsonl','w').write(''.join(json.dumps({'text': open('/usr/share/common-licenses/GPL-3').read()[i:i+2000]}) + '\\n' for i in range(0, 30000, 2000)))"
"$CTRAIN" prepare j.jsonl --jsonl-field text --out d_j --tokenizer bytes > prep_j.log 2>&1 || fail "prepare jsonl: $(tail -2 prep_j.log)"
bad "a dataset whose vocabulary exceeds the model's names its section" \
    "[data.code] path = d_j: its vocabulary is 257 (d_j/meta.ini), more than the model's vocab_size 256" --set data.code.path=d_j
"$CTRAIN" prepare --text /usr/share/common-licenses/GPL-3 --out d_sp --tokenizer sentencepiece \
    --vocab-size 400 > prep_sp.log 2>&1 || fail "prepare sentencepiece: $(tail -2 prep_sp.log)"
bad "datasets of two tokenizers are refused, naming both" "[data.code] holds tokens of sentencepiece|but [data.web] of bytes" \
    --set data.code.path=d_sp --set model.vocab_size=512
"$CTRAIN" validate m.ini --set data.train=web:1 > inert.out 2> inert.err
grep -q '^;   \[data.books\] .*inert: \[data\] train does not list books' inert.out \
    && ok "a [data.NAME] section the mixture does not list is inert (validate lists it)" || fail "inert: $(cat inert.err)"
# the readers of [data] train's tokenizer take the first dataset's meta.ini
"$CTRAIN" sample S7 --prompt "The " --tokens 8 --greedy > sample.out 2> sample.err && [ -s sample.out ] \
    && grep -q '^kind = bytes' S7/tokenizer.ini \
    && ok "sample of a mixture run: the run kept the datasets' tokenizer (bytes)" || fail "sample: $(tail -2 sample.err)"
"$CTRAIN" export S7 --format safetensors --out S7hf > export.log 2>&1 && [ -f S7hf/tokenizer.json ] \
    && ok "export of a mixture run writes the datasets' tokenizer" || fail "export: $(tail -2 export.log)"
# what-if reads one dataset
"$CTRAIN" what-if S7 --world-sizes 2 > wi.log 2>&1
[ $? -ne 0 ] && grep -qF "is a mixture of datasets; what-if replays runs that read one dataset" wi.log \
    && ok "what-if refuses a mixture with a hint" || fail "what-if: $(tail -2 wi.log)"
finish
