"""A stand-in gemmini-rocc-tests tree for testing `make baremetal GEMMINI=...` without the real one.

The real tree cannot be vendored or downloaded (its code is not ours to copy), so this tree has the same
*paths* the Makefile uses, filled with our own files: include/gemmini.h wraps the host implementation
(and hides its GEMMINI_HOST marker, so model.c takes the real-header path and includes
include/gemmini_testutils.h), and riscv-tests/benchmarks/common holds a minimal crt.S, a syscalls.c
that is the project's HTIF layer, and a test.ld placing everything in Spike's DRAM. Built with
picolibc through LIBC_CFLAGS/LIBC_LDLIBS, exactly as a user without newlib would.
"""
from __future__ import annotations

from pathlib import Path

RUNTIME = Path(__file__).resolve().parents[2] / "onnx2gemmini" / "runtime"

GEMMINI_H = """/* stand-in for gemmini-rocc-tests include/gemmini.h: the host implementation */
#include "{host}"
#undef GEMMINI_HOST
"""

TESTUTILS_H = """/* stand-in for include/gemmini_testutils.h: read_cycles() comes with the host gemmini.h */
#include "include/gemmini.h"
"""

CRT_S = """/* stand-in crt.S: stack, FPU on, thread pointer, main(0, 0), exit */
    .section .text.init
    .globl _start
_start:
    la sp, fake_stack_top
    la tp, fake_tls
    li t0, 0x2000
    csrs mstatus, t0
    csrw fcsr, zero
    li a0, 0
    li a1, 0
    call main
    call exit
1:  j 1b
"""

SYSCALLS_C = """/* stand-in syscalls.c: the project's HTIF stdout/exit layer */
#include "{htif}"
char fake_tls[4096] __attribute__((aligned(64)));
"""

TEST_LD = """OUTPUT_ARCH("riscv")
ENTRY(_start)
SECTIONS
{
  . = 0x80000000;
  .text.init : { *(.text.init) }
  .text : { *(.text .text.*) }
  .rodata : { *(.rodata .rodata.* .srodata .srodata.*) }
  .data : { *(.data .data.* .sdata .sdata.*) }
  .tdata : { *(.tdata .tdata.*) }
  .tbss : { *(.tbss .tbss.*) }
  .bss : { *(.bss .bss.* .sbss .sbss.* COMMON) }
  . = ALIGN(64);
  . += 0x100000;
  fake_stack_top = .;
}
"""


def make_tree(root: Path) -> Path:
    files = {
        "include/gemmini.h": GEMMINI_H.format(host=RUNTIME / "host" / "gemmini.h"),
        "include/gemmini_testutils.h": TESTUTILS_H,
        "riscv-tests/env/.keep": "",
        "riscv-tests/benchmarks/common/crt.S": CRT_S,
        "riscv-tests/benchmarks/common/syscalls.c": SYSCALLS_C.format(htif=RUNTIME / "o2g_htif.c"),
        "riscv-tests/benchmarks/common/test.ld": TEST_LD,
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root
