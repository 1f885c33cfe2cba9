/* flash_plan.h — the launch shape and shared-memory plan of the gpt plugin's flash attention
 * kernels (flash_attention.cu) as pure functions of (B, T, NH, HD, dtype): tile rows, the grid,
 * padded head dim, row strides and byte offsets of every shared-memory tile. Plain C usable
 * from CUDA (CT_HD), so the kernels, their host launchers and tests/unit/test_flash_plan.c use
 * the same arithmetic. Not for: anything that touches a GPU.
 */
#ifndef GPT_PLUGIN_FLASH_PLAN_H
#define GPT_PLUGIN_FLASH_PLAN_H

#include <ctrain/numerics.h> /* CT_HD */

#include <limits.h>
#include <stdint.h>

#define GPT_FLASH_THREADS 128 /* threads per block: 4 warps; BT * (threads per row) == 128 */
#define GPT_FLASH_HD_MAX  128 /* largest head dim (padded to a multiple of 16 inside) */
#define GPT_FLASH_BT_BF16 64  /* tile rows under bf16 (WMMA 16x16x16 tiles) */
#define GPT_FLASH_BT_F32  32  /* tile rows under f32 (SIMT) */
/* Row padding in elements of the element-type tiles (PE) and the f32 tiles (PF). bf16: keeps
 * WMMA's rules (ldm a multiple of 8 / 4, tile pointers 32-byte aligned) and spreads banks;
 * f32: odd strides, so the SIMT loops' column reads hit 32 different banks. */
#define GPT_FLASH_PE_BF16 8
#define GPT_FLASH_PF_BF16 4
#define GPT_FLASH_PE_F32  1
#define GPT_FLASH_PF_F32  1

/* Byte offsets of one block's shared-memory tiles (all 128-byte aligned). */
typedef struct gpt_flash_plan {
    int bt;                 /* tile rows */
    int ldE, ldS, ldP, ldO; /* row strides in elements: E tiles (bt,Dp) of the element type,
                               S (bt,bt) f32, P and dS (bt,bt) element type, accumulators
                               (bt,Dp) f32 */
    int e[4];               /* forward: Q, K, V (e[3] == end of V); backward: four E tiles */
    int s, p, ds, acc0, acc1, stats; /* S; P; dS (backward); accumulators; 3*bt f32 row stats */
    int bytes;              /* the whole plan */
} gpt_flash_plan;

CT_HD int gpt_flash_up128(int x) { return (x + 127) & ~127; }

CT_HD int gpt_flash_bt(int bf16) { return bf16 ? GPT_FLASH_BT_BF16 : GPT_FLASH_BT_F32; }

/* HD rounded up to a multiple of 16 (the WMMA k and n steps); 0 when HD is outside 1..128. */
CT_HD int gpt_flash_dp(int64_t HD) {
    return HD >= 1 && HD <= GPT_FLASH_HD_MAX ? (int)((HD + 15) / 16 * 16) : 0;
}

/* The plan of one kernel: forward (bwd 0, nacc 1: O), dq (bwd 1, nacc 1), dk+dv (bwd 1,
 * nacc 2). Dp from gpt_flash_dp. */
CT_HD gpt_flash_plan gpt_flash_make_plan(int bf16, int Dp, int bwd, int nacc) {
    gpt_flash_plan p;
    const int es = bf16 ? 2 : 4, pe = bf16 ? GPT_FLASH_PE_BF16 : GPT_FLASH_PE_F32,
              pf = bf16 ? GPT_FLASH_PF_BF16 : GPT_FLASH_PF_F32;
    p.bt = gpt_flash_bt(bf16);
    p.ldE = Dp + pe, p.ldS = p.bt + pf, p.ldP = p.bt + pe, p.ldO = Dp + pf;
    const int tE = gpt_flash_up128(p.bt * p.ldE * es), tS = gpt_flash_up128(p.bt * p.ldS * 4),
              tP = gpt_flash_up128(p.bt * p.ldP * es), tO = gpt_flash_up128(p.bt * p.ldO * 4);
    int c = 0;
    for (int i = 0; i < 4; i++) {
        p.e[i] = c;
        if (i < 3 || bwd) c += tE;
    }
    p.s = c, c += tS;
    p.p = c, c += tP;
    p.ds = c, c += bwd ? tP : 0;
    p.acc0 = c, c += tO;
    p.acc1 = c, c += nacc > 1 ? tO : 0;
    p.stats = c, c += gpt_flash_up128(3 * p.bt * 4);
    p.bytes = c;
    return p;
}

/* The grid of every flash kernel: (B*NH, ceil(T/bt)) blocks of GPT_FLASH_THREADS. Returns 0
 * and the grid; 1 when HD is outside 1..GPT_FLASH_HD_MAX; 2 when a limit would break (grid.x
 * <= 2^31-1, grid.y <= 65535, T, NH and tiles*bt within int: the kernels' int arithmetic). */
CT_HD int gpt_flash_grid(int64_t B, int64_t T, int64_t NH, int64_t HD, int bf16, uint32_t *gx,
                         uint32_t *gy) {
    const int64_t bt = gpt_flash_bt(bf16);
    if (!gpt_flash_dp(HD)) return 1;
    if (B < 1 || T < 1 || NH < 1 || NH > INT_MAX || B > INT_MAX / NH) return 2;
    const int64_t nt = (T + bt - 1) / bt;
    if (nt > 65535 || nt * bt > INT_MAX) return 2;
    *gx = (uint32_t)(B * NH), *gy = (uint32_t)nt;
    return 0;
}

#endif /* GPT_PLUGIN_FLASH_PLAN_H */
