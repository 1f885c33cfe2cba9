/* commands.h — the subcommands of `ctrain`. Adding one is one line in HOST_COMMANDS below plus
 * its function `int cmd_<name>(int argc, char **argv)` in a file of its own in host/cli/ (argv[0]
 * is the subcommand's name; return the process exit status: 0 ok, 1 failure, 2 usage error).
 * Not for: shared set-up (run/session.h: session_configure) or the commands' logic.
 */
#ifndef CTRAIN_HOST_COMMANDS_H
#define CTRAIN_HOST_COMMANDS_H

/* X(name, usage, summary), in the order `ctrain help` lists them. An '_' in name is a '-' on
 * the command line (check_plugin is `ctrain check-plugin`). */
#define HOST_COMMANDS(X)                                                                      \
    X(plugins,  "",                         "list the plugins found, shadowed ones and problems") \
    X(inspect,  "NAME | KIND/NAME | FILE.so | ctrain", "describe a plugin and its INI keys")            \
    X(validate, "CONFIG.ini [--set s.k=v]... [--unset s.k]...", "check a configuration; print it resolved")   \
    X(train,    "CONFIG.ini [--set s.k=v]... [--unset s.k]... [--resume | --resume-from DIR | --force] [--stop-after N]", "train a model") \
    X(sample,   "RUN_DIR|CHECKPOINT_DIR [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S] [--greedy]", "generate text from a run's newest checkpoint") \
    X(prepare,  "TEXT... [options]",        "make token shards from text")      \
    X(tokenize, "TOKENIZER FILE... [--decode] [--count] [--stats]", "the ids of text files under a tokenizer, or the text of ids") \
    X(plot,     "RUN_DIR... --metric NAME... --out FILE.png [--title T] [--logy] [--force]", "draw metrics of runs against step (gnuplot)") \
    X(compare,  "RUN_DIR... [--csv]",       "a table of the runs' logit-norm figures, losses, tokens/s") \
    X(check_plugin, "FILE.so [--set key=value]... [--timeout SECONDS] | LOSS.so --logits L.npy --targets T.npy [--out G.npy [--force]]", "prove a plugin keeps its kind's contract (finite differences, references)") \
    X(export,   "RUN_DIR|CHECKPOINT_DIR --format safetensors|llmc --out PATH [--target auto|hf-gpt2|hf-llama|ctrain] [--dtype f32|bf16] [--force]", "write a checkpoint's weights for other programs (Hugging Face, llm.c)") \
    X(what_if,  "RUN_DIR|CHECKPOINT_DIR --world-sizes N,... [--algo A,...] [--policies P,...] [--gpus-per-node G] [--per-row FILE [--force]]", "replay the head's gradient reduction at other world sizes, orders and policies") \
    X(reduce,   "--world-size N --in FILE --out FILE [--op all_reduce|reduce_scatter] [--dtype bf16|f32] [--algo A] [--channels K] [--gpus-per-node G] [--avg] [--policy NAME] [--stats] [--force]", "run N rank buffers through NCCL's reduction order as the threads engine does") \
    X(logits,   "CONFIG.ini [--set s.k=v]... [--unset s.k]... --tokens FILE --out FILE [--force]", "debug: the model's logits on int32 tokens, as raw f32 (B,T,V)") \
    X(help,     "[COMMAND]",                "this help")

#define HOST_DECLARE_COMMAND(name, usage, summary) int cmd_##name(int argc, char **argv);
HOST_COMMANDS(HOST_DECLARE_COMMAND)
#undef HOST_DECLARE_COMMAND

/* ctrain's own version (the plugin ABI version is CT_ABI_MAJOR.CT_ABI_MINOR). */
#define CTRAIN_VERSION "0.1.0"

#endif /* CTRAIN_HOST_COMMANDS_H */
