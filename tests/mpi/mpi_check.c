/* mpi_check.c — run under mpirun by tests/cli/test_mpi.sh: loads comm_mpi.so with dlopen (this
 * program links neither MPI nor the host) and checks its collectives against values computed
 * here. Prints "ok NAME (rank R)" or "FAIL NAME (rank R): why" per check, then "end rank R".
 * Usage: mpi_check basic|abort PLUGIN.so
 *   basic  sums (f32, f64, bf16 and f16 rounding every combine), copies, requests; needs -np 2
 *          or 3
 *   abort  rank 1 aborts while rank 0 waits in an all_reduce: rank 0 must get an error that
 *          names rank 1 and the reason, within seconds
 * Not for: the threads engine (tests/unit/test_comm_threads.c).
 */
#include <ctrain/ctrain.h>
#include <ctrain/numerics.h>

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int g_rank;
static int g_failed;

#define CHECK(name, cond, ...)                                                          \
    do {                                                                                \
        if (cond) {                                                                     \
            printf("ok %s (rank %d)\n", name, g_rank);                                  \
        } else {                                                                        \
            g_failed++;                                                                 \
            printf("FAIL %s (rank %d): ", name, g_rank);                                \
            printf(__VA_ARGS__);                                                        \
            printf("\n");                                                               \
        }                                                                               \
        fflush(stdout);                                                                 \
    } while (0)

/* --- a minimal host: only get_float of [comm] timeout_s is asked for ----------------- */

static int32_t fake_get_float(ct_host *h, const char *section, const char *key, double *out,
                              ct_error *err) {
    (void)h;
    if (strcmp(section, "comm") == 0 && strcmp(key, "timeout_s") == 0) {
        *out = 30;
        return CT_OK;
    }
    return ct_error_set(err, CT_ERR_INVALID, "no key %s.%s in this test", section, key);
}

static const ct_host_api fake_api = {.struct_size = sizeof(ct_host_api),
                                     .get_float = fake_get_float};

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static float bf(uint16_t h) { return ct_bf16_to_f32(h); }
static uint16_t to_bf(float x) { return ct_bf16_from_f32(x); }

/* --- basic: every collective once ---------------------------------------------------- */

static void run_basic(const ct_comm_vtable *vt, void *c, int r, int n) {
    ct_error err = {.struct_size = sizeof err};
    enum { COUNT = 10 };

    /* f32 sum: rank q contributes (q+1)*(i+0.5); exact in f32 */
    float s[COUNT], d[COUNT];
    for (int i = 0; i < COUNT; i++) s[i] = (float)((r + 1) * (i + 0.5));
    int32_t rc = vt->all_reduce(c, s, d, COUNT, CT_DTYPE_F32, CT_REDUCE_SUM, NULL, &err);
    int bad = rc != CT_OK;
    for (int i = 0; i < COUNT; i++) bad |= d[i] != (float)((i + 0.5) * n * (n + 1) / 2);
    CHECK("all_reduce_f32_sum", !bad, "rc %d (%s), d[1] = %g", rc, err.message, d[1]);

    rc = vt->all_reduce(c, s, s, COUNT, CT_DTYPE_F32, CT_REDUCE_SUM, NULL, &err); /* in place */
    bad = rc != CT_OK;
    for (int i = 0; i < COUNT; i++) bad |= s[i] != (float)((i + 0.5) * n * (n + 1) / 2);
    CHECK("all_reduce_f32_sum_in_place", !bad, "rc %d (%s), s[1] = %g", rc, err.message, s[1]);

    /* bf16 sum rounding every combine. n = 2: one combine: 1 + 2^-8 is a tie -> 1 (even),
     * while the f32 sum is 1.00390625. n = 3: 4.75 + 0.00836181640625 + 5.40625 gives 10.125
     * in every combine order when each combine rounds, 10.1875 when only the total is rounded,
     * 10.1646118 in f32. */
    uint16_t bs[2], bd[2];
    float expect0, expect1;
    if (n == 2) {
        bs[0] = to_bf(r == 0 ? 1.0f : 0.00390625f);
        bs[1] = to_bf(r == 0 ? 1.0078125f : 0.00390625f); /* tie -> 1.015625 (even) */
        expect0 = 1.0f;
        expect1 = 1.015625f;
    } else {
        static const float v[3] = {4.75f, 0.00836181640625f, 5.40625f};
        bs[0] = bs[1] = to_bf(v[r % 3]);
        expect0 = expect1 = 10.125f;
    }
    rc = vt->all_reduce(c, bs, bd, 2, CT_DTYPE_BF16, CT_REDUCE_SUM, NULL, &err);
    CHECK("all_reduce_bf16_rounds_every_combine",
          rc == CT_OK && bf(bd[0]) == expect0 && bf(bd[1]) == expect1 && n <= 3,
          "rc %d (%s): got %.9g, %.9g; expected %.9g, %.9g (np must be 2 or 3)", rc,
          err.message, bf(bd[0]), bf(bd[1]), expect0, expect1);

    /* f16 (ABI 1.7): every combine rounds to f16. np 2: 1 + 2^-11 is a tie between 1 and
     * 1 + 2^-10 and goes to the even 1 (f32: 1.00048828125); np 3: 1 + 2 + 4 = 7 in any order.
     * The second element overflows f16 (past 65504) in every order: Inf. */
    uint16_t hs[2], hd[2];
    float h_expect0 = n == 2 ? 1.0f : 7.0f;
    hs[0] = ct_f16_from_f32(n == 2 ? (r == 0 ? 1.0f : 0.00048828125f) : (float)(1 << (r % 3)));
    hs[1] = ct_f16_from_f32(n == 2 ? (r == 0 ? 65504.0f : 32.0f) : 30000.0f);
    rc = vt->all_reduce(c, hs, hd, 2, CT_DTYPE_F16, CT_REDUCE_SUM, NULL, &err);
    CHECK("all_reduce_f16_rounds_every_combine",
          rc == CT_OK && ct_f16_to_f32(hd[0]) == h_expect0 && hd[1] == 0x7c00,
          "rc %d (%s): got %.9g, 0x%04x; expected %.9g, 0x7c00 (Inf)", rc, err.message,
          ct_f16_to_f32(hd[0]), hd[1], h_expect0);

    /* reduce_scatter: block q of every rank's send = q*100 + rank, so rank q gets
     * n*q*100 + n(n-1)/2 */
    float rs[8 * 2], rd[2];
    for (int q = 0; q < n; q++) rs[2 * q] = rs[2 * q + 1] = (float)(q * 100 + r);
    rc = vt->reduce_scatter(c, rs, rd, 2, CT_DTYPE_F32, CT_REDUCE_SUM, NULL, &err);
    float want = (float)(n * r * 100 + n * (n - 1) / 2);
    CHECK("reduce_scatter_f32", rc == CT_OK && rd[0] == want && rd[1] == want,
          "rc %d (%s): got %g, expected %g", rc, err.message, rd[0], want);

    uint16_t bss[8], bsd[1];
    for (int q = 0; q < n; q++) bss[q] = bs[0];
    rc = vt->reduce_scatter(c, bss, bsd, 1, CT_DTYPE_BF16, CT_REDUCE_SUM, NULL, &err);
    CHECK("reduce_scatter_bf16_rounds_every_combine", rc == CT_OK && bf(bsd[0]) == expect0,
          "rc %d (%s): got %.9g, expected %.9g", rc, err.message, bf(bsd[0]), expect0);

    /* all_gather: exact bits, NaN payload included; then in place (send inside recv) */
    uint16_t gs[3] = {(uint16_t)(0x7fc1 + r), (uint16_t)(0x1234 + r), (uint16_t)(0x8001 + r)};
    uint16_t gd[8 * 3];
    ct_request *req = NULL;
    rc = vt->all_gather(c, gs, gd, 3, CT_DTYPE_BF16, &req, &err);
    if (rc == CT_OK) rc = vt->wait(c, req, &err);
    bad = rc != CT_OK;
    for (int q = 0; q < n; q++)
        bad |= gd[3 * q] != 0x7fc1 + q || gd[3 * q + 1] != 0x1234 + q || gd[3 * q + 2] != 0x8001 + q;
    CHECK("all_gather_bf16_exact_async", !bad, "rc %d (%s)", rc, err.message);

    int32_t ig[8];
    ig[r] = 1000 + r;
    rc = vt->all_gather(c, &ig[r], ig, 1, CT_DTYPE_I32, NULL, &err);
    bad = rc != CT_OK;
    for (int q = 0; q < n; q++) bad |= ig[q] != 1000 + q;
    CHECK("all_gather_i32_in_place", !bad, "rc %d (%s)", rc, err.message);

    /* all_to_all: block j of rank i -> block i of rank j */
    int32_t as[8], ad[8];
    for (int j = 0; j < n; j++) as[j] = 10 * r + j;
    rc = vt->all_to_all(c, as, ad, 1, CT_DTYPE_I32, NULL, &err);
    bad = rc != CT_OK;
    for (int i = 0; i < n; i++) bad |= ad[i] != 10 * i + r;
    CHECK("all_to_all_i32", !bad, "rc %d (%s)", rc, err.message);

    /* f64 sum and i32 max, async */
    double ds = 0.1 * (r + 1), dd = 0;
    int32_t im = 7 * r - 3, imax = 0;
    ct_request *r1 = NULL, *r2 = NULL;
    rc = vt->all_reduce(c, &ds, &dd, 1, CT_DTYPE_F64, CT_REDUCE_SUM, &r1, &err);
    if (rc == CT_OK) rc = vt->all_reduce(c, &im, &imax, 1, CT_DTYPE_I32, CT_REDUCE_MAX, &r2, &err);
    if (rc == CT_OK) rc = vt->wait(c, r1, &err);
    if (rc == CT_OK) rc = vt->wait(c, r2, &err);
    double dwant = 0;
    for (int q = 0; q < n; q++) dwant += 0.1 * (q + 1);
    CHECK("all_reduce_f64_sum_i32_max_async",
          rc == CT_OK && dd > dwant - 1e-15 && dd < dwant + 1e-15 && imax == 7 * (n - 1) - 3,
          "rc %d (%s): %.17g vs %.17g, max %d", rc, err.message, dd, dwant, imax);

    /* broadcast from the last rank, ring send/recv, barrier */
    float b[2] = {(float)r, (float)-r};
    rc = vt->broadcast(c, b, 2, CT_DTYPE_F32, n - 1, &err);
    CHECK("broadcast_f32", rc == CT_OK && b[0] == n - 1 && b[1] == -(n - 1), "rc %d (%s)", rc,
          err.message);

    int32_t out = 500 + r, in = -1;
    if (r % 2 == 0) { /* even ranks send first, odd receive first: no deadlock for any n */
        rc = vt->send(c, &out, 1, CT_DTYPE_I32, (r + 1) % n, 5, &err);
        if (rc == CT_OK) rc = vt->recv(c, &in, 1, CT_DTYPE_I32, (r + n - 1) % n, 5, &err);
    } else {
        rc = vt->recv(c, &in, 1, CT_DTYPE_I32, (r + n - 1) % n, 5, &err);
        if (rc == CT_OK) rc = vt->send(c, &out, 1, CT_DTYPE_I32, (r + 1) % n, 5, &err);
    }
    CHECK("send_recv_ring", rc == CT_OK && in == 500 + (r + n - 1) % n, "rc %d (%s), in %d", rc,
          err.message, in);
    rc = vt->barrier(c, &err);
    CHECK("barrier", rc == CT_OK, "rc %d (%s)", rc, err.message);
}

/* --- abort: rank 1 fails while rank 0 waits ------------------------------------------ */

static void run_abort(const ct_comm_vtable *vt, void *c, int r) {
    ct_error err = {.struct_size = sizeof err};
    if (r == 1) {
        usleep(300 * 1000); /* rank 0 is inside its all_reduce by now */
        vt->abort(c, "injected failure in stage block.2");
        int32_t rc = vt->barrier(c, &err);
        CHECK("abort_then_own_calls_fail", rc == CT_ERR_COMM && strstr(err.message, "this rank"),
              "rc %d (%s)", rc, err.message);
        sleep(1); /* as a host would while logging: mpirun ends the job once we exit */
        return;
    }
    if (r != 0) return; /* other ranks: not part of this check */
    float x = 1, y = 0;
    double t0 = now_s();
    int32_t rc = vt->all_reduce(c, &x, &y, 1, CT_DTYPE_F32, CT_REDUCE_SUM, NULL, &err);
    double dt = now_s() - t0;
    CHECK("peer_abort_ends_pending_all_reduce",
          rc == CT_ERR_COMM && strstr(err.message, "rank 1 failed") &&
              strstr(err.message, "injected failure in stage block.2") && dt < 10,
          "rc %d after %.2f s: %s", rc, dt, err.message);
}

int main(int argc, char **argv) {
    if (argc != 3 || (strcmp(argv[1], "basic") && strcmp(argv[1], "abort"))) {
        fprintf(stderr, "usage: mpi_check basic|abort PLUGIN.so\n");
        return 2;
    }
    void *dl = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        printf("FAIL load (rank ?): %s\n", dlerror());
        return 1;
    }
    ct_plugin_entry_fn entry = (ct_plugin_entry_fn)dlsym(dl, CT_ENTRY_SYMBOL);
    const ct_plugin_desc *desc = entry ? entry() : NULL;
    if (!desc || desc->kind != CT_KIND_COMM || strcmp(desc->name, "mpi") != 0) {
        printf("FAIL descriptor (rank ?): not a comm plugin named mpi\n");
        return 1;
    }
    const ct_comm_vtable *vt = desc->vtable;
    ct_create_args args = {.struct_size = sizeof args, .api = &fake_api, .section = "comm",
                           .world_size = 1};
    ct_error err = {.struct_size = sizeof err};
    void *c = vt->create(&args, &err);
    if (!c) {
        printf("FAIL create (rank ?): %s\n", err.message);
        return 1;
    }
    g_rank = vt->rank(c);
    int n = vt->world_size(c);
    if (strcmp(argv[1], "basic") == 0) run_basic(vt, c, g_rank, n);
    else run_abort(vt, c, g_rank);
    printf("end rank %d\n", g_rank);
    fflush(stdout);
    vt->destroy(c);
    return g_failed ? 1 : 0;
}
