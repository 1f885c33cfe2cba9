/* logits.c — `ctrain logits CONFIG.ini [--set ...] --tokens FILE --out FILE [--force]` (debug): one forward
 * pass of a configured model (e.g. with [model] init_from = an export) on the int32 tokens of
 * FILE, its logits written as raw little-endian f32, for tests that compare ctrain's numbers
 * with another program's. Not for: exporting weights (export.c).
 */
#include "base/cmdout.h"
#include "base/printable.h"
#include "cli/commands.h"
#include "io/files.h"
#include "io/outfile.h"
#include "run/rank.h"
#include "run/session.h"
#include "run/step.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int cmd_logits(int argc, char **argv) {
    ct_error err = {.struct_size = sizeof err};
    host_config *cfg = NULL;
    host_registry *reg = NULL;
    host_wiring w;
    int n_rest = 0, status = 2;
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    const char *tokens_path = NULL, *out = NULL;
    uint32_t out_flags = OUTFILE_USER; /* --force adds OUTFILE_FORCE */
    int32_t *tokens = NULL;
    float *logits = NULL;
    if (!rest || session_configure(argc, argv, &n_rest, rest, &cfg, &reg, &w, &err) != CT_OK) {
        print_message_line(stderr, "ctrain logits: ", rest ? err.message : "out of memory");
        free(rest);
        return 2;
    }
    for (int i = 0; i < n_rest; i++) {
        if (!strcmp(rest[i], "--tokens") && i + 1 < n_rest) tokens_path = rest[++i];
        else if (!strcmp(rest[i], "--out") && i + 1 < n_rest) out = rest[++i];
        else if (!strcmp(rest[i], "--force")) out_flags |= OUTFILE_FORCE;
        else {
            fprintf(stderr, "ctrain logits: unexpected argument '%s' ---> see `ctrain help`\n",
                    rest[i]);
            goto out_session;
        }
    }
    if (!tokens_path || !out) {
        fprintf(stderr, "ctrain logits: --tokens FILE and --out FILE are needed\n");
        goto out_session;
    }
    if (outfile_check(out, out_flags, &err) != CT_OK) {
        print_message_line(stderr, "ctrain logits: ", err.message);
        goto out_session;
    }
    status = 1;
    int64_t T = 0, world = 1;
    config_get_int(cfg, "data", "seq_len", &T, NULL);
    config_get_int(cfg, "comm", "world_size", &world, NULL);
    if (world != 1) {
        fprintf(stderr, "ctrain logits: runs one rank ---> --set comm.world_size=1\n");
        goto out_session;
    }
    int fd = -1;
    struct stat st;
    if (open_regular(tokens_path, "token file", "give a file of int32 tokens", &fd, &st, &err) != CT_OK) {
        print_message_line(stderr, "ctrain logits: ", err.message);
        goto out_session;
    }
    int64_t n = (int64_t)st.st_size / 4;
    if (n == 0 || st.st_size % (4 * T) != 0) {
        close(fd);
        fprintf(stderr, "ctrain logits: %s holds %lld bytes; it must hold B x [data] seq_len "
                "(%lld) int32 tokens, B >= 1\n", tokens_path, (long long)st.st_size, (long long)T);
        goto out_session;
    }
    tokens = malloc((size_t)st.st_size);
    ssize_t got = tokens ? pread(fd, tokens, (size_t)st.st_size, 0) : -1;
    close(fd);
    if (got != st.st_size) {
        fprintf(stderr, "ctrain logits: cannot read %s\n", tokens_path);
        goto out_session;
    }
    char b_text[32];
    snprintf(b_text, sizeof b_text, "%lld", (long long)(n / T));
    if (config_set(cfg, "data", "batch_size", b_text, "--tokens", &err) != CT_OK ||
        config_set(cfg, "data", "grad_accum", "1", "--tokens", &err) != CT_OK) {
        print_message_line(stderr, "ctrain logits: ", err.message);
        goto out_session;
    }
    const ct_comm_vtable *cv = w.comm->vtable;
    void *world_obj = NULL;
    ct_host wh;
    if (cv->world_create) {
        hostapi_init(&wh, cfg, 0, w.comm->desc.name, NULL);
        ct_create_args a = {.struct_size = sizeof a, .api = hostapi_table(), .host = &wh,
                            .section = "comm", .rank = 0, .world_size = 1};
        if (!(world_obj = cv->world_create(1, &a, &err))) {
            print_message_line(stderr, "ctrain logits: ", err.message);
            goto out_session;
        }
    }
    host_rank r;
    int32_t rc = rank_open(&r, cfg, &w, 0, 1, world_obj, &err);
    if (rc == CT_OK) {
        rc = step_logits(&r, tokens, &err);
        uint64_t bytes = (uint64_t)r.N * (uint64_t)r.V * sizeof(float);
        if (rc == CT_OK && !(logits = malloc(bytes)))
            rc = ct_error_set(&err, CT_ERR_NOMEM, "out of memory");
        if (rc == CT_OK)
            rc = r.dev.vt->copy(r.dev.self, logits, r.logits, bytes, CT_COPY_D2H, &err);
        outfile o;
        if (rc == CT_OK && (rc = outfile_open_as(&o, out, out_flags, &err)) == CT_OK) {
            outfile_write(&o, logits, bytes);
            rc = outfile_commit(&o, &err);
        }
        rank_close(&r);
    }
    if (world_obj) cv->world_destroy(world_obj);
    if (rc != CT_OK) print_message_line(stderr, "ctrain logits: ", err.message);
    else status = 0;
out_session:
    free(tokens);
    free(logits);
    registry_close(reg);
    config_free(cfg);
    free(rest);
    return status;
}
