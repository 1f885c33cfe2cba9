#!/usr/bin/env python3
"""fuzz_ini.py — seeded mutations of the INI files in ini/ and tests/bad-input/ (and of --set
overrides) run through `ctrain validate`, a few also through `ctrain train` for one or two steps
of a tiny model. Run by tests/cli/test_fuzz_ini.sh (a few hundred per `make test`) and by
`make fuzz` (FUZZ_N=5000). Not a test of what the messages say, only that ctrain never
crashes, hangs or refuses silently, and that validate and train agree.

Claims checked for every mutation:
  - no signal: exit status >= 128 (or killed) or a sanitizer report is a failure;
  - no hang: each run ends within FUZZ_TIMEOUT seconds (validate) or 4x that (train);
  - a rejection (exit != 0) has a message on stderr that names a file, --set or a [section];
  - an acceptance exits 0 with "is valid" on stderr and the resolved configuration on stdout;
  - train (on the sampled few): refuses exactly what validate refuses, with the same message,
    and writes nothing then; what validate accepts trains (or stops on a non-finite number).
Knobs (environment): BUILD (the build folder, default build), FUZZ_SEED (default 9),
FUZZ_N (mutations, default 300), FUZZ_TRAIN_EVERY (one in this many also trains, default 40),
FUZZ_JOBS (parallel runs, default 2), FUZZ_TIMEOUT (seconds, default 20), FUZZ_ONLY (run only
the case with this index: replays a failure), FUZZ_SAVE (a folder: failing inputs are copied
there), FUZZ_VERBOSE=1 (print every case).
Output: "ok NAME" / "FAIL NAME: ..." per claim, then "N passed, N failed" (tests/run.sh).
"""
import concurrent.futures
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("BUILD", "build")
if not os.path.isabs(BUILD):
    BUILD = os.path.join(ROOT, BUILD)
CTRAIN = os.path.join(BUILD, "ctrain")
SEED = int(os.environ.get("FUZZ_SEED", "9"))
N = int(os.environ.get("FUZZ_N", "300"))
TRAIN_EVERY = max(1, int(os.environ.get("FUZZ_TRAIN_EVERY", "40")))
JOBS = max(1, int(os.environ.get("FUZZ_JOBS", "2")))
TIMEOUT = float(os.environ.get("FUZZ_TIMEOUT", "20"))
ONLY = os.environ.get("FUZZ_ONLY")
SAVE = os.environ.get("FUZZ_SAVE")
VERBOSE = os.environ.get("FUZZ_VERBOSE") == "1"

SANITIZER_SIGNS = ("AddressSanitizer", "LeakSanitizer", "UndefinedBehaviorSanitizer",
                   "runtime error:", "ThreadSanitizer")

ODD_VALUES = [
    "1e999", "-1e999", "nan", "NaN", "-nan", "inf", "-inf", "Infinity", "-0", "0x10", "0X1p4",
    "1e1", "0.2e1", "99999999999999999999", "-9223372036854775808", "9223372036854775807",
    "18446744073709551616", "1e308", "4.9e-324", "1e-999", "", " ", "0", "-1", "1.", ".5", "+3",
    "0b101", "1_000", "1,5", "٣", "∞", "１２", "true", "yes", "off", "maybe", "\u202e1",
    "a" * 600, "9" * 300, "1e6", "65536", "65537", "1048577", "2147483648", "4294967296",
    "-2147483649", "0.0000001", "1e-320", "cpu", "cuda", "auto", "threads", "mpi", "ce,ce",
    "ce,", ",", "zloss, logitreg", "ce,zloss,logitreg,ce", "/dev/null", "/", ".", "..",
    "/nonexistent/x.bin", "data/*", "[", "]", "=", ";", "#", "%s%n", "${HOME}", "$(id)", "`id`",
]
UNICODE = ["é", "日本", "\u202e", "\ufeff", "\u0000", "\U0001F600", "\u00a0", "\u2028", "Ω",
           "\ud7ff", "𝟙"]
RAW_BYTES = [b"\xff", b"\xfe", b"\xc0\x80", b"\xed\xa0\x80", b"\x80", b"\x00", b"\x1b[31m",
             b"\r", b"\t", b"\x0b", b"\x0c"]
SECTIONS = ["run", "data", "model", "loss", "loss.ce", "loss.zloss", "loss.logitreg", "strategy",
            "precision", "comm", "device", "optim", "loss.", ".", "", "loss.ce.x", " model ",
            "MODEL", "run]", "[run"]


def seeds():
    files = []
    for d in ("ini", "ini/presets", "ini/experiments/logit-growth", "tests/bad-input"):
        p = os.path.join(ROOT, d)
        if os.path.isdir(p):
            files += sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".ini"))
    return files


def keys_of(text):
    """(section, key) pairs of an INI text, roughly (for targeted mutations)."""
    out, sec = [], None
    for line in text.decode("utf-8", "replace").splitlines():
        s = line.strip()
        if s.startswith("[") and "]" in s:
            sec = s[1:s.index("]")].strip()
        elif sec and "=" in s and not s.startswith((";", "#")):
            out.append((sec, s.split("=", 1)[0].strip()))
    return out


def mutate(rng, data):
    """One mutation of the bytes `data`; returns (new bytes, a description)."""
    lines = data.split(b"\n")
    op = rng.randrange(17)
    if op == 0 and data:  # byte flip
        i = rng.randrange(len(data))
        b = rng.randrange(256)
        return data[:i] + bytes([b]) + data[i + 1:], f"byte {i} := {b:#04x}"
    if op == 1 and data:  # delete a span
        i = rng.randrange(len(data))
        n = rng.choice([1, 1, 2, 5, 40])
        return data[:i] + data[i + n:], f"delete {n} bytes at {i}"
    if op == 2 and lines:  # duplicate a line
        i = rng.randrange(len(lines))
        return b"\n".join(lines[:i + 1] + [lines[i]] + lines[i + 1:]), f"duplicate line {i + 1}"
    if op == 3 and lines:  # delete a line
        i = rng.randrange(len(lines))
        return b"\n".join(lines[:i] + lines[i + 1:]), f"delete line {i + 1}"
    if op == 4:  # a long line: key, value or section name
        n = rng.choice([198, 199, 200, 201, 255, 1000, 5000, 70000])
        kind = rng.randrange(3)
        line = (b"k" * n + b" = 1") if kind == 0 else (b"[" + b"s" * n + b"]") if kind == 1 \
            else (b"name = " + b"v" * n)
        i = rng.randrange(len(lines) + 1)
        return b"\n".join(lines[:i] + [line] + lines[i:]), f"long line ({n}) at {i + 1}"
    if op in (5, 6, 7):  # an odd value for a present key
        ks = keys_of(data)
        v = rng.choice(ODD_VALUES)
        if ks:
            sec, key = rng.choice(ks)
            pat = re.compile(rb"^(\s*" + re.escape(key.encode()) + rb"\s*[=:]).*$", re.M)
            new, n = pat.subn(lambda m: m.group(1) + b" " + v.encode("utf-8", "surrogatepass"),
                              data, count=1)
            if n:
                return new, f"[{sec}] {key} = {v!r}"
        return data + b"\n[optim]\nlr = " + v.encode("utf-8", "surrogatepass") + b"\n", \
            f"appended lr = {v!r}"
    if op == 8:  # unicode inserted
        i = rng.randrange(len(data) + 1)
        u = rng.choice(UNICODE).encode("utf-8", "surrogatepass")
        return data[:i] + u + data[i:], f"insert {u!r} at {i}"
    if op == 9:  # raw bytes (invalid UTF-8, control characters)
        i = rng.randrange(len(data) + 1)
        b = rng.choice(RAW_BYTES)
        return data[:i] + b + data[i:], f"insert {b!r} at {i}"
    if op == 10:  # empty a value
        new, n = re.subn(rb"=[^\n;#]*", b"=", data, count=rng.randrange(1, 4))
        return new, f"empty {n} value(s)"
    if op == 11:  # missing or extra brackets
        heads = [i for i, l in enumerate(lines) if l.strip().startswith(b"[")]
        if heads:
            i = rng.choice(heads)
            c = rng.randrange(4)
            l = lines[i]
            l = l.replace(b"]", b"", 1) if c == 0 else l.replace(b"[", b"", 1) if c == 1 \
                else l + b"]" if c == 2 else b"[" + l
            return b"\n".join(lines[:i] + [l] + lines[i + 1:]), f"bracket change {c} line {i + 1}"
    if op == 12:  # a section of any name, with a key
        s = rng.choice(SECTIONS)
        k = rng.choice(["plugin", "type", "plugins", "coef", "lr", "x", "", "world_size"])
        v = rng.choice(ODD_VALUES)
        add = f"\n[{s}]\n{k} = {v}\n".encode("utf-8", "surrogatepass")
        return data + add, f"append [{s}] {k} = {v!r}"
    if op == 13:  # separators and line ends
        c = rng.randrange(4)
        if c == 0:
            return data.replace(b"=", b":", 1), "first '=' -> ':'"
        if c == 1:
            return data.replace(b"\n", b"\r\n"), "CRLF line ends"
        if c == 2:
            return data.rstrip(b"\n"), "no final newline"
        return data.replace(b" = ", b" == ", 1), "first ' = ' -> ' == '"
    if op == 14:  # many keys or sections
        n = rng.choice([100, 1000, 5000])
        body = b"".join(b"k%d = %d\n" % (j, j) for j in range(n))
        return data + b"\n[many]\n" + body, f"append [many] with {n} keys"
    if op == 15:  # indentation, comments
        i = rng.randrange(len(lines)) if lines else 0
        c = rng.choice([b"    ", b"\t", b"; ", b"# ", b"=", b";[", b"\\"])
        return b"\n".join(lines[:i] + [c + (lines[i] if lines else b"")] + lines[i + 1:]), \
            f"prefix line {i + 1} with {c!r}"
    # op 16 or a fallback: truncate
    i = rng.randrange(len(data) + 1)
    return data[:i], f"truncate at {i}"


def odd_override(rng, data):
    """A --set argument with an odd value or form (no NUL: argv cannot hold one)."""
    ks = keys_of(data) or [("optim", "lr")]
    sec, key = rng.choice(ks)
    v = rng.choice(ODD_VALUES).replace("\u0000", "")
    form = rng.randrange(8)
    if form == 0:
        return rng.choice(["a", "=", "..=", ".x=1", "a.=1", "a.b", "=1", "a..b=1", " . = ",
                           "loss.ce.coef", "x" * 300 + ".y=1", "optim.lr" + "=" * 5])
    if form == 1:
        return f"{rng.choice(SECTIONS)}.{key}={v}"
    return f"{sec}.{key}={v}"


def make_shard(path, n, vocab):
    toks = [(i * 7919) % vocab for i in range(n)]
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
        f.write(struct.pack("<%dH" % n, *toks))


def run(cmd, timeout, cwd):
    try:
        p = subprocess.run(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=timeout)
        return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8",
                                                                                   "replace")
    except subprocess.TimeoutExpired as e:
        return None, "", (e.stderr or b"").decode("utf-8", "replace")


def crashed(rc, err):
    if rc is None:
        return "hung (timeout)"
    if rc < 0 or rc >= 128:
        return f"exit status {rc} (signal)"
    for s in SANITIZER_SIGNS:
        if s in err:
            return f"sanitizer report ({s})"
    return None


def explained(err, path, args):
    """A rejection's stderr names a file, --set or a [section]."""
    e = err.strip()
    if not e:
        return False
    return (os.path.basename(path) in e or "--set" in e or re.search(r"\[[^\]\n]*\]", e)
            is not None or "token shard" in e or ".bin" in e or ".so" in e)


def one_case(i, files, work):
    """Mutate, run, judge case i. Returns (problems, accepted, trained, description)."""
    rng = random.Random(f"{SEED}:{i}")
    # the valid files (ini/, ok_minimal) three times as often as the bad-input cases
    weights = [1 if "bad-input" in f and "ok_" not in f else 3 for f in files]
    src = rng.choices(files, weights)[0]
    with open(src, "rb") as f:
        data = f.read()
    desc = [os.path.relpath(src, ROOT)]
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        data, d = mutate(rng, data)
        desc.append(d)
    case = os.path.join(work, f"case{i}")
    os.makedirs(case)
    path = os.path.join(case, "fuzz.ini")
    with open(path, "wb") as f:
        f.write(data)
    shard = os.path.join(work, "tok.bin")
    args = []
    if rng.random() < 0.7:  # usually with data that exists, so some inputs are accepted
        args += ["--set", f"data.train={shard}", "--set", "data.val="]
    if rng.random() < 0.3:
        o = odd_override(rng, data).replace("\x00", "")
        args += ["--set", o] if rng.random() < 0.8 else [f"--set={o}"]
        desc.append(f"--set {o!r}")
    train = i % TRAIN_EVERY == TRAIN_EVERY - 1
    problems = []
    rc, out, err = run([CTRAIN, "validate", path] + args, TIMEOUT, case)
    c = crashed(rc, err)
    if c:
        problems.append(f"validate {c}: {err[-800:]}")
    elif rc != 0 and not explained(err, path, args):
        problems.append(f"validate refused without naming a file or key: {err[-400:]!r}")
    elif rc == 0 and ("is valid" not in err or not out.strip()):
        problems.append(f"validate exited 0 without 'is valid'/the resolved configuration: {err!r}")
    trained = False
    if train and not c:
        trained = True
        run_dir = os.path.join(case, "run")
        tiny = ["--set", f"run.out_dir={run_dir}", "--set", f"run.steps={rng.choice([1, 2])}",
                "--set", "run.log_every=1", "--set", "run.eval_every=0", "--set",
                "model.n_layer=1", "--set", "model.d_model=32", "--set", "model.n_head=2",
                "--set", "model.seq_len=16", "--set", "model.vocab_size=256", "--set",
                "data.seq_len=16", "--set", "data.batch_size=2", "--set", "data.grad_accum=1",
                "--set", f"data.train={shard}", "--set", "data.val=", "--set",
                "comm.world_size=1"]
        targs = args + tiny
        vrc, vout, verr = run([CTRAIN, "validate", path] + targs, TIMEOUT, case)
        trc, tout, terr = run([CTRAIN, "train", path] + targs, 4 * TIMEOUT, case)
        for who, r, e in (("validate (train's overrides)", vrc, verr), ("train", trc, terr)):
            cc = crashed(r, e)
            if cc:
                problems.append(f"{who} {cc}: {e[-800:]}")
        if not problems:
            vmsg = verr.strip().removeprefix("ctrain: error: ")
            tmsg = terr.strip().removeprefix("ctrain train: ")
            if vrc != 0 and trc == 0:
                problems.append(f"validate refused but train ran: {vmsg}")
            elif vrc != 0 and vmsg != tmsg:
                problems.append(f"messages differ:\n  validate: {vmsg}\n  train:    {tmsg}")
            elif vrc != 0 and os.path.exists(run_dir):
                problems.append(f"train refused but created {run_dir}")
            elif vrc == 0 and trc != 0 and not re.search(r"nan|inf|non-finite|gradient norm",
                                                         terr, re.I):
                problems.append(f"validate accepted but train failed: {terr[-600:]}")
            elif trc != 0 and not terr.strip():
                problems.append("train failed without a message")
    if problems and SAVE:
        os.makedirs(SAVE, exist_ok=True)
        shutil.copy(path, os.path.join(SAVE, f"fuzz_{SEED}_{i}.ini"))
    if not problems:
        shutil.rmtree(case, ignore_errors=True)
    return problems, rc == 0, trained, " | ".join(desc), args, err.strip()[:300]


def main():
    if not os.access(CTRAIN, os.X_OK):
        print(f"FAIL fuzz_setup: {CTRAIN} not built")
        print("0 passed, 1 failed")
        return 1
    files = seeds()
    work = tempfile.mkdtemp(prefix="ctrain-fuzz-")
    try:
        make_shard(os.path.join(work, "tok.bin"), 65536, 256)
        idx = [int(ONLY)] if ONLY is not None else list(range(N))
        print(f"fuzz: seed {SEED}, {len(idx)} mutations of {len(files)} files, {CTRAIN}")
        results = {}
        with concurrent.futures.ThreadPoolExecutor(JOBS) as ex:
            futs = {ex.submit(one_case, i, files, work): i for i in idx}
            for fut in concurrent.futures.as_completed(futs):
                results[futs[fut]] = fut.result()
        accepted = sum(1 for r in results.values() if r[1])
        trained = sum(1 for r in results.values() if r[2])
        failures = [(i, r) for i, r in sorted(results.items()) if r[0]]
        for i, (probs, _, _, desc, args, _) in failures:
            print(f"FAIL fuzz case {i}: {desc}")
            for p in probs:
                print("    " + p.replace("\n", "\n    "))
            print(f"    replay: FUZZ_SEED={SEED} FUZZ_ONLY={i} BUILD={BUILD} python3 "
                  f"tests/cli/fuzz_ini.py   (args {args})")
        print(f"fuzz: {len(results)} mutations, {accepted} accepted, {len(results) - accepted} "
              f"rejected, {trained} also trained, {len(failures)} failing")
        if VERBOSE:
            for i, (probs, acc, tr, desc, args, msg) in sorted(results.items()):
                print(f"  {i}: {'accepted' if acc else 'rejected'}{' +train' if tr else ''}: "
                      f"{desc} {args}\n      {msg}")
        if failures:
            print(f"FAIL fuzz_ini: {len(failures)} of {len(results)} mutations failed "
                  f"(seed {SEED})")
            print("0 passed, 1 failed")
            return 1
        print(f"ok fuzz_ini: seed {SEED}, {len(results)} mutations")
        print("1 passed, 0 failed")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
