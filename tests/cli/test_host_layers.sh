#!/usr/bin/env bash
# host/ is cut into folders by layer (docs/architecture.md, "The host"): a file includes only
# headers of its own folder and of folders below it, no two files include each other (directly
# or round a circle), every include of a host header names its folder, and every file opens with
# a comment saying what it is for. This script checks all four on the tree as it is.
source "$(dirname "$0")/lib.sh"

out=$(python3 - "$ROOT/host" <<'PY'
import os, re, sys
ORDER = ['base', 'io', 'config', 'data', 'weights', 'plugin', 'run', 'whatif', 'check', 'cli']
root = sys.argv[1]
inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
problems, edges = [], {}
folders = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
for d in folders:
    if d not in ORDER: problems.append(f'folder host/{d} is not in the layer order')
loose = [f for f in os.listdir(root) if os.path.isfile(os.path.join(root, f))]
if loose: problems.append('files outside the layer folders: ' + ' '.join(sorted(loose)))
for d in folders:
    for f in sorted(os.listdir(os.path.join(root, d))):
        text = open(os.path.join(root, d, f), encoding='utf-8').read()
        if not (text.startswith('/*') or text.startswith('//')):
            problems.append(f'{d}/{f} does not open with a comment on its purpose')
        unit = d + '/' + f.rsplit('.', 1)[0]
        for name in inc.findall(text):
            if name.startswith('../'): continue          # the threads engine's sources
            if '/' not in name:
                problems.append(f'{d}/{f} includes "{name}" without its folder')
                continue
            to = name.split('/')[0]
            if to not in ORDER: continue
            if ORDER.index(to) > ORDER.index(d):
                problems.append(f'{d}/{f} includes {name}: {to}/ is above {d}/')
            edges.setdefault(unit, set()).add(name.rsplit('.', 1)[0])
state = {}
def visit(u, path):
    state[u] = 1
    for v in sorted(edges.get(u, ())):
        if v == u: continue
        if state.get(v) == 1: problems.append('include circle: ' + ' -> '.join(path[path.index(v):] + [u, v]))
        elif v not in state: visit(v, path + [u])
    state[u] = 2
for u in sorted(edges):
    if u not in state: visit(u, [])
print('\n'.join(problems))
PY
)
if [ -z "$out" ]; then ct_pass host_folders_depend_only_downward_without_circles
else ct_fail host_folders_depend_only_downward_without_circles "$out"; fi

ct_summary
