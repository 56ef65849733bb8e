/*
 * onnx2gemmini: stdout and exit for picolibc programs on Spike, over HTIF.
 *
 * Why: Debian's riscv64-unknown-elf-gcc ships picolibc, whose own I/O layer
 * is semihosting, which Spike does not implement. Spike's front-end server
 * instead watches two 64-bit words named `tohost` and `fromhost` (found by
 * symbol name in the ELF):
 *   - tohost = address of a 64-byte-aligned block {64 (write), fd, buf, len}
 *     makes the host perform write(fd, buf, len); it answers by setting
 *     fromhost to a non-zero value, which we clear again;
 *   - tohost = (code << 1) | 1 ends the simulation with exit status code.
 * Link with --specs=picolibc.specs --crt0=hosted (so main's return value
 * reaches exit) and a memory map in Spike's DRAM at 0x80000000; the
 * generated Makefile's `riscv` target does that.
 * A trap (for example rdcycle on a Spike started with --isa=rv64gc, which
 * lacks Zicntr) is reported and ends the run with status 2 instead of
 * hanging at address 0.
 *
 * Written for onnx2gemmini; no code of riscv-tests or riscv-pk is used.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

volatile uint64_t tohost __attribute__((aligned(64), used));
volatile uint64_t fromhost __attribute__((aligned(64), used));

#define O2G_HTIF_SYS_WRITE 64

static void o2g_htif_write(const char *buf, size_t len)
{
    static volatile uint64_t request[8] __attribute__((aligned(64)));
    request[0] = O2G_HTIF_SYS_WRITE;
    request[1] = 1; /* the host's stdout */
    request[2] = (uint64_t)(uintptr_t)buf;
    request[3] = len;
    __sync_synchronize();
    tohost = (uint64_t)(uintptr_t)request;
    while (fromhost == 0)
        ;
    fromhost = 0;
    __sync_synchronize();
}

/* stdout is line-buffered here: one host round trip per line. */
static char o2g_htif_line[256];
static size_t o2g_htif_used;

static int o2g_htif_flush(FILE *f)
{
    (void)f;
    if (o2g_htif_used > 0)
        o2g_htif_write(o2g_htif_line, o2g_htif_used);
    o2g_htif_used = 0;
    return 0;
}

static int o2g_htif_putc(char c, FILE *f)
{
    o2g_htif_line[o2g_htif_used++] = c;
    if (c == '\n' || o2g_htif_used == sizeof o2g_htif_line)
        o2g_htif_flush(f);
    return (unsigned char)c;
}

static FILE o2g_htif_stdio = FDEV_SETUP_STREAM(o2g_htif_putc, NULL, o2g_htif_flush, _FDEV_SETUP_WRITE);
FILE *const stdin = &o2g_htif_stdio;
FILE *const stdout = &o2g_htif_stdio;
FILE *const stderr = &o2g_htif_stdio;

void _exit(int code)
{
    o2g_htif_flush(stdout);
    for (;;)
        tohost = ((uint64_t)(uint32_t)code << 1) | 1;
}

/* Never returns, so it may clobber anything; mtvec needs 4-byte alignment. */
static void __attribute__((aligned(4), noreturn, used)) o2g_htif_trap(void)
{
    uintptr_t cause, epc;
    __asm__ __volatile__("csrr %0, mcause" : "=r"(cause));
    __asm__ __volatile__("csrr %0, mepc" : "=r"(epc));
    printf("trap: mcause %lu at pc 0x%lx (an instruction this ISA lacks? run spike with the default ISA)\n",
           (unsigned long)cause, (unsigned long)epc);
    _exit(2);
}

static void __attribute__((constructor)) o2g_htif_init(void)
{
    __asm__ __volatile__("csrw mtvec, %0" : : "r"(o2g_htif_trap));
}
