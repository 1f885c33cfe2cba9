/* test_flash_plan.c — the launch shape and shared-memory plan of the gpt plugin's flash attention
 * kernels (plugins/model/gpt/flash_plan.h), checked on a CPU: every plan of every head dim fits
 * the H200's 227 KB per block, its tiles are 128-byte aligned and disjoint, bf16 plans keep
 * WMMA's stride and alignment rules, f32 plans have odd strides, the figures docs/gpu.md states
 * are the plan's, and the grid of GPT-2 124M at B=64, T=1024 is what the kernels expect while
 * shapes beyond the grid or int limits are refused. Not for: the kernels' arithmetic
 * (tests/gpu/model_vs_cpu.c compares them with the CPU on a GPU).
 */
#include "ct_test.h"

#include "../../plugins/model/gpt/flash_plan.h"

#define H200_SMEM_PER_BLOCK 232448 /* 227 KB: cudaDevAttrMaxSharedMemoryPerBlockOptin */
#define H200_SMEM_PER_SM    233472 /* 228 KB, of which 1 KB is reserved per resident block */

static const int kinds[3][2] = {{0, 1}, {1, 1}, {1, 2}}; /* forward, dq, dk+dv: (bwd, nacc) */

CT_TEST(flash_plan_fits_227kb_per_block_for_every_head_dim_and_dtype) {
    for (int bf16 = 0; bf16 < 2; bf16++)
        for (int64_t HD = 1; HD <= GPT_FLASH_HD_MAX; HD++)
            for (int k = 0; k < 3; k++) {
                gpt_flash_plan p = gpt_flash_make_plan(bf16, gpt_flash_dp(HD), kinds[k][0], kinds[k][1]);
                CT_CHECK_MSG(p.bytes > 0 && p.bytes <= H200_SMEM_PER_BLOCK,
                             "bf16=%d HD=%lld kind %d: %d bytes, limit %d", bf16, (long long)HD, k,
                             p.bytes, H200_SMEM_PER_BLOCK);
            }
}

CT_TEST(flash_plan_tiles_are_128_byte_aligned_disjoint_and_inside_the_plan) {
    for (int bf16 = 0; bf16 < 2; bf16++)
        for (int64_t HD = 1; HD <= GPT_FLASH_HD_MAX; HD++)
            for (int k = 0; k < 3; k++) {
                const int bwd = kinds[k][0], nacc = kinds[k][1], es = bf16 ? 2 : 4;
                const int Dp = gpt_flash_dp(HD);
                gpt_flash_plan p = gpt_flash_make_plan(bf16, Dp, bwd, nacc);
                /* (start, bytes the kernel touches) in plan order; size 0: not in this kernel */
                int at[11] = {p.e[0], p.e[1], p.e[2], p.e[3], p.s, p.p, p.ds, p.acc0, p.acc1,
                              p.stats, p.bytes};
                int need[10] = {p.bt * p.ldE * es, p.bt * p.ldE * es, p.bt * p.ldE * es,
                                bwd ? p.bt * p.ldE * es : 0, p.bt * p.ldS * 4,
                                p.bt * p.ldP * es, bwd ? p.bt * p.ldP * es : 0,
                                p.bt * p.ldO * 4, nacc > 1 ? p.bt * p.ldO * 4 : 0,
                                3 * p.bt * 4};
                for (int i = 0; i < 10; i++) {
                    CT_CHECK_MSG(at[i] % 128 == 0, "bf16=%d HD=%lld kind %d: tile %d at %d",
                                 bf16, (long long)HD, k, i, at[i]);
                    CT_CHECK_MSG(at[i] + need[i] <= at[i + 1],
                                 "bf16=%d HD=%lld kind %d: tile %d [%d, %d) runs into %d", bf16,
                                 (long long)HD, k, i, at[i], at[i] + need[i], at[i + 1]);
                }
            }
}

CT_TEST(flash_plan_bf16_keeps_wmma_strides_and_32_byte_tile_alignment) {
    for (int64_t HD = 1; HD <= GPT_FLASH_HD_MAX; HD++) {
        const int Dp = gpt_flash_dp(HD);
        CT_CHECK_MSG(Dp % 16 == 0 && Dp >= HD && Dp < HD + 16, "HD=%lld: Dp %d", (long long)HD, Dp);
        gpt_flash_plan p = gpt_flash_make_plan(1, Dp, 1, 2);
        CT_CHECK_INT(p.bt % 16, 0);
        /* ldm: a multiple of 8 for 16-bit operands, of 4 for f32 accumulators */
        CT_CHECK_MSG(p.ldE % 8 == 0 && p.ldP % 8 == 0 && p.ldS % 4 == 0 && p.ldO % 4 == 0,
                     "HD=%lld: ldE %d ldP %d ldS %d ldO %d", (long long)HD, p.ldE, p.ldP, p.ldS,
                     p.ldO);
        /* a 16x16 tile starts 16 rows or 16 columns in: 32-byte aligned */
        CT_CHECK_MSG((16 * p.ldE * 2) % 32 == 0 && (16 * p.ldP * 2) % 32 == 0 &&
                         (16 * p.ldS * 4) % 32 == 0 && (16 * p.ldO * 4) % 32 == 0,
                     "HD=%lld: a 16-row step is not 32-byte aligned", (long long)HD);
    }
}

CT_TEST(flash_plan_f32_strides_are_odd_so_column_reads_hit_distinct_banks) {
    for (int64_t HD = 1; HD <= GPT_FLASH_HD_MAX; HD++) {
        gpt_flash_plan p = gpt_flash_make_plan(0, gpt_flash_dp(HD), 1, 2);
        CT_CHECK_MSG(p.ldE % 2 == 1 && p.ldS % 2 == 1 && p.ldP % 2 == 1 && p.ldO % 2 == 1,
                     "HD=%lld: ldE %d ldS %d ldP %d ldO %d", (long long)HD, p.ldE, p.ldS, p.ldP,
                     p.ldO);
    }
}

/* docs/gpu.md's table and occupancy sentence (GPT-2's HD=64 and the largest, 128). */
CT_TEST(flash_plan_figures_are_the_ones_docs_gpu_md_states) {
    const int want[2][2][3] = {{{42112, 54656, 62976}, {74880, 95616, 112128}},    /* f32 */
                               {{72448, 90880, 108288}, {113408, 140032, 173824}}}; /* bf16 */
    for (int bf16 = 0; bf16 < 2; bf16++)
        for (int d = 0; d < 2; d++)
            for (int k = 0; k < 3; k++)
                CT_CHECK_INT(gpt_flash_make_plan(bf16, d ? 128 : 64, kinds[k][0], kinds[k][1]).bytes,
                             want[bf16][d][k]);
    /* bf16 at HD=64: 3 forward blocks per SM, 2 of each backward kernel */
    CT_CHECK_INT(H200_SMEM_PER_SM / (gpt_flash_make_plan(1, 64, 0, 1).bytes + 1024), 3);
    CT_CHECK_INT(H200_SMEM_PER_SM / (gpt_flash_make_plan(1, 64, 1, 1).bytes + 1024), 2);
    CT_CHECK_INT(H200_SMEM_PER_SM / (gpt_flash_make_plan(1, 64, 1, 2).bytes + 1024), 2);
}

CT_TEST(flash_grid_of_gpt2_124m_b64_t1024_and_short_sequences) {
    uint32_t gx = 0, gy = 0;
    CT_CHECK_INT(gpt_flash_grid(64, 1024, 12, 64, 1, &gx, &gy), 0);
    CT_CHECK_INT(gx, 768);
    CT_CHECK_INT(gy, 16);
    CT_CHECK_INT(gpt_flash_grid(64, 1024, 12, 64, 0, &gx, &gy), 0);
    CT_CHECK_INT(gy, 32);
    const int64_t T[4] = {1, 37, 64, 130}, tiles[2][4] = {{1, 2, 2, 5}, {1, 1, 1, 3}};
    for (int bf16 = 0; bf16 < 2; bf16++)
        for (int i = 0; i < 4; i++) {
            CT_CHECK_INT(gpt_flash_grid(2, T[i], 4, 16, bf16, &gx, &gy), 0);
            CT_CHECK_INT(gx, 8);
            CT_CHECK_INT(gy, tiles[bf16][i]);
        }
}

CT_TEST(flash_grid_refuses_head_dims_and_shapes_the_kernels_cannot_hold) {
    uint32_t gx = 0, gy = 0;
    CT_CHECK_INT(gpt_flash_grid(1, 8, 1, 0, 1, &gx, &gy), 1);
    CT_CHECK_INT(gpt_flash_grid(1, 8, 1, 129, 1, &gx, &gy), 1);
    CT_CHECK_INT(gpt_flash_grid(1, 8, 1, 128, 1, &gx, &gy), 0);
    CT_CHECK_INT(gpt_flash_grid((int64_t)1 << 21, 8, 1 << 10, 64, 1, &gx, &gy), 2); /* B*NH = 2^31 */
    CT_CHECK_INT(gpt_flash_grid(((int64_t)1 << 21) - 1, 8, 1 << 10, 64, 1, &gx, &gy), 0);
    CT_CHECK_INT(gpt_flash_grid(1, 65535 * 64, 1, 64, 1, &gx, &gy), 0);
    CT_CHECK_INT(gy, 65535);
    CT_CHECK_INT(gpt_flash_grid(1, 65535 * 64 + 1, 1, 64, 1, &gx, &gy), 2);
    CT_CHECK_INT(gpt_flash_grid(1, 65535 * 32 + 1, 1, 64, 0, &gx, &gy), 2);
    CT_CHECK_INT(gpt_flash_grid(0, 8, 1, 64, 1, &gx, &gy), 2);
}
