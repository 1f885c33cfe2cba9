#!/usr/bin/env bash
# test_first_hour.sh — what a user tries in the first hour must work or say what to do
# (issue 31): every command's --help, the tokenizers of train and val data, a default
# eval_batches on a small validation set, long messages kept whole, relative paths, tokenize
# from standard input, sample --echo, what-if's legend, prepare's progress line.
source "$(dirname "$0")/lib.sh"
ct_need_ctrain

# ---- every command answers --help and `ctrain help CMD` with its whole usage ------------
commands=$("$CTRAIN" help | sed -n 's/^  \([a-z][a-z-]*\)\( .*\)\?$/\1/p' | grep -v '^version$')
n=0
for c in $commands; do
    n=$((n + 1))
    ct_run "$CTRAIN" "$c" --help
    a_rc=$ct_rc a_out=$ct_out a_err=$ct_err
    ct_run "$CTRAIN" help "$c"
    if [ "$a_rc" -ne 0 ] || [ "$ct_rc" -ne 0 ]; then
        ct_fail "help_$c" "exit $a_rc (--help) and $ct_rc (help $c); stderr: $a_err $ct_err"
    elif [ "$a_out" != "$ct_out" ]; then
        ct_fail "help_$c" "'$c --help' and 'help $c' differ"
    elif ! grep -q "^usage: ctrain $c\b" <<<"$a_out"; then
        ct_fail "help_$c" "stdout does not start with 'usage: ctrain $c': $a_out"
    elif grep -q "see --help" <<<"$a_out"; then
        ct_fail "help_$c" "the usage sends the reader to --help: $a_out"
    else ct_pass "help_$c"; fi
done
[ "$n" -ge 15 ] && ct_pass "help_loop_saw_every_command ($n)" \
    || ct_fail help_loop_saw_every_command "only $n commands listed by ctrain help"
# the top-level list keeps every usage whole (reduce's ended at "[--policy ")
ct_run "$CTRAIN" help
if grep -q -- "--policy NAME\] \[--stats\]" <<<"$(tr -s ' \n' ' ' <<<"$ct_out")"; then
    ct_pass help_top_level_reduce_whole
else ct_fail help_top_level_reduce_whole "reduce's usage is cut: $(grep -A3 '^  reduce' <<<"$ct_out")"; fi
ct_expect_failure help_unknown_command_is_refused "no command 'sampel'|did you mean 'sample'" \
    "$CTRAIN" help sampel
ct_expect_success help_after_arguments "usage: ctrain train" "$CTRAIN" train x.ini --help

# ---- a small configuration that validates ------------------------------------------------
W=$CT_TMP
mkdir -p "$W/data"
ct_shard "$W/data/train_000.bin" 4096 256
ct_shard "$W/data/val_000.bin" 1024 256
cat > "$W/t.ini" <<INI
[run]
out_dir = $W/run
steps = 2
[data]
train = $W/data/train_*.bin
val = $W/data/val_*.bin
batch_size = 2
seq_len = 16
[model]
plugin = gpt
n_layer = 1
n_head = 2
d_model = 16
vocab_size = 256
seq_len = 16
INI

# ---- no message loses its end: the Llama refusal lists every setting and keeps its hint ---
mkdir -p "$W/llama"
printf '{"model_type": "llama", "num_hidden_layers": 32, "num_attention_heads": 32, "hidden_size": 4096, "vocab_size": 32000, "intermediate_size": 11008, "max_position_embeddings": 2048}\n' \
    > "$W/llama/config.json"
ct_run "$CTRAIN" validate "$W/t.ini" --set model.init_from="$W/llama"
last=$(tail -n 1 <<<"$ct_err")
listed=$(grep -c "in config.json (" <<<"$ct_err")
if [ "$ct_rc" -ne 0 ] && [ "$ct_rc" -lt 128 ] \
    && [[ $last == *"---> set [model] "*"or set [model] from_config = true to take the model's settings from config.json" ]] \
    && [[ $last == *"settings differ from [model] (listed above)"* ]] && [ "$listed" -ge 6 ]; then
    ct_pass long_llama_refusal_keeps_every_setting_and_its_hint
else ct_fail long_llama_refusal_keeps_every_setting_and_its_hint "rc $ct_rc, $listed listed: $ct_err"; fi
# a path too long for the message: the message keeps its beginning and its hint
long=$W/$(printf 'd%.0s' $(seq 1 200))/$(printf 'e%.0s' $(seq 1 200))/$(printf 'f%.0s' $(seq 1 200))
ct_run "$CTRAIN" validate "$W/t.ini" --set "data.train=$long/none_*.bin"
last=$(tail -n 1 <<<"$ct_err")
if [ "$ct_rc" -ne 0 ] && [[ $last == "ctrain: error: --set: [data] train: "* ]] && [[ $last == *" … "*"---> "* ]]; then
    ct_pass long_data_path_message_keeps_its_hint
else ct_fail long_data_path_message_keeps_its_hint "rc $ct_rc: $ct_err"; fi

# ---- train and val data of different tokenizers are refused (meta.ini's records) --------
mkdir -p "$W/book"
ct_shard "$W/book/train_000.bin" 4096 256
ct_shard "$W/book/val_000.bin" 1024 256
printf '[data]\ntokenizer = bpe\ntokenizer_model = tokenizer.json\ntokenizer_fnv64 = 00112233aabbccdd\nvocab_size = 256\n' \
    | cat - "$W/book/meta.ini" > "$W/book/m" && mv "$W/book/m" "$W/book/meta.ini"
printf '[data]\ntokenizer = bytes\nvocab_size = 256\n' | cat - "$W/data/meta.ini" > "$W/data/m" \
    && mv "$W/data/m" "$W/data/meta.ini"
for cmd in validate train; do
    ct_expect_failure "${cmd}_refuses_val_of_another_tokenizer" \
        "[data] train = $W/book|[data] val = $W/data/val_*.bin|different tokenizers|train's is bpe (tokenizer.json, fnv64 00112233aabbccdd)|val's is bytes|---> give validation shards made with train's tokenizer, e.g. --set data.val=$W/book" \
        "$CTRAIN" "$cmd" "$W/t.ini" --set "data.train=$W/book"
done
[ ! -e "$W/run" ] && ct_pass train_refusal_wrote_nothing || ct_fail train_refusal_wrote_nothing "$W/run exists"
ct_expect_success same_tokenizer_validates "" "$CTRAIN" validate "$W/t.ini" --set "data.train=$W/book" \
    --set "data.val=$W/book"

# ---- the default eval_batches adapts to a small validation set; a value set is refused ----
ct_shard "$W/data/val_000.bin" 100 256   # 3 micro-batches of 2 x 16
ct_run "$CTRAIN" train "$W/t.ini" --set run.eval_every=1 --set run.out_dir="$W/evalrun"
notes=$(grep -c "eval_batches: the default 8 is more than the validation data holds, so each evaluation reads all of it: 3 micro-batches" <<<"$ct_err")
if [ "$ct_rc" -eq 0 ] && [ "$notes" -eq 1 ] && grep -q '"val/loss"' "$W/evalrun/metrics.jsonl"; then
    ct_pass default_eval_batches_adapts_and_says_so_once
else ct_fail default_eval_batches_adapts_and_says_so_once "rc $ct_rc, $notes notes: $ct_err"; fi
ct_expect_failure set_eval_batches_too_large_is_refused \
    "[run] eval_batches = 8 is more than the validation data holds: 3 micro-batches|at most 3" \
    "$CTRAIN" validate "$W/t.ini" --set run.eval_every=1 --set run.eval_batches=8
[[ $ct_err == "ctrain: error: --set: [run] eval_batches = 8"* ]] && ct_pass eval_batches_refusal_names_its_own_key_first \
    || ct_fail eval_batches_refusal_names_its_own_key_first "$ct_err"

# ---- one rule for relative paths: the working directory; errors name the resolved path ----
mkdir -p "$W/elsewhere"
ct_expect_failure relative_data_path_error_names_the_resolved_path \
    "[data] train ($W/elsewhere/data, from the working directory)" \
    bash -c "cd '$W/elsewhere' && '$CTRAIN' validate '$W/t.ini' --set data.train=data"
ct_expect_success relative_data_path_resolves_against_the_working_directory "" \
    bash -c "cd '$W' && '$CTRAIN' validate '$W/t.ini' --set data.train=data --set data.val=data"
ct_expect_failure relative_init_from_error_names_the_resolved_path \
    "[model] init_from ($W/elsewhere/x/model.safetensors, from the working directory)" \
    bash -c "cd '$W/elsewhere' && '$CTRAIN' validate '$W/t.ini' --set model.init_from=./x/model.safetensors"
touch "$W/elsewhere/afile"
ct_expect_failure out_dir_under_a_file_is_refused_naming_the_resolved_path \
    "[run] out_dir = afile/run ($W/elsewhere/afile/run, from the working directory): $W/elsewhere/afile is not a folder" \
    bash -c "cd '$W/elsewhere' && '$CTRAIN' validate '$W/t.ini' --set run.out_dir=afile/run"

# ---- tokenize reads standard input ("-") -----------------------------------------------------
ct_run bash -c "printf 'hi' | '$CTRAIN' tokenize bytes -"
[ "$ct_rc" -eq 0 ] && [ "$ct_out" = "104 105" ] && ct_pass tokenize_reads_standard_input \
    || ct_fail tokenize_reads_standard_input "rc $ct_rc, out '$ct_out': $ct_err"
ct_run bash -c "printf '104 105' | '$CTRAIN' tokenize bytes - --decode"
[ "$ct_rc" -eq 0 ] && [ "$ct_out" = "hi" ] && ct_pass tokenize_decodes_standard_input \
    || ct_fail tokenize_decodes_standard_input "rc $ct_rc, out '$ct_out': $ct_err"

# ---- sample --echo prints the prompt before the text generated after it --------------------
ct_run "$CTRAIN" sample "$W/evalrun" --prompt "Hello there" --tokens 4 --echo --greedy
echoed=$ct_out
ct_run "$CTRAIN" sample "$W/evalrun" --prompt "Hello there" --tokens 4 --greedy
if [ "$ct_rc" -eq 0 ] && [ "$echoed" = "Hello there$ct_out" ]; then ct_pass sample_echo_prints_the_prompt_first
else ct_fail sample_echo_prints_the_prompt_first "with --echo '$echoed', without '$ct_out': $ct_err"; fi
ct_run "$CTRAIN" sample "$W/evalrun" --prompt "72 105" --ids --tokens 3 --echo --greedy
[ "$ct_rc" -eq 0 ] && [[ $ct_out == "72 105 "* ]] && [ "$(wc -w <<<"$ct_out")" -eq 5 ] \
    && ct_pass sample_echo_with_ids || ct_fail sample_echo_with_ids "rc $ct_rc '$ct_out': $ct_err"

# ---- what-if's table has a legend: every column named and explained -------------------------
ct_run "$CTRAIN" what-if "$W/evalrun" --world-sizes 2 --policies pure_bf16
missing=""
for col in tokens/rank rel_err bias logit_push predicted; do
    grep -q "^#   $col  *[a-z|(]" <<<"$ct_out" || missing="$missing $col"
done
header=$(grep -n "^ *N algo" <<<"$ct_out" | cut -d: -f1)
legend=$(grep -n "^#   rel_err" <<<"$ct_out" | cut -d: -f1)
if [ "$ct_rc" -eq 0 ] && [ -z "$missing" ] && [ -n "$header" ] && [ -n "$legend" ] && [ "$legend" -lt "$header" ]; then
    ct_pass whatif_prints_a_legend_before_its_table
else ct_fail whatif_prints_a_legend_before_its_table "rc $ct_rc, missing:$missing: $ct_out $ct_err"; fi
ct_run "$CTRAIN" what-if "$W/evalrun" --world-sizes 2 --policies pure_bf16 --rows 8
grep -q "^#   se  *the standard error" <<<"$ct_out" && ct_pass whatif_legend_names_se_with_rows \
    || ct_fail whatif_legend_names_se_with_rows "$ct_out $ct_err"

# ---- prepare's progress line never says the same thing twice --------------------------------
for i in $(seq 1 40); do cat /usr/share/common-licenses/GPL-3; done > "$W/big.txt"
ct_run env CTRAIN_PROGRESS_S=0 "$CTRAIN" prepare --text "$W/big.txt" --out "$W/pp" --tokenizer bytes \
    --unit-bytes 200000 --threads 1
lines=$(grep -c "^prepare: tokenized" <<<"$ct_err")
repeats=$(grep "^prepare: tokenized" <<<"$ct_err" | sed 's/, [0-9.]* MB\/s//' | uniq -d | wc -l)
if [ "$ct_rc" -eq 0 ] && [ "$lines" -ge 3 ] && [ "$repeats" -eq 0 ]; then
    ct_pass prepare_progress_line_printed_once_per_change
else ct_fail prepare_progress_line_printed_once_per_change "rc $ct_rc, $lines lines, $repeats repeated: $ct_err"; fi

ct_summary
