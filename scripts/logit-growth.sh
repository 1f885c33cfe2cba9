#!/usr/bin/env bash
# The logit-growth sweep (docs/logit-growth.md): one small model trained with the threads engine
# at world sizes 1, 4, 16, 32 under several precision policies, with and without z-loss, at a 32k
# and a byte-level vocabulary; then plots (`ctrain plot`) and tables (`ctrain compare`).
# Not for: anything but running that sweep; the runs' settings live in ini/experiments/logit-growth/.
#
# Usage: scripts/logit-growth.sh            (resumable: a run whose metrics.jsonl already has the
#                                             final step is skipped; an unfinished one is redone)
# Knobs (environment):
#   LG_OUT=runs/logit-growth  where runs, plots/ and tables go
#   LG_STEPS=80               optimizer steps per run
#   LG_LR=5e-3                learning rate (constant after warm-up)
#   LG_TIERS="1 2 3"          which tiers of the plan below to run (in the plan's order)
#   LG_SEED=1337              seed of initialisation and data order (repeat seeds: LG_SEED=1338
#                             LG_TIERS=x LG_OUT=runs/logit-growth-s1338)
#   The "exaggerate" variants: LG_TIERS=x LG_LR=2e-2 LG_STEPS=240 LG_OUT=runs/logit-growth-x
#   (higher lr) and LG_TIERS=x LG_STEPS=240 LG_OUT=runs/logit-growth-long (longer)
#   The cost of each policy at N = 32 (no probe): LG_TIERS=c LG_GROUPS=sp32k-cost LG_STEPS=30
#   LG_OUT=runs/logit-growth-cost; CPU seconds in probe-sp32k-cost.txt
#   LG_GROUPS="sp32k-ce bytes-ce sp32k-zloss"   which groups of the plan to run
#   LG_POLICIES=              only these policies of the plan (and every N = 1 reference); empty
#                             = all. The ddp runs with their references and amp beside them:
#                             LG_POLICIES="ddp amp" scripts/logit-growth.sh
#   LG_WORLDS=                only the runs of these world sizes (e.g. "1" in one shell and "32"
#                             in another: two lanes side by side); empty = all
#   LG_CTRAIN=build/ctrain
#   LG_DATA=                  shards to train on instead of the ini's [data] train (a folder)
#   LG_SEQ_LEN=               sequence length instead of the ini's (data and model)
#   LG_GLOBAL_BATCH=32        sequences per step at every world size (batch_size = this / N)
#   LG_KEEP_CHECKPOINTS=0     1: keep each run's final checkpoint (for `ctrain what-if`)
#   LG_CHECKPOINT_EVERY=0     K > 0: checkpoint every K steps, and resume an unfinished run from
#                             its newest checkpoint instead of starting it again
#   The runs at real tokens per rank (group sp8k-tpr; docs/logit-growth.md, "At real tokens per
#   rank"): sequences of 64 tokens of the large corpus (scripts/get-big-corpus.sh) in the 8k
#   vocabulary (`ctrain prepare DIR --tokenizer sentencepiece --sp-model data/sp8k/tokenizer.model
#   --val-fraction 0.01`), one global batch per LG_OUT: tiers Q (512 sequences, 1,024 tokens per
#   rank at N = 32), R (1024 sequences: N = 64) and P (2048: N = 128, and 32 and 64 at the same
#   batch), e.g.
#   LG_TIERS="Q1 Q2" LG_GROUPS=sp8k-tpr LG_STEPS=1000 LG_GLOBAL_BATCH=512 LG_SEQ_LEN=64
#   LG_DATA=BIG_SP8K LG_KEEP_CHECKPOINTS=1 LG_CHECKPOINT_EVERY=100 LG_OUT=runs/lg-tpr-32k
#   nice -n 15 scripts/logit-growth.sh
#   The long runs (2000 steps, N up to 256, V = 8k, base-sp8k.ini; tiers L1 and L2 are two
#   lanes that may run at the same time, each in its own shell):
#   LG_TIERS=L1 LG_GROUPS="sp8k-ce sp8k-zloss" LG_STEPS=2000 LG_GLOBAL_BATCH=256
#   LG_KEEP_CHECKPOINTS=1 LG_OUT=runs/logit-growth-long2k scripts/logit-growth.sh   (and L2)
# Global batch: 32 sequences x 16 tokens at every world size (batch_size = 32/N per rank), seed
# 1337; the long runs 256 x 4 (one sequence per rank at N = 256).
# POLICY in the plan may carry an order, POLICY:ALGO (dbtree or hier, 8 ranks per node).
# At N = 1 nothing is reduced, so every policy here is the same run (see plan below).
set -euo pipefail
cd "$(dirname "$0")/.."

out=${LG_OUT:-runs/logit-growth}
steps=${LG_STEPS:-80}
lr=${LG_LR:-5e-3}
groups=${LG_GROUPS:-"sp32k-ce bytes-ce sp32k-zloss"}
tiers=${LG_TIERS:-"1 2 3"}
policies=${LG_POLICIES:-}
worlds=${LG_WORLDS:-}
seed=${LG_SEED:-1337}
ctrain=${LG_CTRAIN:-build/ctrain}
inis=ini/experiments/logit-growth
global_batch=${LG_GLOBAL_BATCH:-32}
keep_checkpoints=${LG_KEEP_CHECKPOINTS:-0}
checkpoint_every=${LG_CHECKPOINT_EVERY:-0}
data=${LG_DATA:-}
seq_len=${LG_SEQ_LEN:-}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}   # 32 rank threads already fill 2 cores

[ -x "$ctrain" ] || { echo "logit-growth: $ctrain not found ---> run make first" >&2; exit 1; }

prepare_data() {
    case " $groups " in *" sp8k-"*)
        [ -s data/sp8k/meta.ini ] || "$ctrain" prepare $(scripts/get-corpus.sh) --out data/sp8k \
            --tokenizer sentencepiece --vocab-size 8000 ;;
    esac
    if [ ! -s data/sp32k/meta.ini ]; then
        "$ctrain" prepare $(scripts/get-corpus.sh) --out data/sp32k --tokenizer sentencepiece \
            --vocab-size 32000
    fi
    if [ ! -s data/bytes/meta.ini ]; then
        "$ctrain" prepare $(scripts/get-corpus.sh) --out data/bytes --tokenizer bytes
    fi
}

# finished DIR: its metrics.jsonl has a line for the final step
finished() { [ -s "$1/metrics.jsonl" ] && grep -q "\"step\": $steps," "$1/metrics.jsonl"; }

# run GROUP N POLICY[:ALGO]: one training run; POLICY is a precision plugin or ddp (strategy
# ddp with amp: PyTorch DDP under autocast, f32 local gradients all-reduced in f32); ALGO an order
# of the threads engine (dbtree, hier) with 8 ranks per node, under no_shard (all-reduce: NCCL's
# reduce-scatter, full_shard's reduction, is a ring whatever the algorithm).
run() {
    local group=$1 n=$2 policy=${3%%:*} algo=
    [ "$3" != "$policy" ] && algo=${3#*:}
    local vocab=${group%%-*} loss=${group#*-}
    local dir=$out/$group/n${n}_$policy${algo:+_$algo}
    if finished "$dir"; then echo "skip  $dir (done)"; return 0; fi
    mkdir -p "$out/$group"
    # lanes running at the same time never take the same run (DIR.lock holds the lane's pid)
    if ! mkdir "$dir.lock" 2> /dev/null; then
        if kill -0 "$(cat "$dir.lock/pid" 2> /dev/null)" 2> /dev/null; then
            echo "skip  $dir (another lane runs it)"; return 0
        fi
    fi
    echo $$ > "$dir.lock/pid"
    local resume=()
    if [ "$checkpoint_every" -gt 0 ] && ls -d "$dir"/checkpoints/step_* > /dev/null 2>&1; then
        resume=(--resume)   # the newest valid checkpoint; the metrics file goes on
    else
        rm -rf "$dir"
    fi
    local sets=(--set "run.out_dir=$dir" --set "run.steps=$steps"
                --set "optim.lr=$lr" --set "optim.min_lr=$lr"
                --set "data.batch_size=$((global_batch / n))" --set "comm.world_size=$n"
                --set "run.seed=$seed" --set "run.name=n${n}_$policy${algo:+_$algo}")
    [ "$n" -gt 1 ] && sets+=(--set comm.plugin=threads)
    [ -n "$algo" ] && sets+=(--set "comm.threads.algo=$algo" --set comm.threads.gpus_per_node=8)
    [ "$algo" = nccl ] && sets+=(--set comm.threads.gpu=a100)   # NCCL's own pick on A100 nodes
    [ -n "$data" ] && sets+=(--set "data.train=$data")
    [ -n "$seq_len" ] && sets+=(--set "data.seq_len=$seq_len" --set "model.seq_len=$seq_len")
    local prec=$policy   # the precision plugin: its keys go in [precision.$prec]
    if [ "$policy" = ddp ]; then
        prec=amp
        sets+=(--set strategy.plugin=ddp --set precision.plugin=amp)
    elif [ -n "$algo" ]; then
        # NCCL's reduce-scatter (full_shard's gradient reduction) is ring-only, and so is the
        # threads engine's: an order other than the ring needs an all-reduce, i.e. no_shard
        sets+=(--set strategy.plugin=no_shard --set "precision.plugin=$policy")
    else
        sets+=(--set strategy.plugin=full_shard --set "precision.plugin=$policy")
    fi
    [ "$loss" = zloss ] && sets+=(--set "loss.plugins=ce, zloss" --set loss.zloss.coef=1e-4)
    # group *-tpr (thousands of tokens per rank): no validation split (the corpus's is smaller
    # than one global batch); the local gradient summed in f32 and cast to the reduce dtype
    # before the collective. With one micro-batch per step that is the same single bf16 rounding
    # of each rank's gradient as a bf16 buffer gives (up to the order of f32 sums), and it lets
    # the head run by row ranges: 25 MB of logits per rank instead of 8.4 GB per run.
    [ "$loss" = tpr ] && sets+=(--set data.val= --set "precision.$prec.grad_accum_dtype=f32"
                                  --set run.log_every=25)
    [ "$checkpoint_every" -gt 0 ] && sets+=(--set "run.checkpoint_every=$checkpoint_every"
                                            --set run.keep_checkpoints=2)
    # group *-cost: the cost of each policy alone (no probe, no evaluation); compare CPU seconds
    [ "$loss" = cost ] && sets+=(--set run.probe=false --set run.eval_every=0)
    local t0=$SECONDS
    echo "start $dir $(date +%H:%M:%S)"
    # time.txt: wall, user and system seconds of the whole run (CPU seconds are the cost figure
    # that survives a machine shared with other work; tokens/s does not)
    local timer=()
    [ -x /usr/bin/time ] && timer=(/usr/bin/time -o "$dir.time" -f "%e %U %S")
    if ! "${timer[@]}" "$ctrain" train "$inis/base-$vocab.ini" "${sets[@]}" "${resume[@]}" \
            < /dev/null >> "$dir.log" 2>&1; then
        echo "FAIL  $dir (see $dir.log)"; tail -3 "$dir.log"; return 0
    fi
    [ "$keep_checkpoints" = 1 ] || rm -rf "$dir/checkpoints"   # the sweep needs metrics only
    # time.txt: one line per sitting of a resumed run
    [ -f "$dir.time" ] && cat "$dir.time" >> "$dir/time.txt" && rm -f "$dir.time"
    rm -rf "$dir.lock"
    echo "done  $dir $((SECONDS - t0)) s"
}

# The sweep, one run a line: TIER GROUP N POLICY, in priority order so that what finishes first is
# what matters most. Tier 1: the N = 32 contrast of every policy, pure_bf16 / amp / bf16_fp32acc
# across N, z-loss and byte level at the extremes. Tiers 2 and 3: the rest (a line repeated in a
# later tier is skipped as done). Tier x: the exaggerated variants' runs (with LG_LR / LG_STEPS /
# LG_OUT set). Tier c: the cost runs. At N = 1 amp and pure_bf16 are the same run bit for bit
# (both keep bf16 local gradients and nothing is reduced), so one N = 1 run per group stands for
# every policy, except in sp32k-ce where both are run once to show it.
plan() {
    local n p
    for p in amp pure_bf16; do echo "1 sp32k-ce 1 $p"; done
    for p in amp pure_bf16 bf16_fp32acc bf16_sr ddp; do echo "1 sp32k-ce 32 $p"; done
    for n in 4 16; do for p in pure_bf16 amp bf16_fp32acc; do echo "1 sp32k-ce $n $p"; done; done
    for p in pure_bf16 amp; do echo "1 sp32k-zloss 32 $p"; done
    echo "1 sp32k-zloss 1 pure_bf16"
    for p in pure_bf16 amp; do echo "1 bytes-ce 32 $p"; done
    echo "1 bytes-ce 1 pure_bf16"
    echo "x sp32k-ce 1 pure_bf16"
    for p in pure_bf16 amp bf16_fp32acc; do echo "x sp32k-ce 32 $p"; done
    for n in 4 16; do for p in bf16_sr ddp; do echo "2 sp32k-ce $n $p"; done; done
    echo "2 sp32k-zloss 32 bf16_fp32acc"
    for n in 4 16; do echo "2 sp32k-zloss $n pure_bf16"; echo "2 bytes-ce $n pure_bf16"; done
    echo "2 bytes-ce 32 bf16_fp32acc"
    for n in 4 16 32; do for p in amp bf16_fp32acc bf16_sr ddp; do
        echo "3 bytes-ce $n $p"; done; done
    for n in 4 16; do for p in amp bf16_fp32acc; do echo "3 sp32k-zloss $n $p"; done; done
    for p in bf16_sr ddp; do echo "3 sp32k-zloss 32 $p"; done
    for p in amp pure_bf16 bf16_fp32acc bf16_sr ddp; do echo "c sp32k-cost 32 $p"; done
    # the long runs, in the issue's priority order, dealt to two lanes of about equal work
    # (what fits ~95 minutes of a shared 2-core machine is the first two of each lane)
    echo "L1 sp8k-ce 1 pure_bf16";          echo "L2 sp8k-ce 256 bf16_fp32acc"
    echo "L1 sp8k-ce 256 pure_bf16";        echo "L2 sp8k-ce 64 pure_bf16"
    echo "L1 sp8k-ce 256 amp";              echo "L2 sp8k-ce 64 bf16_fp32acc"
    echo "L1 sp8k-ce 256 bf16_sr";          echo "L2 sp8k-zloss 256 pure_bf16"
    echo "L1 sp8k-ce 256 pure_bf16:dbtree"; echo "L2 sp8k-ce 256 pure_bf16:hier"
    echo "L1 sp8k-zloss 1 pure_bf16";       echo "L2 sp8k-ce 64 amp"
    echo "L1 sp8k-ce 64 bf16_sr"
    for p in amp bf16_fp32acc; do echo "L2 sp8k-zloss 256 $p"; done
    # z-loss at N = 64 (lane L3), and bf16_sr's z-loss runs (L4: they need the threads
    # engine's stochastic rounding, ABI 1.5, to fit the machine at N = 256)
    for p in pure_bf16 amp bf16_fp32acc; do echo "L3 sp8k-zloss 64 $p"; done
    echo "L4 sp8k-zloss 64 bf16_sr";         echo "L4 sp8k-zloss 256 bf16_sr"
    # real tokens per rank (sp8k-tpr, 1,024 tokens per rank): at a global batch of 32,768
    # tokens (LG_GLOBAL_BATCH=512 sequences of 64) the N = 1 reference and the flat ring at
    # N = 32 (full_shard's reduce-scatter: a ring, NCCL's choice too), then its controls (f32
    # accumulation; NCCL's own all-reduce pick, no_shard with algo = nccl on A100 nodes);
    # at 65,536 tokens (LG_GLOBAL_BATCH=1024) the reference and the ring at N = 64; at 131,072
    # (LG_GLOBAL_BATCH=2048) N = 128 and N = 32 and 64 at the same batch (the scaling in N).
    echo "Q1 sp8k-tpr 1 pure_bf16";          echo "Q1 sp8k-tpr 32 pure_bf16"
    echo "Q2 sp8k-tpr 32 bf16_fp32acc";      echo "Q2 sp8k-tpr 32 pure_bf16:nccl"
    echo "R1 sp8k-tpr 1 pure_bf16";          echo "R1 sp8k-tpr 64 pure_bf16"
    echo "P1 sp8k-tpr 1 pure_bf16";          echo "P1 sp8k-tpr 128 pure_bf16"
    echo "P2 sp8k-tpr 32 pure_bf16";         echo "P2 sp8k-tpr 64 pure_bf16"
    echo "P3 sp8k-tpr 128 bf16_fp32acc";     echo "P3 sp8k-tpr 128 pure_bf16:nccl"
}

# probe_table DIR...: per run, the mean over log steps of the reduction-error probe's figures.
probe_table() {
    printf "%-16s %6s %12s %12s %12s %12s %12s %10s\n" run N head/rel_err head/bias head/push \
        block.0/rel_err root/rel_err cpu_s
    local d
    for d in "$@"; do
        awk -v run="$(basename "$d")" '
            { line = $0; gsub(/[{}"]/, "", line); n = split(line, kv, ", ")
              for (i = 1; i <= n; i++) {
                  split(kv[i], a, ": ")
                  if (a[1] == "world_size") N = a[2]
                  if (a[1] ~ /^probe\// && a[2] != "null") { sum[a[1]] += a[2]; cnt[a[1]]++ }
              } }
            END { split("head/rel_err head/bias head/logit_push block.0/rel_err root/rel_err", k, " ")
                  printf "%-16s %6d", run, N
                  for (j = 1; j <= 5; j++) {
                      m = "probe/" k[j]
                      printf " %12.3g", cnt[m] ? sum[m] / cnt[m] : 0
                  }
                  printf " %10s\n", cpu }' \
            cpu="$( [ -s "$d/time.txt" ] && awk '{ print $2 + $3 }' "$d/time.txt" || echo -)" \
            "$d/metrics.jsonl"
    done
}

# derive REF RUN OUT: OUT/metrics.jsonl with, at every step both runs logged, the difference
# RUN - REF of the logit figures (delta/lse_mean, ...), and OUT/config.ini naming it after RUN,
# so that `ctrain plot` draws the differences, which are far smaller than the figures.
derive() {
    local ref=$1 run=$2 o=$3
    mkdir -p "$o"
    printf '[run]\nname = %s\n' "$(basename "$run")" > "$o/config.ini"
    awk 'function parse(   line, n, i, kv, a) {
             delete v; line = $0; gsub(/[{}"]/, "", line); n = split(line, kv, ", ")
             for (i = 1; i <= n; i++) { split(kv[i], a, ": "); v[a[1]] = a[2] }
         }
         BEGIN { nk = split("lse_mean logit_mean logit_norm_mean head_weight_norm loss", key, " ") }
         { parse() }
         !("lse_mean" in v) { next }
         FNR == NR { for (k = 1; k <= nk; k++) ref[v["step"], key[k]] = v[key[k]]; next }
         (v["step"], "lse_mean") in ref {
             printf "{\"step\": %d", v["step"]
             for (k = 1; k <= nk; k++)
                 printf ", \"delta/%s\": %.9g", key[k], v[key[k]] - ref[v["step"], key[k]]
             printf "}\n"
         }' "$ref/metrics.jsonl" "$run/metrics.jsonl" > "$o/metrics.jsonl"
}

# Plots and tables of one group, from whatever runs finished. The reference of the differences is
# the group's N = 1 run (every policy is the same run there).
report_group() {
    local group=$1 g=$out/$1 d ref=$out/$1/n1_pure_bf16
    local -a all=() multi=() dn32=() dpure=()
    for d in "$g"/n1_* "$g"/n4_* "$g"/n16_* "$g"/n32_* "$g"/n64_* "$g"/n128_* "$g"/n256_*; do
        finished "$d" && all+=("$d")
    done
    # the probe's plot: pure_bf16 at every N > 1, then the other N = 32 policies
    for d in "$g"/n4_pure_bf16 "$g"/n16_pure_bf16 "$g"/n32_pure_bf16 "$g"/n32_bf16_sr \
             "$g"/n32_bf16_fp32acc "$g"/n32_amp "$g"/n64_pure_bf16 "$g"/n256_pure_bf16 \
             "$g"/n256_bf16_fp32acc "$g"/n256_amp; do
        finished "$d" && multi+=("$d")
    done
    [ ${#all[@]} -gt 0 ] || return 0
    mkdir -p "$out/plots"
    "$ctrain" compare "${all[@]}" > "$out/table-$group.txt"
    "$ctrain" compare "${all[@]}" --csv > "$out/table-$group.csv"
    probe_table "${all[@]}" > "$out/probe-$group.txt"
    finished "$ref" || return 0
    rm -rf "$out/delta/$group"
    for d in "${all[@]}"; do
        [ "$d" = "$ref" ] && continue
        derive "$ref" "$d" "$out/delta/$group/$(basename "$d")"
        case $(basename "$d") in
            n32_* | n128_* | n256_*) dn32+=("$out/delta/$group/$(basename "$d")") ;;
        esac
        case $(basename "$d") in
            n*_pure_bf16) dpure+=("$out/delta/$group/$(basename "$d")") ;;
        esac
    done
    local delta=(--metric delta/lse_mean --metric delta/logit_mean --metric delta/head_weight_norm
                 --metric delta/loss)
    local probe=(--metric probe/head/rel_err --metric probe/head/bias
                 --metric probe/head/logit_push --metric probe/block.0/rel_err)
    [ ${#dn32[@]} -gt 0 ] && "$ctrain" plot "${dn32[@]}" "${delta[@]}" \
        --title "$group, largest N: run minus the N = 1 run" --out "$out/plots/$group-delta-n32.png"
    [ ${#dpure[@]} -gt 0 ] && "$ctrain" plot "${dpure[@]}" "${delta[@]}" \
        --title "$group, pure_bf16: run minus the N = 1 run" --out "$out/plots/$group-delta-pure.png"
    [ ${#multi[@]} -gt 0 ] && "$ctrain" plot "${multi[@]}" "${probe[@]}" \
        --title "$group: reduction-error probe (N > 1)" --out "$out/plots/$group-probe.png"
    "$ctrain" plot "${all[@]}" --metric lse_mean --metric logit_norm_mean --metric loss \
        --metric head_weight_norm --title "$group: all runs" --out "$out/plots/$group-all.png"
    return 0
}

prepare_data
t_all=$SECONDS
plan | while read -r tier group n policy; do
    case " $tiers " in *" $tier "*) ;; *) continue ;; esac
    if [ -n "$policies" ] && [ "$n" != 1 ]; then
        case " $policies " in *" $policy "*) ;; *) continue ;; esac
    fi
    if [ -n "$worlds" ]; then case " $worlds " in *" $n "*) ;; *) continue ;; esac; fi
    case " $groups " in *" $group "*) run "$group" "$n" "$policy" ;; esac
done
for group in $groups; do report_group "$group"; done
echo "sweep finished in $((SECONDS - t_all)) s; tables: $out/table-*.txt, plots: $out/plots/"
