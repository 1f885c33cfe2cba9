#!/usr/bin/env bash
# Every file that crosses into ctrain, and every output it writes, at its edge: each command is
# walked with a FIFO, a character device (made here with mknod, like /dev/zero) and a link to it
# in each file argument and in each file a run folder holds, under a time bound (a hang is a
# failure); outputs aimed at such nodes, at a command's own input, into a run's checkpoints
# folder, through a symbolic link or onto an existing export are refused and leave the target
# as it was; strings never reach gnuplot as program text; malformed inputs that used to be
# accepted are refused by name. The one reader is host/io/files.c, the one writer host/io/outfile.c.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/train_lib.sh"   # small_run_setup
cd "$CT_TMP" || exit 1
W=$CT_TMP
BOUND=20   # seconds: every refusal here is immediate; a command that hangs is killed and fails

# ---- fixtures: a 4-step run with two checkpoints, its export, hostile nodes -------------------
small_run_setup "$W" || { ct_summary; exit 1; }
sed -i -e 's/^val =.*/val = data\/val_*.bin/' -e 's/^train = .*/train = data\/train_*.bin/' "$W/t.ini"
"$CTRAIN" train "$W/t.ini" --set run.out_dir=run --set run.steps=4 --set run.checkpoint_every=2 \
    --set run.log_every=1 > train.log 2>&1 || { ct_fail setup "train: $(tail -3 train.log)"; ct_summary; exit 1; }
"$CTRAIN" export run --format safetensors --out exp > export.log 2>&1 \
    || { ct_fail setup "export: $(tail -3 export.log)"; ct_summary; exit 1; }
mkfifo fifo
mknod zero c 1 5            # the kernel's zero device, under a name of this test's own
ln -s zero zlink
mkfifo fifo.so
REL=checkpoints/step_00000004   # inside a run folder
CKPT=run/$REL

# bounded NAME NEEDLE command...: fails non-zero within BOUND seconds, no crash, stderr holds
# NEEDLE, and the hostile nodes are still what they were.
bounded() {
    local name=$1 needle=$2
    shift 2
    ct_run timeout -k 5 "$BOUND" "$@"
    if [ "$ct_rc" -eq 124 ] || [ "$ct_rc" -eq 137 ]; then ct_fail "$name" "hung (killed after ${BOUND}s)"; return; fi
    if [ "$ct_rc" -eq 0 ]; then ct_fail "$name" "exited 0; expected a refusal"; return; fi
    if [ "$ct_rc" -ge 128 ]; then ct_fail "$name" "crashed (exit $ct_rc): $ct_err"; return; fi
    if ! grep -qF -- "$needle" "$CT_TMP/err"; then ct_fail "$name" "stderr lacks \"$needle\": $ct_err"; return; fi
    if [ ! -p fifo ] || [ ! -c zero ]; then ct_fail "$name" "a hostile node was replaced"; return; fi
    ct_pass "$name"
}
NOT_REG="not a regular file"

# a copy of the run whose file REL is replaced by NODE (fifo, zero or zlink)
run_with() {  # DIR REL NODE
    rm -rf "$1"; cp -r run "$1"; rm -f "$1/$2"
    case $3 in fifo) mkfifo "$1/$2" ;; zero) mknod "$1/$2" c 1 5 ;; zlink) ln -s "$W/zero" "$1/$2" ;; esac
}

# ---- the reader: every file argument ------------------------------------------------------
for node in fifo zero zlink; do
    bounded "validate_config_$node" "$NOT_REG" "$CTRAIN" validate "$node"
    bounded "train_config_$node" "$NOT_REG" "$CTRAIN" train "$node"
    bounded "init_from_$node" "$NOT_REG" "$CTRAIN" validate "$W/t.ini" --set "model.init_from=$node"
    bounded "train_shard_$node" "$NOT_REG" "$CTRAIN" validate "$W/t.ini" --set "data.train=$node"
    bounded "sample_tokenizer_$node" "$NOT_REG" "$CTRAIN" sample run --tokenizer "$node" --prompt x --tokens 2
    bounded "prepare_text_$node" "$NOT_REG" "$CTRAIN" prepare --text "$node" --out "prep_$node"
    bounded "prepare_sp_model_$node" "$NOT_REG" "$CTRAIN" prepare --text /usr/share/common-licenses/GPL-3 \
        --tokenizer sentencepiece --sp-model "$node" --out "prep_sp_$node"
    bounded "logits_tokens_$node" "$NOT_REG" "$CTRAIN" logits "$CKPT" --tokens "$node" --out "l_$node.bin"
    bounded "reduce_input_$node" "$NOT_REG" "$CTRAIN" reduce --world-size 2 --in "$node" --out "r_$node.bin"
done
bounded check_plugin_fifo "$NOT_REG" "$CTRAIN" check-plugin ./fifo.so
bounded inspect_fifo "$NOT_REG" "$CTRAIN" inspect ./fifo.so

# ---- the reader: every file a run folder holds ----------------------------------------------
for node in fifo zero zlink; do
    run_with "r_tok_$node" tokenizer.ini "$node"
    bounded "sample_tokenizer_ini_$node" "$NOT_REG" "$CTRAIN" sample "r_tok_$node" --prompt x --tokens 2
    run_with "r_rank_$node" "$REL/rank_00000.bin" "$node"
    bounded "export_rank_file_$node" "$NOT_REG" "$CTRAIN" export "r_rank_$node/$REL" --format llmc --out "x_$node.bin"
    bounded "sample_rank_file_$node" "$NOT_REG" "$CTRAIN" sample "r_rank_$node/$REL" --prompt x --tokens 2
    bounded "what_if_rank_file_$node" "$NOT_REG" "$CTRAIN" what-if "r_rank_$node/$REL" --world-sizes 2
    bounded "resume_from_rank_file_$node" "$NOT_REG" "$CTRAIN" train "$W/t.ini" \
        --set "run.out_dir=r_rank_$node" --resume-from "r_rank_$node/$REL"
    run_with "r_cfg_$node" "$REL/config.ini" "$node"
    bounded "export_checkpoint_config_$node" "$NOT_REG" "$CTRAIN" export "r_cfg_$node/$REL" --format llmc --out "y_$node.bin"
    run_with "r_met_$node" metrics.jsonl "$node"
    bounded "compare_metrics_$node" "$NOT_REG" "$CTRAIN" compare "r_met_$node" run
    bounded "plot_metrics_$node" "$NOT_REG" "$CTRAIN" plot "r_met_$node" --metric loss --out "p_$node.png"
done
# --resume walks back past a damaged newest checkpoint, saying why (never blocks on it)
run_with r_walk "$REL/rank_00000.bin" fifo
ct_run timeout -k 5 "$BOUND" "$CTRAIN" train "$W/t.ini" --set run.out_dir=r_walk --resume
if [ "$ct_rc" -eq 0 ] && grep -q "skipping checkpoint .*FIFO" "$CT_TMP/err"; then ct_pass resume_skips_a_fifo_rank_file
else ct_fail resume_skips_a_fifo_rank_file "rc $ct_rc: $ct_err"; fi

# ---- the writer: targets that are refused, left as they were ------------------------------
for node in fifo zero; do
    bounded "export_llmc_onto_$node" "$NOT_REG" "$CTRAIN" export run --format llmc --out "$node"
    bounded "plot_onto_$node" "$NOT_REG" "$CTRAIN" plot run --metric loss --out "$node"
    bounded "logits_onto_$node" "$NOT_REG" "$CTRAIN" logits "$CKPT" --tokens data/val_000000.bin --out "$node"
    bounded "what_if_per_row_onto_$node" "$NOT_REG" "$CTRAIN" what-if "$CKPT" --world-sizes 2 --per-row "$node"
    bounded "reduce_onto_$node" "$NOT_REG" "$CTRAIN" reduce --world-size 1 --in data/val_000000.bin --out "$node"
    bounded "export_folder_onto_$node" "not a folder" "$CTRAIN" export run --format safetensors --out "$node"
    bounded "prepare_folder_onto_$node" "not a folder" "$CTRAIN" prepare --text /usr/share/common-licenses/GPL-3 --out "$node"
done
bounded export_onto_its_own_checkpoint "a file this command reads" \
    "$CTRAIN" export run --format llmc --out "$CKPT/rank_00000.bin"
bounded export_into_checkpoints "inside a run's checkpoints folder" \
    "$CTRAIN" export run --format llmc --out "$CKPT/new.bin"
bounded export_folder_into_checkpoints "inside a run's checkpoints folder" \
    "$CTRAIN" export run --format safetensors --out run/checkpoints/exp
"$CTRAIN" sample "$CKPT" --prompt ab --tokens 4 --greedy > resumable.txt 2>&1 \
    && ct_pass checkpoint_intact_after_refusals || ct_fail checkpoint_intact_after_refusals "$(cat resumable.txt)"
bounded export_onto_symlink "symbolic link" "$CTRAIN" export run --format llmc --out zlink
mkdir -p elsewhere; ln -s elsewhere linked_dir
bounded export_into_symlinked_folder "symbolic link" "$CTRAIN" export run --format safetensors --out linked_dir
bounded prepare_into_symlinked_folder "symbolic link" "$CTRAIN" prepare --text /usr/share/common-licenses/GPL-3 --out linked_dir
[ -z "$(ls elsewhere)" ] && ct_pass symlinked_folder_untouched || ct_fail symlinked_folder_untouched "$(ls elsewhere)"
bounded export_over_an_export "exists and is not empty" "$CTRAIN" export run --format safetensors --out exp
ct_run "$CTRAIN" export run --format safetensors --out exp --force
[ "$ct_rc" -eq 0 ] && ct_pass export_over_an_export_with_force || ct_fail export_over_an_export_with_force "$ct_err"
"$CTRAIN" export run --format llmc --out model.bin > /dev/null 2>&1
bounded export_llmc_over_a_file "exists ---> use --force" "$CTRAIN" export run --format llmc --out model.bin
ct_run "$CTRAIN" export run --format llmc --out nested/new/model.bin
[ "$ct_rc" -eq 0 ] && [ -s nested/new/model.bin ] && ct_pass export_creates_parent_folders \
    || ct_fail export_creates_parent_folders "$ct_err"
bounded prepare_into_its_data "exists and is not empty" "$CTRAIN" prepare --text /usr/share/common-licenses/GPL-3 --out data

# ---- strings into gnuplot: data, never program text ---------------------------------------
NL=$'\n'
for s in "x${NL}system \"touch PWNED\"" "x${NL}!touch PWNED" $'x\rsystem "touch PWNED"'; do
    bounded "plot_title_control_char_$((++k))" "control character" "$CTRAIN" plot run --metric loss --out p.png --title "$s"
    bounded "plot_metric_control_char_$k" "control character" "$CTRAIN" plot run --metric "loss$s" --out p.png
done
ct_run "$CTRAIN" plot run --metric loss --out "q.png" \
    --title "a'; system \"touch PWNED\"; \`touch PWNED\` ; b"
[ "$ct_rc" -eq 0 ] && [ -s q.png ] && ct_pass plot_quotes_semicolons_backquotes_are_text \
    || ct_fail plot_quotes_semicolons_backquotes_are_text "$ct_err"
rm -rf r_name; cp -r run r_name
sed -i "s/^name = .*/name = x$(printf '\x1b')]0;title/" r_name/config.ini
bounded plot_run_name_control_char "control character" "$CTRAIN" plot r_name --metric loss --out p2.png
[ ! -e PWNED ] && ct_pass plot_ran_no_command || ct_fail plot_ran_no_command "PWNED exists"

# ---- accepted though wrong: now refused by name -------------------------------------------
python3 - exp/model.safetensors <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); data = b[8 + n:]
def save(name, header, payload):
    j = json.dumps(header).encode(); j += b" " * (-len(j) % 8)
    open(name, "wb").write(struct.pack("<Q", len(j)) + j + payload)
names = [k for k in h if k != "__metadata__"]
o = json.loads(json.dumps(h)); a, c = o[names[0]], o[names[1]]   # the second aliases the first
c["data_offsets"] = [a["data_offsets"][0], a["data_offsets"][0] + c["data_offsets"][1] - c["data_offsets"][0]]
save("overlap.safetensors", o, data)
save("trailing.safetensors", h, data + b"\0" * 64)
t = names[2]; lo = h[t]["data_offsets"][0]
save("nan.safetensors", h, data[:lo + 8] + struct.pack("<f", float("nan")) + data[lo + 12:])
PY
bounded safetensors_overlap "overlap tensor" "$CTRAIN" validate "$W/t.ini" --set model.init_from=overlap.safetensors
bounded safetensors_trailing "belong to no tensor" "$CTRAIN" validate "$W/t.ini" --set model.init_from=trailing.safetensors
bounded safetensors_nan "holds NaN at element 2" "$CTRAIN" validate "$W/t.ini" --set model.init_from=nan.safetensors
for kv in run.eval_every=-0 optim.grad_clip=-0.0 optim.min_lr=-0; do
    bounded "negative_zero_${kv%%=*}" "negative zero" "$CTRAIN" validate "$W/t.ini" --set "$kv"
done
bounded train_glob_takes_val "both take" "$CTRAIN" validate "$W/t.ini" --set 'data.train=data/*.bin'
bounded eval_batches_beyond_val "more than the validation data holds" \
    "$CTRAIN" validate "$W/t.ini" --set run.eval_every=1 --set run.eval_batches=1e9
bounded master_port_range "MASTER_PORT=99999 is not a port" env RANK=0 WORLD_SIZE=1 MASTER_PORT=99999 "$CTRAIN" validate "$W/t.ini"
bounded master_port_text "MASTER_PORT=abc is not a port" env RANK=0 WORLD_SIZE=1 MASTER_PORT=abc "$CTRAIN" validate "$W/t.ini"
bounded master_addr_empty "MASTER_ADDR is set but empty" env RANK=0 WORLD_SIZE=1 MASTER_ADDR= "$CTRAIN" validate "$W/t.ini"
bounded slurm_ntasks_nprocs "SLURM_NTASKS=1 but SLURM_NPROCS=8" \
    env SLURM_PROCID=0 SLURM_NTASKS=1 SLURM_NPROCS=8 "$CTRAIN" validate "$W/t.ini"
mkdir -p empty_folder
bounded prepare_empty_folder "empty" "$CTRAIN" prepare empty_folder --out prep_empty

# ---- messages that said the wrong thing ---------------------------------------------------
head -c 8 /usr/share/common-licenses/GPL-3 > short.safetensors; head -c 100 /usr/share/common-licenses/GPL-3 >> short.safetensors
bounded safetensors_size_in_message "(108 bytes)" "$CTRAIN" validate "$W/t.ini" --set model.init_from=short.safetensors
python3 -c "import struct,sys; sys.stdout.buffer.write(struct.pack('<256i', 20240327, 5, *([0]*254)))" > v5.bin
bounded llmc_bad_magic_named "ctrain reads llm.c's fp32 model files" "$CTRAIN" validate "$W/t.ini" --set model.init_from=v5.bin
bounded prepare_threads_value "--threads 5000 is outside" "$CTRAIN" prepare --text /usr/share/common-licenses/GPL-3 --threads 5000 --out pt
echo "not a model" > bogus.model
bounded prepare_sp_model_named "bogus.model is not a sentencepiece model" "$CTRAIN" prepare \
    --text /usr/share/common-licenses/GPL-3 --tokenizer sentencepiece --sp-model bogus.model --out psp
bounded seed_range_exact "0..4611686018427387904" "$CTRAIN" validate "$W/t.ini" --set run.seed=-1
# GPT-2 124M under a 2.2 GB address-space cap: the weights fit, AdamW's state does not (an ASan
# build reserves terabytes of shadow memory, which no address-space cap admits: not run there)
if ldd "$CTRAIN" 2> /dev/null | grep -q libasan; then
    echo "skip optimizer_state_oom_names_size_and_hint: an ASan build cannot run under ulimit -v"
else
    (ulimit -v 2200000; exec "$CTRAIN" train "$ROOT/ini/presets/gpt2-124m.ini" --set data.train=data/train_000000.bin \
        --set data.val= --set run.out_dir=oom --set data.seq_len=16 --set data.batch_size=1 --set run.steps=1) \
        > oom.out 2> oom.err
    grep -q "out of memory for the optimizer state of unit .* MB ---> use \[strategy\] plugin = full_shard" oom.err \
        && ct_pass optimizer_state_oom_names_size_and_hint || ct_fail optimizer_state_oom_names_size_and_hint "$(tail -2 oom.err)"
fi
printf '\xef\xbb\xbf' > bom.jsonl; cat run/metrics.jsonl >> bom.jsonl
rm -rf r_bom; cp -r run r_bom; cp bom.jsonl r_bom/metrics.jsonl
ct_run "$CTRAIN" compare r_bom run
[ "$ct_rc" -eq 0 ] && ct_pass jsonl_byte_order_mark_skipped || ct_fail jsonl_byte_order_mark_skipped "$ct_err"
ESC=$(printf '\x1b')
ct_run "$CTRAIN" validate "$W/t.ini" --set "data.train=a${ESC}]0;owned${ESC}[2Jb"
if ! grep -q "$ESC" "$CT_TMP/err" "$CT_TMP/out" && grep -qF 'a\e]0;owned\e[2Jb' "$CT_TMP/err"; then
    ct_pass escape_sequences_are_printed_escaped
else ct_fail escape_sequences_are_printed_escaped "raw escape on the terminal: $(cat -v "$CT_TMP/err")"; fi
ct_run "$CTRAIN" validate "$W/t.ini" --set "run.name=a${ESC}[2Jb"
if [ "$ct_rc" -eq 0 ] && ! grep -q "$ESC" "$CT_TMP/out" && grep -qF 'name = a\e[2Jb' "$CT_TMP/out"; then
    ct_pass validate_prints_values_escaped
else ct_fail validate_prints_values_escaped "rc $ct_rc: $(cat -v "$CT_TMP/out" | grep name)"; fi

# ---- the one reader and the one writer ------------------------------------------------------
# (cmdout.c's fdopen is of a duplicate of the command's stdout, no path; a string that says
# "open()" is text)
opens=$(grep -nE '\b(fopen|fdopen|open|openat)\s*\(' "$ROOT"/host/*/*.c "$ROOT"/host/*/*.cc \
        | grep -vE '^[^:]*/io/(files|outfile)\.c:' | grep -vE '^[^:]*/base/cmdout\.c:[0-9]+: *FILE \*f = fdopen\(keep' \
        | grep -vE '"[^"]*open\(\)' | cut -d: -f1 | xargs -r -n1 basename | sort -u)
[ -z "$opens" ] && ct_pass one_reader_one_writer || ct_fail one_reader_one_writer "files that open files themselves: $opens"

ct_summary
