/*
 * o2g_heap.c: malloc and free for the bare-metal MLIR self-test (onnx2gemmini, docs/mlir.md).
 *
 * A lowered model.mlir allocates its activations with malloc (memref.alloc) and frees them after their last
 * use (memref.dealloc). The bare-metal environment of gemmini-rocc-tests (crt.S, syscalls.c, no C library)
 * has no heap, so the self-test brings one: a bump allocator over a static arena of O2G_HEAP_BYTES, which the
 * generated Makefile sizes to hold every allocation of one @forward at once. free() returns memory only when
 * nothing is live any more (the end of a call), so any number of calls fit.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef O2G_HEAP_BYTES
#define O2G_HEAP_BYTES (64u << 20)
#endif

#define O2G_HEAP_ALIGN 64

static unsigned char o2g_heap[O2G_HEAP_BYTES] __attribute__((aligned(O2G_HEAP_ALIGN)));
static size_t o2g_heap_top, o2g_heap_live;

void *malloc(size_t size)
{
    size_t start = (o2g_heap_top + O2G_HEAP_ALIGN - 1) & ~(size_t)(O2G_HEAP_ALIGN - 1);
    if (size > sizeof o2g_heap || start > sizeof o2g_heap - size) { /* the lowered module does not check */
        printf("o2g_heap: out of memory (%lu bytes asked, %lu of %lu in use); build with a larger HEAP_BYTES\n",
               (unsigned long)size, (unsigned long)o2g_heap_top, (unsigned long)sizeof o2g_heap);
        exit(1);
    }
    o2g_heap_top = start + size;
    o2g_heap_live++;
    return &o2g_heap[start];
}

void free(void *ptr)
{
    if (ptr != NULL && o2g_heap_live > 0 && --o2g_heap_live == 0)
        o2g_heap_top = 0;
}
