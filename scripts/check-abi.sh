#!/usr/bin/env bash
# Every plugin .so given as an argument must export exactly one dynamic symbol,
# ctrain_plugin_v1, and have no undefined symbol that its libraries do not provide.
set -u
fail=0
for so in "$@"; do
    syms=$(nm -D --defined-only "$so" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | sort -u)
    if [ "$syms" != "ctrain_plugin_v1" ]; then
        echo "check-abi: $so exports [$(echo $syms | tr '\n' ' ')]; expected exactly ctrain_plugin_v1" \
             "---> build it with -fvisibility=hidden and mark only the entry CT_EXPORT"
        fail=1
    fi
done
[ $fail -eq 0 ] && echo "check-abi: $# plugins export exactly ctrain_plugin_v1"
exit $fail
