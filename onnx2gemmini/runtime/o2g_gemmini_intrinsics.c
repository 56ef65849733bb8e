/*
 * o2g_gemmini_intrinsics.c: Buddy-MLIR's Gemmini intrinsics for an upstream LLVM (onnx2gemmini, docs/mlir.md).
 *
 * buddy-translate writes each Gemmini instruction of a lowered model.mlir as a call
 *     call void @llvm.riscv.<op>(i64 rs1, i64 rs2)
 * Buddy's LLVM fork selects the instruction itself (-mattr=+xgemmini). An upstream llc knows no such
 * intrinsic and emits an ordinary call to the external symbol "llvm.riscv.<op>" (rs1 in a0, rs2 in a1).
 * This file defines those 22 symbols; each issues the RoCC instruction that gemmini.h issues for the same
 * operation, ROCC_INSTRUCTION_RS1_RS2(XCUSTOM_ACC, rs1, rs2, k_<op>), with gemmini.h's own encodings.
 * Link it only with an upstream llc (the Makefile's SHIM=1); with Buddy's fork nothing calls it.
 */
#include <stdint.h>

#include "gemmini.h"

#define O2G_INTRINSIC(op, funct)                                                    \
    void o2g_intrinsic_##op(uint64_t rs1, uint64_t rs2) __asm__("llvm.riscv." #op); \
    void o2g_intrinsic_##op(uint64_t rs1, uint64_t rs2)                             \
    {                                                                               \
        ROCC_INSTRUCTION_RS1_RS2(XCUSTOM_ACC, rs1, rs2, funct);                     \
    }

O2G_INTRINSIC(config, k_CONFIG)
O2G_INTRINSIC(mvin2, k_MVIN2)
O2G_INTRINSIC(mvin, k_MVIN)
O2G_INTRINSIC(mvout, k_MVOUT)
O2G_INTRINSIC(compute_preloaded, k_COMPUTE_PRELOADED)
O2G_INTRINSIC(compute_accumulated, k_COMPUTE_ACCUMULATE)
O2G_INTRINSIC(preload, k_PRELOAD)
O2G_INTRINSIC(flush, k_FLUSH)
O2G_INTRINSIC(loop_ws, k_LOOP_WS)
O2G_INTRINSIC(loop_ws_config_bounds, k_LOOP_WS_CONFIG_BOUNDS)
O2G_INTRINSIC(loop_ws_config_addrs_ab, k_LOOP_WS_CONFIG_ADDRS_AB)
O2G_INTRINSIC(loop_ws_config_addrs_dc, k_LOOP_WS_CONFIG_ADDRS_DC)
O2G_INTRINSIC(loop_ws_config_strides_ab, k_LOOP_WS_CONFIG_STRIDES_AB)
O2G_INTRINSIC(loop_ws_config_strides_dc, k_LOOP_WS_CONFIG_STRIDES_DC)
O2G_INTRINSIC(mvin3, k_MVIN3)
O2G_INTRINSIC(loop_conv_ws, k_LOOP_CONV_WS)
O2G_INTRINSIC(loop_conv_ws_config1, k_LOOP_CONV_WS_CONFIG_1)
O2G_INTRINSIC(loop_conv_ws_config2, k_LOOP_CONV_WS_CONFIG_2)
O2G_INTRINSIC(loop_conv_ws_config3, k_LOOP_CONV_WS_CONFIG_3)
O2G_INTRINSIC(loop_conv_ws_config4, k_LOOP_CONV_WS_CONFIG_4)
O2G_INTRINSIC(loop_conv_ws_config5, k_LOOP_CONV_WS_CONFIG_5)
O2G_INTRINSIC(loop_conv_ws_config6, k_LOOP_CONV_WS_CONFIG_6)
