/* test_comm_local.c — claims about the `local` comm plugin (build/plugins/comm_local.so):
 * rank 0 of a world of one, every collective delivers send into recv unchanged (the sum over
 * one rank), async requests complete in wait(), point-to-point to itself is an error.
 * Not for: multi-rank engines (test_comm_threads.c).
 */
#include "ct_test.h"
#include "harness.h"

#include <ctrain/numerics.h>

#include <string.h>

CT_TEST(comm_local_is_rank_0_of_1_and_every_collective_is_a_copy) {
    ct_harness *h = harness_new("[comm]\n");
    if (!h) return;
    ct_harness_plugin p;
    ct_error err = {.struct_size = sizeof err};
    if (harness_create(h, "comm_local.so", "comm", &p, &err) != CT_OK) {
        CT_CHECK_MSG(0, "create comm_local: %s", err.message);
        harness_free(h);
        return;
    }
    const ct_comm_vtable *vt = p.vt;
    CT_CHECK(vt->world_create == NULL); /* the world is outside any in-process engine */
    CT_CHECK_INT(vt->rank(p.self), 0);
    CT_CHECK_INT(vt->world_size(p.self), 1);
    enum { n = 1000 };
    float send[n], recv[n];
    uint16_t sb[n], rb[n];
    for (int i = 0; i < n; i++) {
        send[i] = 0.1f * (float)i - 7.0f;
        sb[i] = ct_bf16_from_f32(send[i]);
    }
    for (int32_t op = CT_REDUCE_SUM; op <= CT_REDUCE_MIN; op++) {
        memset(recv, 0, sizeof recv);
        CT_CHECK_INT(vt->all_reduce(p.self, send, recv, n, CT_DTYPE_F32, op, NULL, &err), CT_OK);
        CT_CHECK(memcmp(send, recv, sizeof recv) == 0);
    }
    memset(rb, 0, sizeof rb);
    CT_CHECK_INT(vt->reduce_scatter(p.self, sb, rb, n, CT_DTYPE_BF16, CT_REDUCE_SUM, NULL, &err),
                 CT_OK);
    CT_CHECK(memcmp(sb, rb, sizeof rb) == 0);
    ct_request *req = NULL;
    memset(recv, 0, sizeof recv);
    CT_CHECK_INT(vt->all_gather(p.self, send, recv, n, CT_DTYPE_F32, &req, &err), CT_OK);
    CT_CHECK(req != NULL);
    CT_CHECK_INT(vt->wait(p.self, req, &err), CT_OK);
    CT_CHECK(memcmp(send, recv, sizeof recv) == 0);
    memset(recv, 0, sizeof recv);
    CT_CHECK_INT(vt->all_to_all(p.self, send, recv, n, CT_DTYPE_F32, NULL, &err), CT_OK);
    CT_CHECK(memcmp(send, recv, sizeof recv) == 0);
    /* in place */
    memcpy(recv, send, sizeof recv);
    CT_CHECK_INT(vt->all_reduce(p.self, recv, recv, n, CT_DTYPE_F32, CT_REDUCE_SUM, NULL, &err),
                 CT_OK);
    CT_CHECK(memcmp(send, recv, sizeof recv) == 0);
    CT_CHECK_INT(vt->broadcast(p.self, recv, n, CT_DTYPE_F32, 0, &err), CT_OK);
    CT_CHECK_INT(vt->barrier(p.self, &err), CT_OK);
    /* errors: another root, a peer, an unknown op */
    CT_CHECK_INT(vt->broadcast(p.self, recv, n, CT_DTYPE_F32, 1, &err), CT_ERR_INVALID);
    CT_CHECK_INT(vt->send(p.self, send, n, CT_DTYPE_F32, 0, 7, &err), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "cannot send to itself");
    CT_CHECK_INT(vt->recv(p.self, recv, n, CT_DTYPE_F32, 0, 7, &err), CT_ERR_INVALID);
    CT_CHECK_INT(vt->all_reduce(p.self, send, recv, n, CT_DTYPE_F32, 9, NULL, &err),
                 CT_ERR_INVALID);
    harness_free(h);
}

CT_TEST(comm_local_refuses_a_world_of_more_than_one_rank) {
    ct_harness *h = harness_new("[comm]\n");
    if (!h) return;
    const ct_plugin_desc *d = harness_load("comm_local.so");
    if (!d) {
        harness_free(h);
        return;
    }
    const ct_comm_vtable *vt = d->vtable;
    ct_create_args a = harness_args_rank(h, "comm", 0, 4);
    a.device = harness_device(h);
    ct_error err = {.struct_size = sizeof err};
    void *self = vt->create(&a, &err);
    CT_CHECK(self == NULL);
    CT_CHECK_STR_CONTAINS(err.message, "threads");
    if (self) vt->destroy(self);
    harness_free(h);
}
