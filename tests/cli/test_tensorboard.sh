#!/usr/bin/env bash
# test_tensorboard.sh — [run] tensorboard = true: the event files in OUT/tb, read back with
# TensorBoard's own reader (tensorboard.backend.event_processing), hold every scalar of
# metrics.jsonl (loss and each term, lse, logit norms, grad norm, lr, tokens/s, MFU, probe
# figures, per-tensor gradient norms, validation) at the same steps, value for value (float32);
# they are readable while the run goes on; resumed from an earlier checkpoint, every step
# appears once with the resumed run's values. Skipped, saying why, when no python has tensorboard.
set -u
source "$(dirname "$0")/lib.sh"
W=$CT_TMP
py=python3
"$py" -c "import tensorboard" 2> /dev/null || { [ -x "$ROOT/.venv-interop/bin/python" ] && py="$ROOT/.venv-interop/bin/python"; }
if ! "$py" -c "import tensorboard.backend.event_processing.event_accumulator" 2> /dev/null; then
    echo "skip test_tensorboard: no python with tensorboard (scripts/install-deps.sh installs it from PyPI)"
    ct_summary
    exit 0
fi
python3 -c "import sys; open(sys.argv[1], 'w').write(open('/usr/share/common-licenses/GPL-3').read() * 2)" "$W/t.txt"
"$CTRAIN" prepare "$W/t.txt" --out "$W/data" --val-fraction 0.1 --quiet || { ct_fail prepare "failed"; ct_summary; exit 1; }
cat > "$W/tb.ini" <<EOF
[run]
name = tb
out_dir = $W/run
steps = 12
log_every = 2
eval_every = 4
tensorboard = true
probe = true
log_param_norms = true
[data]
train = $W/data/train_*.bin
val = $W/data/val_*.bin
batch_size = 2
seq_len = 32
[model]
plugin = gpt
n_layer = 1
n_head = 2
d_model = 16
seq_len = 32
vocab_size = 256
[loss]
plugins = ce, zloss
[device]
threads = 1
EOF

# compare DIR: every (step, key, value) of DIR/metrics.jsonl against the events of DIR/tb
compare() {
    "$py" - "$1" <<'PY'
import json, math, struct, sys, warnings
warnings.filterwarnings("ignore")
from tensorboard.backend.event_processing import event_accumulator as ea
d = sys.argv[1]
acc = ea.EventAccumulator(d + "/tb", size_guidance={ea.SCALARS: 0})
acc.Reload()
tags = set(acc.Tags()["scalars"])
f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]
n = bad = 0
keys = set()
seen = {}
for line in open(d + "/metrics.jsonl"):
    row = json.loads(line)
    for k, v in row.items():
        if k == "step":
            continue
        keys.add(k)
        n += 1
        ev = [e for e in acc.Scalars(k) if e.step == row["step"]] if k in tags else []
        good = len(ev) == 1 and (math.isnan(ev[0].value) if v is None else ev[0].value == f32(v))
        if not good:
            bad += 1
            if bad < 5:
                print("differ: step %d %s: jsonl %r, tensorboard %r" % (row["step"], k, v, ev), file=sys.stderr)
extra = sum(len(acc.Scalars(t)) for t in tags) - n
print(n, bad, len(keys), extra, " ".join(sorted(keys)))
PY
}

ct_run "$CTRAIN" train "$W/tb.ini"
read -r n bad keys extra names <<< "$(compare "$W/run" 2> "$W/cmp.err")"
if [ "$ct_rc" = 0 ] && [ "${bad:-1}" = 0 ] && [ "${extra:-1}" = 0 ] && [ "${n:-0}" -gt 100 ]; then
    ct_pass "TensorBoard's reader gets every scalar of metrics.jsonl at its step, value for value ($n values of $keys keys)"

else ct_fail tensorboard_values "rc $ct_rc: $ct_err; compared $n, bad $bad, extra $extra: $(cat "$W/cmp.err")"; fi
missing=""
for k in loss loss/ce loss/zloss lse_mean logit_norm_mean logit_norm_max grad_norm lr tokens_per_s mfu \
         val/loss probe/; do
    case " $names" in *" $k"*) ;; *) missing="$missing $k" ;; esac
done
[ -z "$missing" ] && ct_pass "the scalars include loss and each term, lse, logit norms, grad norm, lr, tokens/s, MFU, val/, probe/" \
    || ct_fail tensorboard_keys "missing:$missing among: $names"

# readable while the run goes on: the first steps are read back before the run ends (steps
# enough that it cannot end while python imports tensorboard; it is stopped with SIGTERM)
sed -e 's/^steps = 12/steps = 100000/' -e 's/^log_every = 2/log_every = 1/' -e "s|$W/run|$W/live|" \
    -e 's/^probe = true/probe = false/' "$W/tb.ini" > "$W/live.ini"
"$CTRAIN" train "$W/live.ini" > "$W/live.log" 2>&1 &
pid=$!
seen=$("$py" - "$W/live/tb" "$pid" <<'PY'
import os, sys, time, warnings
warnings.filterwarnings("ignore")
from tensorboard.backend.event_processing import event_accumulator as ea
d, pid = sys.argv[1], int(sys.argv[2])
end = time.time() + 60
while time.time() < end:
    if os.path.isdir(d):
        acc = ea.EventAccumulator(d)
        acc.Reload()
        if "loss" in acc.Tags()["scalars"] and len(acc.Scalars("loss")) >= 3:
            alive = os.path.exists("/proc/%d" % pid)
            print("%d %d" % (len(acc.Scalars("loss")), alive))
            sys.exit(0)
    time.sleep(0.2)
print("0 0")
PY
)
kill "$pid" 2> /dev/null
wait "$pid" 2> /dev/null
[ "${seen#* }" = 1 ] && ct_pass "the event file is read by TensorBoard while the run goes on (${seen% *} steps seen)" \
    || ct_fail tensorboard_live "seen '$seen': $(tail -3 "$W/live.log")"

# a run stopped after step 7 (checkpoints at 4 and 7), resumed from step 4: steps 5..7 run again
# and step 6 is logged again; TensorBoard shows each step once, with the values of metrics.jsonl
sed -e "s|$W/run|$W/res|" -e 's/^eval_every = 4/eval_every = 4\ncheckpoint_every = 4\nkeep_checkpoints = 5/' \
    "$W/tb.ini" > "$W/res.ini"
ct_run "$CTRAIN" train "$W/res.ini" --stop-after 7
rc1=$ct_rc
ct_run "$CTRAIN" train "$W/res.ini" --resume-from "$W/res/checkpoints/step_00000004"
read -r n bad keys extra names <<< "$(compare "$W/res" 2> "$W/cmp.err")"
files=$(ls "$W/res/tb" | wc -l)
if [ "$rc1" = 0 ] && [ "$ct_rc" = 0 ] && [ "$files" = 2 ] && [ "${bad:-1}" = 0 ] && [ "${extra:-1}" = 0 ]; then
    ct_pass "stopped at 7, resumed from 4: two event files, each step once, = metrics.jsonl ($n values)"
else ct_fail tensorboard_resume "rc $rc1/$ct_rc, $files files, bad $bad, extra $extra: $(cat "$W/cmp.err")"; fi
ct_summary
