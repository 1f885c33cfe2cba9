#!/usr/bin/env bash
# What z-loss does to the MEAN logit (not the log-sum-exp) of a run whose reduction rounds in
# bf16 (docs/seed-experiments.md, "z-loss and the mean logit"): the long runs' model
# (ini/experiments/logit-growth/base-sp8k.ini: V = 8000, C = 16, 256 sequences x 4 tokens, lr 5e-3
# constant, full_shard, pure_bf16) at N = 1 and at N = 256 on the threads engine's flat ring, each
# without z-loss and with z-loss at each coef of ZM_COEFS; then, per coef, the N = 256 run's
# lse_mean and logit_mean less the N = 1 run's at each logged step (metrics.jsonl).
# Not for: the sweep of docs/logit-growth.md (scripts/logit-growth.sh).
#
# Usage: scripts/zloss-mean-logit.sh   (resumable: a run whose metrics.jsonl has the last step is
#                                       skipped; an unfinished one starts again)
# Knobs (environment):
#   ZM_OUT=runs/zloss-mean-logit   the runs (ZM_OUT/c<coef>/n<N>) and ZM_OUT/table.txt
#   ZM_STEPS=1000                  optimizer steps per run
#   ZM_COEFS="0 1e-2"              z-loss coefs (0: cross-entropy alone)
#   ZM_DATA=data/sp8k              the 8000-piece shards (made here from scripts/get-corpus.sh's
#                                  text when missing, as scripts/logit-growth.sh makes them)
#   ZM_CTRAIN=build/ctrain
set -euo pipefail
cd "$(dirname "$0")/.."
out=${ZM_OUT:-runs/zloss-mean-logit}
steps=${ZM_STEPS:-1000}
coefs=${ZM_COEFS:-"0 1e-2"}
data=${ZM_DATA:-data/sp8k}
ctrain=${ZM_CTRAIN:-build/ctrain}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

[ -x "$ctrain" ] || { echo "zloss-mean-logit: $ctrain not found ---> run make first" >&2; exit 1; }
[ -s "$data/meta.ini" ] || "$ctrain" prepare $(scripts/get-corpus.sh) --out "$data" \
    --tokenizer sentencepiece --vocab-size 8000
finished() { [ -s "$1/metrics.jsonl" ] && grep -q "\"step\": $steps," "$1/metrics.jsonl"; }
for coef in $coefs; do
    for n in 1 256; do
        dir=$out/c$coef/n$n
        if finished "$dir"; then echo "skip  $dir (done)"; continue; fi
        rm -rf "$dir"
        mkdir -p "$out/c$coef"
        sets=(--set "run.out_dir=$dir" --set "run.steps=$steps" --set "data.train=$data"
              --set "data.val=$data" --set "data.batch_size=$((256 / n))" --set "comm.world_size=$n"
              --set strategy.plugin=full_shard --set precision.plugin=pure_bf16
              --set "run.name=c${coef}_n$n")
        [ "$n" -gt 1 ] && sets+=(--set comm.plugin=threads)
        [ "$coef" != 0 ] && sets+=(--set "loss.plugins=ce, zloss" --set "loss.zloss.coef=$coef")
        echo "start $dir $(date +%H:%M:%S)"
        /usr/bin/time -o "$dir.time" -f "%e s wall, %U s user, %S s sys" \
            "$ctrain" train ini/experiments/logit-growth/base-sp8k.ini "${sets[@]}" \
            < /dev/null > "$dir.log" 2>&1 || { echo "FAIL  $dir (see $dir.log)"; tail -3 "$dir.log"; exit 1; }
        echo "done  $dir: $(cat "$dir.time")"
    done
done
# the table: per coef and logged step, N = 256 less N = 1
python3 - "$out" $coefs <<'EOF' | tee "$out/table.txt"
import json, sys
out, coefs = sys.argv[1], sys.argv[2:]
def rows(path):
    r = {}
    for l in open(path):
        d = json.loads(l)
        if "lse_mean" in d and "logit_mean" in d: r[d["step"]] = d
    return r
print("| z-loss coef | step | lse_mean N=1 | Δ lse_mean (N=256 − N=1) | logit_mean N=1 | Δ logit_mean | Δ loss |")
print("|---|---|---|---|---|---|---|")
for c in coefs:
    try: a, b = rows("%s/c%s/n1/metrics.jsonl" % (out, c)), rows("%s/c%s/n256/metrics.jsonl" % (out, c))
    except OSError: continue
    for s in sorted(set(a) & set(b)):
        if s % 100 and s != max(a): continue
        print("| %s | %d | %.3f | %+.3f | %.3f | %+.3f | %+.4f |" % (
            c, s, a[s]["lse_mean"], b[s]["lse_mean"] - a[s]["lse_mean"], a[s]["logit_mean"],
            b[s]["logit_mean"] - a[s]["logit_mean"], b[s]["loss"] - a[s]["loss"]))
EOF
