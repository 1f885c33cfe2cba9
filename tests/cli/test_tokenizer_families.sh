#!/usr/bin/env bash
# test_tokenizer_families.sh — ctrain's byte-level BPE against the tokenizers library for seven
# pre-tokenizers (GPT-2's pattern as a Split, Llama-3's, Qwen2's with NFC, a pattern of no
# family that leaves gaps, a literal String split, SmolLM's Digits + ByteLevel, Digits with runs),
# each a tokenizer
# the library builds here from the family's published pre-tokenizer, special tokens and a merge
# table it trains (tests/tokenizer_families.py): the same ids on the hard texts of GPT-2's test
# with and without --specials, and through the tokenizer.json ctrain writes. Part of `make
# test-interop`; skipped, saying why, without $CTRAIN_INTEROP_PYTHON (make test checks the C
# path on the committed fixture instead: test_tokenizer_fixture.sh).
set -u
source "$(dirname "$0")/lib.sh"
ct_need_ctrain
py=${CTRAIN_INTEROP_PYTHON:-}
if [ -z "$py" ] || ! "$py" -c "import tokenizers" 2> /dev/null; then
    echo "skip test_tokenizer_families: set CTRAIN_INTEROP_PYTHON to a python with the tokenizers library (\`make test-interop\` does)"
    ct_summary
    exit 0
fi
if "$py" "$ROOT/tests/tokenizer_families.py" check "$CTRAIN" "$CT_TMP/w" > "$CT_TMP/families.log" 2>&1; then
    ct_pass "GPT-2 (as a Split), Llama-3, Qwen2 (NFC), a gapped and a literal Split, SmolLM's Digits (one digit, runs): ctrain's ids = the tokenizers library's"
else
    ct_fail tokenizer_families "$(grep -E 'MISMATCH|tokenizer_families:' "$CT_TMP/families.log" | head -8)"
fi
grep '^tokenizer_families:' "$CT_TMP/families.log" | sed 's/^/  /'
ct_summary
