#!/usr/bin/env bash
# Train the model with realistic statistics (ini/experiments/logit-growth/realistic-sp50k.ini:
# V = 50,000 sentencepiece pieces, C = 768, 2 blocks, untied head) on the large English corpus
# of scripts/get-big-corpus.sh, stopping at step milestones and keeping a checkpoint at each, so
# that `ctrain what-if` can replay the head's reduction at several points of training
# (docs/logit-growth.md, "A model with realistic statistics"). Not for: the N-rank runs
# (scripts/logit-growth.sh).
#
# Usage: scripts/realistic-model.sh   (resumable: each milestone already kept is skipped, an
#                                      unfinished stretch resumes from the newest checkpoint, and
#                                      a sentencepiece model already trained is reused)
# Knobs (environment):
#   RM_OUT=runs/realistic-sp50k   the run; milestones are kept in RM_OUT/milestones/step_N
#   RM_DATA=data/big-sp50k        the token shards (made here when missing: get-big-corpus.sh,
#                                 then a 50,000-piece sentencepiece BPE model trained on 20 MB
#                                 sampled across the corpus)
#   RM_MILESTONES="25 50 100 200 400 800 1600 3200 6400 12800"   steps to keep a checkpoint at
#   RM_CTRAIN=build/ctrain
set -euo pipefail
cd "$(dirname "$0")/.."
out=${RM_OUT:-runs/realistic-sp50k}
data=${RM_DATA:-data/big-sp50k}
milestones=${RM_MILESTONES:-"25 50 100 200 400 800 1600 3200 6400 12800"}
ctrain=${RM_CTRAIN:-build/ctrain}
ini=ini/experiments/logit-growth/realistic-sp50k.ini
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

[ -x "$ctrain" ] || { echo "realistic-model: $ctrain not found ---> run make first" >&2; exit 1; }
if [ ! -s "$data/meta.ini" ]; then
    mapfile -t texts < <(scripts/get-big-corpus.sh)
    # the sentencepiece model takes the longest (~45 minutes on a loaded 2-core machine): one
    # trained by an interrupted attempt is kept beside the data as DATA.tokenizer.model and
    # used instead of training another (only the tokenizing is redone)
    if [ -s "$data/tokenizer.model" ]; then
        if [ ! -s "$data.tokenizer.model" ]; then mv "$data/tokenizer.model" "$data.tokenizer.model"
        elif cmp -s "$data/tokenizer.model" "$data.tokenizer.model"; then rm "$data/tokenizer.model"
        fi
    fi
    # the interrupted attempt's folder, now empty (prepare refuses a folder with files in it,
    # and says so: nothing else is removed)
    [ -d "$data" ] && rmdir "$data" 2> /dev/null || true
    if [ -s "$data.tokenizer.model" ]; then
        "$ctrain" prepare "${texts[@]}" --out "$data" --tokenizer sentencepiece \
            --sp-model "$data.tokenizer.model"
    else
        "$ctrain" prepare "${texts[@]}" --out "$data" --tokenizer sentencepiece --vocab-size 50000 \
            --sp-sample-bytes 20000000
    fi
fi
mkdir -p "$out/milestones"
for m in $milestones; do
    keep=$out/milestones/step_$m
    [ -d "$keep" ] && { echo "skip  milestone $m (kept)"; continue; }
    echo "train to step $m $(date +%H:%M:%S)"
    # --resume starts fresh when there is no checkpoint yet; --stop-after checkpoints at m
    /usr/bin/time -a -o "$out.time" -f "to $m: %e s wall, %U s user, %S s sys" \
        "$ctrain" train "$ini" --set "run.out_dir=$out" --set "data.train=$data" \
        --set "data.val=$data" --resume --stop-after "$m" < /dev/null >> "$out.log" 2>&1 \
        || { echo "FAIL  training to step $m (see $out.log)"; tail -3 "$out.log"; exit 1; }
    ckpt=$(printf "%s/checkpoints/step_%08d" "$out" "$m")
    [ -d "$ckpt" ] || { echo "FAIL  no checkpoint $ckpt after training to $m"; exit 1; }
    # checkpoint files are written whole and never changed: hard links keep them once
    cp -al "$ckpt" "$keep.tmp" && mv "$keep.tmp" "$keep"
    python3 - "$out/metrics.jsonl" "$m" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
last = [r for r in rows if r.get("step") == int(sys.argv[2]) and "loss" in r][-1:]
val = [r["val/loss"] for r in rows if "val/loss" in r][-1:]
print(f"kept  step {sys.argv[2]}: loss {last[0]['loss']:.4f}" if last else f"kept  step {sys.argv[2]}",
      f"(last val loss {val[0]:.4f})" if val else "")
PY
done
