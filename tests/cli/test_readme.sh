#!/usr/bin/env bash
# test_readme.sh — the README's commands run as written, in order, on a fresh clone's state: a
# copy of the tree (tracked and untracked, not ignored, files) whose build/ is $BUILD, where
# `make run RUN_ARGS="--set run.steps=10"` makes data/default and runs/tiny as `make run` does
# (fewer steps), then every block the README marks runs: a ```sh block right after a line
# `<!-- readme-test -->` runs in one bash (set -e) after the blocks before it; a ```python block
# after `<!-- readme-test: python -->` runs with a python that imports transformers
# ($CTRAIN_INTEROP_PYTHON, .venv-interop, python3), and is skipped, saying so, when there is none;
# a shell block the test cannot run says why (`<!-- readme-test: skip WHY -->`), and an unmarked
# one fails. A block that fails fails the test, naming its README line. Not for: what the
# commands print (the other tests check that).
build_given=${BUILD:-build}   # as given: lib.sh makes BUILD absolute
source "$(dirname "$0")/lib.sh"
ct_need_ctrain

work=$CT_TMP/clone
mkdir -p "$work"
if ! (cd "$ROOT" && git ls-files -z -co --exclude-standard > "$CT_TMP/files") 2> "$CT_TMP/git.err"; then
    echo "skip test_readme: $ROOT is not a git checkout ($(cat "$CT_TMP/git.err"))"
    ct_summary; exit
fi
# A deleted-but-tracked file is left out; mtimes are kept, so make finds $BUILD up to date.
(cd "$ROOT" && xargs -0 -a "$CT_TMP/files" sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh |
    tar -cf - --null -T - ) | (cd "$work" && tar -xf -)
ln -s "$BUILD" "$work/build"
case $build_given in
    /*|build) ;;
    *) mkdir -p "$work/$(dirname "$build_given")"; ln -sfn "$BUILD" "$work/$build_given" ;;
esac
# GPT-2's ranks file: make test's deps step fetched it into the checkout; reuse it.
if [ -f "$ROOT/.deps/tokenizers/gpt2.tiktoken" ]; then
    mkdir -p "$work/.deps/tokenizers"
    cp "$ROOT/.deps/tokenizers/gpt2.tiktoken" "$work/.deps/tokenizers/"
fi

# make in the copy must find $BUILD as it is: the same compilers, flags and CUDA mode as the
# build (read from its stamps), not whatever the calling make passed along.
unset MAKEFLAGS MFLAGS MAKELEVEL MAKEOVERRIDES
export BUILD=build
flags=$(cat "$work/build/.cflags" 2> /dev/null || true)
if [ -n "$flags" ]; then
    export CC=${flags%% *}
    rest=${flags#* }
    export CXX=${rest%% *}
    opt=${flags#*-D_GNU_SOURCE }
    export OPT=${opt%% -g -fPIC*}
    san=$(grep -o -- '-fsanitize=[a-z,]*' <<< "$flags" | head -1)
    export SANITIZER=${san#-fsanitize=}
fi
[ -e "$work/build/.cuda-off" ] && export CUDA=0
[ -e "$work/build/.cuda-on" ] && export CUDA=1
# Open MPI refuses root without these (the README says so beside its mpirun line).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# The default corpus as make run fetches it; if Debian's archive cannot be reached, a stand-in of
# the same size made from the license texts (get-corpus.sh's own fallback is too small for
# tiny.ini's evaluation at two ranks).
corpus_err=$CT_TMP/corpus.err
"$work/scripts/get-corpus.sh" > /dev/null 2> "$corpus_err" || true
if grep -q "stand-in" "$corpus_err"; then
    echo "test_readme: the default corpus could not be fetched ($(head -c 200 "$corpus_err")); using a stand-in"
    export CTRAIN_CORPUS_DIR=$CT_TMP/corpus
    mkdir -p "$CTRAIN_CORPUS_DIR"
    for b in emma mansfieldpark northangerabbey persuasion prideprejudice sensesensibility; do
        for i in 1 2 3 4 5; do cat /usr/share/common-licenses/{GPL-3,GPL-2,LGPL-2.1,GFDL-1.3,Apache-2.0,MPL-2.0}; done \
            > "$CTRAIN_CORPUS_DIR/austen-$b.txt"
    done
fi

# ---- make run, at 10 steps ----------------------------------------------------------------
log=$CT_TMP/run.log
start=$SECONDS
if (cd "$work" && make run RUN_ARGS="--set run.steps=10") > "$log" 2>&1 &&
   [ -d "$work/runs/tiny/checkpoints/step_00000010" ] && [ -s "$work/data/default/meta.ini" ]; then
    ct_pass "make run (10 steps): data/default and runs/tiny/checkpoints/step_00000010 ($((SECONDS - start)) s)"
else
    ct_fail "make run (10 steps)" "$(tail -n 20 "$log")"
    ct_summary; exit
fi

# ---- the README's marked blocks, in order -------------------------------------------------
py=${CTRAIN_INTEROP_PYTHON:-}
[ -z "$py" ] && [ -x "$ROOT/.venv-interop/bin/python" ] && py="$ROOT/.venv-interop/bin/python"
[ -z "$py" ] && py=python3
"$py" -c "import torch, transformers" > /dev/null 2>&1 || py=""

python3 - "$work/README.md" "$CT_TMP/blocks" "$py" > /dev/null <<'PY'
import os, re, sys
readme, out, py = sys.argv[1:4]
lines = open(readme).read().split("\n")
os.makedirs(out)
# Every shell block is marked: run (readme-test) or not, saying why (readme-test: skip WHY).
unmarked = [k + 1 for k, l in enumerate(lines) if l.strip() in ("```sh", "```bash", "```shell")
            and not (k > 0 and re.fullmatch(r"<!-- readme-test(: .+)? -->", lines[k - 1].strip()))]
if unmarked:
    sys.exit("README.md:%s: a shell block without a <!-- readme-test --> (or <!-- readme-test: "
             "skip WHY -->) line above it" % ",".join(map(str, unmarked)))
driver = ["set -eo pipefail"]
n, i = 0, 0
while i < len(lines):
    m = re.fullmatch(r"<!-- readme-test(: python)? -->", lines[i].strip())
    if not m:
        i += 1
        continue
    lang = "python" if m.group(1) else "sh"
    if i + 1 >= len(lines) or lines[i + 1].strip() != "```" + lang:
        sys.exit("README.md:%d: a readme-test mark not followed by a ```%s block" % (i + 1, lang))
    j = i + 2
    while j < len(lines) and lines[j].strip() != "```":
        j += 1
    n += 1
    body = "\n".join(lines[i + 2:j]) + "\n"
    path = os.path.join(out, "%02d.%s" % (n, lang))
    open(path, "w").write(body)
    first = next(l for l in lines[i + 2:j] if l.strip() and not l.lstrip().startswith("#"))
    driver.append("echo '@@block %d %d %s'; t0=$SECONDS" % (n, i + 3, first[:70].replace("'", "")))
    if lang == "sh":
        driver.append(". '%s'" % path)
    elif py:
        driver.append("'%s' '%s'" % (py, path))
    else:
        driver.append("echo '@@skip %d'" % n)
    driver.append("echo \"@@ok %d $((SECONDS - t0))\"" % n)
    i = j + 1
open(os.path.join(out, "driver.sh"), "w").write("\n".join(driver) + "\n")
print(n)
PY
[ -f "$CT_TMP/blocks/driver.sh" ] || { ct_fail "README blocks" "could not extract them (above)"; ct_summary; exit; }

blog=$CT_TMP/blocks.log
start=$SECONDS
(cd "$work" && bash "$CT_TMP/blocks/driver.sh") > "$blog" 2>&1
rc=$?
total=$(grep -c '^@@block ' "$blog" || true)
marked=$(grep -c '^echo .@@block ' "$CT_TMP/blocks/driver.sh" || true)
while IFS= read -r line; do
    read -r _ num at first <<< "$line"
    what="README.md:$at ($first)"
    if grep -q "^@@skip $num\$" "$blog"; then
        echo "skip $what: no python with torch and transformers (make test-interop makes .venv-interop)"
        ct_pass "$what (skipped)"
    elif grep -q "^@@ok $num " "$blog"; then
        ct_pass "$what ($(grep "^@@ok $num " "$blog" | cut -d' ' -f3) s)"
    else
        # the output from this block's start to the end of the log
        out=$(sed -n "/^@@block $num /,\$p" "$blog" | tail -n 25)
        ct_fail "$what" "exited $rc; last lines: $out"
    fi
done < <(grep '^@@block ' "$blog")
if [ "$total" -lt "$marked" ]; then
    ct_fail "README blocks" "$((marked - total)) of $marked marked blocks did not run (a block before them failed)"
fi
[ "$marked" -ge 8 ] && ct_pass "the README marks $marked blocks ($((SECONDS - start)) s)" ||
    ct_fail "README blocks" "only $marked blocks are marked <!-- readme-test -->"

# ---- what the tour says it leaves ----------------------------------------------------------
[ -d "$work/runs/tour-fsdp/checkpoints/step_00000020" ] && ct_pass "tour: runs/tour-fsdp resumed to step 20" ||
    ct_fail "tour: resume" "no runs/tour-fsdp/checkpoints/step_00000020"
[ -s "$work/runs/tiny-hf/model.safetensors" ] && ct_pass "tour: runs/tiny-hf/model.safetensors" ||
    ct_fail "tour: export" "no runs/tiny-hf/model.safetensors"
grep -q '"loss/mse_logit"' "$work/runs/tour-mse/metrics.jsonl" 2> /dev/null &&
    ct_pass "tour: the example plugin's term is in runs/tour-mse/metrics.jsonl" ||
    ct_fail "tour: plugin" "runs/tour-mse/metrics.jsonl has no loss/mse_logit"
# make found $BUILD up to date (a stale build is rebuilt, slowly, by `make run` and `make install`)
if grep -qE '^  (CC|CXX|NVCC) ' "$log" "$blog"; then
    ct_fail "build up to date" "make rebuilt sources in $build_given ($(grep -hE '^  (CC|CXX|NVCC) ' "$log" "$blog" | head -3 | tr -s ' ' | tr '\n' ';') ...) ---> run make BUILD=$build_given before this test"
else
    ct_pass "make run and make install found $build_given up to date"
fi
ct_summary
