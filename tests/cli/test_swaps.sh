#!/usr/bin/env bash
# test_swaps.sh — any plugin swaps with one line (issue 33): each plugin's own keys live in
# [KIND.NAME] (precision, strategy, comm, device, optimizer; loss terms in [loss.NAME]; the
# model's stay in [model]), so a swap leaves the old plugin's keys inert. Checks: every shipped plugin of every
# kind swapped for every other by one --set, on every INI of ini/ and examples/, on the
# resolved configuration of each, and on a run's own config.ini; the old flat layout still works
# (a flat key of the selected plugin taken with a note, another plugin's inert with a note, a
# key no plugin knows an error with the nearest key); validate lists inert sections; --unset;
# resume from a checkpoint whose config.ini has the old layout.
set -u
source "$(dirname "$0")/lib.sh"
ct_need_ctrain
cd "$CT_TMP"

# one shard big enough for every INI of ini/ (256 ranks x 2 sequences of 2048+1 tokens)
ct_shard tok.bin 1100000 256
DATA=(--set "data.train=$CT_TMP/tok.bin" --set data.val=)

# The built plugins of a kind (CUDA ones only where they were built).
plugins_of() { ls "$BUILD/plugins/" | sed -n "s/^$1_\(.*\)\.so$/\1/p" | sort; }
# The --set key that picks the plugin of a kind.
pick_key() {
    case $1 in loss) echo loss.plugins ;; device) echo device.type ;; *) echo "$1.plugin" ;; esac
}
KINDS="model loss strategy precision comm device optimizer"

# Refusals a swap may meet that are about the machine or another kind's plugin, never about
# keys: a CUDA plugin on a machine without a GPU; a plugin beside a device it does not run on
# (comm nccl with [device] type = cpu, comm threads with cuda).
HARDWARE_REFUSALS="no CUDA-capable GPU found|plugin '[a-z_0-9]+' runs only on (cpu|cuda)"
accepted=0

# swap_to INI KIND X [--set ...]: validate INI with plugin X of KIND by one --set. Exit 0, or
# a refusal that is not about keys: comm local/mpi under [comm] world_size > 1 (their world is
# the launcher's), which then validates with world_size = 1; one of HARDWARE_REFUSALS (counted
# in $accepted). Sets swap_err to the reason on failure.
swap_to() {
    local ini=$1 kind=$2 x=$3
    shift 3
    "$CTRAIN" validate "$ini" "${DATA[@]}" "$@" --set "$(pick_key "$kind")=$x" \
        > swap.out 2> swap.err && return 0
    if [ "$kind" = comm ] && grep -q "needs an in-process engine; comm $x takes its world" swap.err &&
        "$CTRAIN" validate "$ini" "${DATA[@]}" "$@" --set "comm.plugin=$x" \
            --set comm.world_size=1 > swap.out 2> swap.err; then
        return 0
    fi
    if grep -qE "$HARDWARE_REFUSALS" swap.err && ! grep -qE "unknown (key|section)|given twice" swap.err; then
        accepted=$((accepted + 1))
        return 2
    fi
    swap_err="$x: $(grep -v '^note:\|^\[rank' swap.err | head -2)"
    return 1
}

# every_swap NAME INI: for each kind, each plugin A: INI resolved with A (validate's output, a
# configuration in its own right), then that resolved configuration swapped to each plugin B.
every_swap() {
    local name=$1 ini=$2 kind a b bad
    for kind in $KINDS; do
        bad=""
        for a in $(plugins_of "$kind"); do
            swap_to "$ini" "$kind" "$a"
            case $? in 1) bad+="  $ini -> $swap_err"$'\n'; continue ;; 2) continue ;; esac
            cp swap.out "resolved_$a.ini"
            for b in $(plugins_of "$kind"); do
                [ "$a" = "$b" ] && continue
                swap_to "resolved_$a.ini" "$kind" "$b"
                [ $? -eq 1 ] && bad+="  $a resolved -> $swap_err"$'\n'
            done
        done
        if [ -z "$bad" ]; then ct_pass "swap_${name}_$kind"
        else ct_fail "swap_${name}_$kind" $'\n'"$bad"; fi
    done
}

# ---- every example INI, as written and swapped --------------------------------------------
cc -std=c11 -shared -fPIC -fvisibility=hidden -Wl,-z,defs -I"$ROOT/sdk/include" \
    "$ROOT/examples/loss_mse_logit/mse_logit.c" -o loss_mse_logit.so -lm || ct_fail example_build "cc failed"
cc -std=c11 -shared -fPIC -fvisibility=hidden -Wl,-z,defs -I"$ROOT/sdk/include" \
    "$ROOT/examples/precision_gather_sum/gather_sum.c" -o precision_gather_sum.so -lm \
    || ct_fail example_build "cc failed"
cc -std=c11 -shared -fPIC -fvisibility=hidden -Wl,-z,defs -I"$ROOT/sdk/include" \
    "$ROOT/examples/optimizer_signum/signum.c" -o optimizer_signum.so -lm \
    || ct_fail example_build "cc failed"
for ini in "$ROOT"/ini/*.ini "$ROOT"/ini/*/*.ini "$ROOT"/ini/*/*/*.ini "$ROOT"/examples/*/*.ini; do
    [ -f "$ini" ] || continue
    name=$(basename "$ini" .ini)
    ct_run "$CTRAIN" validate "$ini" "${DATA[@]}"
    if [ "$ct_rc" -ne 0 ]; then ct_fail "validates_$name" "$ct_err"; continue; fi
    if grep -q '^note:' "$CT_TMP/err"; then
        ct_fail "no_notes_$name" "a shipped INI in the old layout: $(grep '^note:' "$CT_TMP/err" | head -2)"
    else
        ct_pass "validates_without_notes_$name"
    fi
    every_swap "$name" "$ini"
done

# ---- the issue's three cases ----------------------------------------------------------------
base() {  # base FILE: a tiny run in the layout of before issue 33 (flat plugin keys)
    {
        printf '[run]\nname = sw\nout_dir = %s/run\nsteps = 2\nlog_every = 1\n' "$CT_TMP"
        printf '[data]\ntrain = %s/tok.bin\nbatch_size = 2\nseq_len = 16\n' "$CT_TMP"
        printf '[model]\nplugin = gpt\nn_layer = 1\nn_head = 2\nd_model = 32\n'
        printf 'vocab_size = 256\nseq_len = 16\n'
        cat
    } > "$1"
}
DATA=()

# 1. [precision] holds a policy's key; --set precision.plugin=fp32 makes it inert
base prec.ini <<'EOF'
[precision]
plugin = bf16_sr
seed_offset = 3
EOF
ct_run "$CTRAIN" validate prec.ini --set precision.plugin=fp32
if [ "$ct_rc" -eq 0 ] && grep -q "note: prec.ini:.*\[precision\] seed_offset is a key of precision plugin bf16_sr, not of fp32 (the one selected): inert" "$CT_TMP/err" &&
    grep -q '^;   \[precision.bf16_sr\] .*inert: the precision plugin is fp32' "$CT_TMP/out"; then
    ct_pass flat_key_of_unselected_plugin_is_inert_with_note
else
    ct_fail flat_key_of_unselected_plugin_is_inert_with_note "rc $ct_rc: $ct_err"
fi
# a custom policy's own section (its plugin not installed) is inert under another policy
base custom.ini <<'EOF'
[precision]
plugin = amp
[precision.kahan]
kahan = true
EOF
ct_run "$CTRAIN" validate custom.ini --set precision.plugin=fp32
if [ "$ct_rc" -eq 0 ] && grep -q '^;   \[precision.kahan\] .*inert: the precision plugin is fp32 (custom.ini:' "$CT_TMP/out"; then
    ct_pass custom_plugin_section_inert
else
    ct_fail custom_plugin_section_inert "rc $ct_rc: $ct_err"
fi
# a key no precision plugin knows is still an error, with the nearest key
base typo.ini <<'EOF'
[precision]
plugin = amp
grad_acum_dtype = f32
EOF
ct_expect_failure flat_key_no_plugin_knows_is_error \
    "typo.ini:19: [precision] unknown key 'grad_acum_dtype' (did you mean 'grad_accum_dtype'?)|no precision plugin on the search path has it" \
    "$CTRAIN" validate typo.ini

# 2. --set loss.plugins=ce while [loss.zloss] exists
base loss.ini <<'EOF'
[loss]
plugins = ce, zloss
[loss.zloss]
coef = 1e-3
EOF
ct_run "$CTRAIN" validate loss.ini --set loss.plugins=ce
if [ "$ct_rc" -eq 0 ] && grep -q '^;   \[loss.zloss\] .*inert: \[loss\] plugins = ce does not list zloss' "$CT_TMP/out"; then
    ct_pass unlisted_loss_term_section_inert
else
    ct_fail unlisted_loss_term_section_inert "rc $ct_rc: $ct_err"
fi

# 3. a run's resolved config.ini reused with another comm plugin (and every other swap)
base run.ini <<'EOF'
[comm]
plugin = threads
world_size = 1
algo = tree
[strategy]
plugin = ddp
bucket_mb = 1
EOF
ct_run timeout 300 "$CTRAIN" train run.ini
if [ "$ct_rc" -ne 0 ] || [ ! -f run/config.ini ]; then
    ct_fail run_trains "rc $ct_rc: $(tail -3 "$CT_TMP/err")"
else
    ct_pass run_trains
    # the resolved config: each plugin's keys in its own section, right after its kind's
    if awk '/^\[comm\]/{c=NR} /^\[comm.threads\]/{t=NR} END{exit !(c && t > c)}' run/config.ini &&
        grep -q '^algo = tree' run/config.ini && ! awk '/^\[comm\]/{s=1;next} /^\[/{s=0} s && /^algo/' run/config.ini | grep -q .; then
        ct_pass resolved_config_plugin_keys_in_own_section
    else
        ct_fail resolved_config_plugin_keys_in_own_section "$(sed -n '/^\[comm/,/^\[device/p' run/config.ini)"
    fi
    ct_run "$CTRAIN" validate run/config.ini --set comm.plugin=local
    if [ "$ct_rc" -eq 0 ] && grep -q '^;   \[comm.threads\] .*inert: the comm plugin is local' "$CT_TMP/out" &&
        ! grep -q '^note:' "$CT_TMP/err"; then
        ct_pass run_config_reruns_with_local_comm
    else
        ct_fail run_config_reruns_with_local_comm "rc $ct_rc: $ct_err"
    fi
    cp run/config.ini run_config.ini
    every_swap run_config run_config.ini
fi

# ---- the old flat layout ------------------------------------------------------------------
ct_run "$CTRAIN" validate run.ini
if [ "$ct_rc" -eq 0 ] &&
    grep -q "note: run.ini:.*\[comm\] algo is a key of comm plugin threads, taken from \[comm\] ---> write it under \[comm.threads\]" "$CT_TMP/err" &&
    awk '/^\[comm.threads\]/{s=1;next} /^\[/{s=0} s' "$CT_TMP/out" | grep -q '^algo = tree *; run.ini:'; then
    ct_pass flat_key_of_selected_plugin_taken_with_note
else
    ct_fail flat_key_of_selected_plugin_taken_with_note "rc $ct_rc: $ct_err"
fi
ct_run "$CTRAIN" validate run.ini --set comm.channels=2
if [ "$ct_rc" -eq 0 ] && grep -q -- "---> --set comm.threads.channels=2" "$CT_TMP/err" &&
    grep -q '^channels = 2 *; --set' "$CT_TMP/out"; then
    ct_pass flat_set_taken_with_note_naming_the_section
else
    ct_fail flat_set_taken_with_note_naming_the_section "rc $ct_rc: $ct_err"
fi
base new.ini <<'EOF'
[comm]
plugin = threads
[comm.threads]
algo = ring
EOF
ct_run "$CTRAIN" validate new.ini --set comm.algo=tree
if [ "$ct_rc" -eq 0 ] && grep -q '^algo = tree *; --set' "$CT_TMP/out"; then
    ct_pass flat_set_overrides_the_file_section
else
    ct_fail flat_set_overrides_the_file_section "rc $ct_rc: $ct_err"
fi
ct_run "$CTRAIN" validate run.ini --set comm.threads.algo=ring
if [ "$ct_rc" -eq 0 ] && grep -q '^algo = ring *; --set' "$CT_TMP/out"; then
    ct_pass section_set_overrides_the_file_flat_key
else
    ct_fail section_set_overrides_the_file_flat_key "rc $ct_rc: $ct_err"
fi
ct_run "$CTRAIN" validate new.ini
if [ "$ct_rc" -eq 0 ] && ! grep -v '^ctrain: .* is valid' "$CT_TMP/err" | grep -q .; then
    ct_pass new_layout_without_notes
else
    ct_fail new_layout_without_notes "rc $ct_rc: $ct_err"
fi
ct_expect_failure unknown_section_still_refused "unknown section [comms] (did you mean [comm]?)" \
    "$CTRAIN" validate new.ini --set comms.plugin=local

# ---- --unset ---------------------------------------------------------------------------------
ct_run "$CTRAIN" validate new.ini --unset comm.threads.algo
if [ "$ct_rc" -eq 0 ] && grep -q '^algo = ring *; default' "$CT_TMP/out"; then
    ct_pass unset_removes_a_key
else
    ct_fail unset_removes_a_key "rc $ct_rc: $ct_out"
fi
ct_run "$CTRAIN" validate new.ini --set comm.threads.algo=tree --unset=comm.threads.algo
if [ "$ct_rc" -eq 0 ] && grep -q '^algo = ring *; default' "$CT_TMP/out"; then
    ct_pass unset_applies_in_order_after_set
else
    ct_fail unset_applies_in_order_after_set "rc $ct_rc: $ct_out"
fi
ct_run "$CTRAIN" validate new.ini --unset comm.threads.nope
if [ "$ct_rc" -eq 0 ] && grep -q 'note: --unset comm.threads.nope: new.ini has no such key' "$CT_TMP/err"; then
    ct_pass unset_of_absent_key_is_a_note
else
    ct_fail unset_of_absent_key_is_a_note "rc $ct_rc: $ct_err"
fi
ct_expect_failure unset_malformed "--unset 'comm'|expected the form --unset section.key" \
    "$CTRAIN" validate new.ini --unset comm
ct_expect_failure unset_needs_argument "--unset needs an argument" "$CTRAIN" validate new.ini --unset
# the old plugin's flat key removed by --unset: no note at all
ct_run "$CTRAIN" validate prec.ini --set precision.plugin=fp32 --unset precision.seed_offset
if [ "$ct_rc" -eq 0 ] && ! grep -q '^note:' "$CT_TMP/err"; then
    ct_pass unset_silences_a_flat_key
else
    ct_fail unset_silences_a_flat_key "rc $ct_rc: $ct_err"
fi
rm -rf "$CT_TMP/run2"
ct_run timeout 300 "$CTRAIN" train new.ini --set "run.out_dir=$CT_TMP/run2" --unset comm.threads.algo
if [ "$ct_rc" -eq 0 ] && grep -q '^algo = ring *; default' run2/config.ini; then
    ct_pass train_takes_unset
else
    ct_fail train_takes_unset "rc $ct_rc: $(tail -2 "$CT_TMP/err")"
fi
ct_run "$CTRAIN" logits new.ini --unset comm.threads.algo
if [ "$ct_rc" -ne 0 ] && ! grep -q 'unset' "$CT_TMP/err" && grep -q -- '--tokens' "$CT_TMP/err"; then
    ct_pass logits_takes_unset
else
    ct_fail logits_takes_unset "rc $ct_rc: $ct_err"
fi

# ---- resume from a checkpoint written in the old flat layout ---------------------------------
# run/ was trained from run.ini (new layout written). Rewrite its checkpoint's config.ini in the
# layout of before issue 33 (plugin keys flat in their kind's section), with the manifest's
# checksum to match, and resume from it with the new-layout and the old-layout INI alike.
if [ -d run/checkpoints ]; then
    ck=$(ls -d run/checkpoints/step_* | tail -1)
    python3 - "$ck" <<'PY'
import re, sys
d = sys.argv[1]
text = open(d + "/config.ini").read()
# [KIND.NAME] sections of the selected plugins folded into [KIND]
out, cur = [], None
for line in text.splitlines():
    m = re.match(r"^\[(comm|strategy|precision|device)\.[a-z_0-9]+\]$", line)
    if m:
        cur = m.group(1)
        continue
    out.append(line)
# move each folded section's keys under its parent header
secs, order, name = {}, [], None
for line in text.splitlines():
    m = re.match(r"^\[(.*)\]$", line)
    if m:
        name = m.group(1)
        parent = re.sub(r"\.[a-z_0-9]+$", "", name) if re.match(r"^(comm|strategy|precision|device)\.", name) else name
        if parent not in secs:
            secs[parent] = []
            order.append(parent)
        name = parent
        continue
    if name is not None and line.strip():
        secs[name].append(line)
flat = "\n\n".join("[%s]\n%s" % (s, "\n".join(secs[s])) for s in order) + "\n"
open(d + "/config.ini", "w").write(flat)
h = 0xcbf29ce484222325
for b in flat.encode():
    h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
man = open(d + "/manifest.ini").read()
man = re.sub(r"config_fnv1a64 = [0-9a-f]+", "config_fnv1a64 = %016x" % h, man)
open(d + "/manifest.ini", "w").write(man)
PY
    if grep -q '^\[comm\.' "$ck/config.ini" || ! awk '/^\[comm\]/{s=1;next} /^\[/{s=0} s' "$ck/config.ini" | grep -q '^algo'; then
        ct_fail old_layout_checkpoint_made "$(cat "$ck/config.ini")"
    fi
    cp -r run run_old
    ct_run timeout 300 "$CTRAIN" train run.ini --resume --set run.steps=3
    if [ "$ct_rc" -eq 0 ] && grep -q '"step": *3' run/metrics.jsonl; then
        ct_pass resume_old_layout_checkpoint_old_layout_ini
    else
        ct_fail resume_old_layout_checkpoint_old_layout_ini "rc $ct_rc: $(tail -3 "$CT_TMP/err")"
    fi
    rm -rf run; mv run_old run
    ct_run timeout 300 "$CTRAIN" train run_config.ini --resume --set run.steps=3
    if [ "$ct_rc" -eq 0 ] && grep -q '"step": *3' run/metrics.jsonl; then
        ct_pass resume_old_layout_checkpoint_new_layout_ini
    else
        ct_fail resume_old_layout_checkpoint_new_layout_ini "rc $ct_rc: $(tail -3 "$CT_TMP/err")"
    fi
fi

echo "(swaps refused for the machine, not for keys: $accepted; $HARDWARE_REFUSALS)"
ct_summary
