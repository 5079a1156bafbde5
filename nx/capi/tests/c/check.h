/* Helpers of the C test programs: checks that end the program with a message. */
#ifndef CHECK_H
#define CHECK_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        if (!(cond)) {                                                          \
            fprintf(stderr, "node %ld: %s:%d: check failed: %s: ", mynode(),    \
                    __FILE__, __LINE__, #cond);                                 \
            fprintf(stderr, __VA_ARGS__);                                       \
            fprintf(stderr, "\n");                                              \
            exit(2);                                                            \
        }                                                                       \
    } while (0)

/* Deterministic contents: byte i of message (seed). */
static inline unsigned char pat(unsigned long seed, unsigned long i) {
    unsigned long x = (seed * 2654435761UL) ^ (i * 40503UL) ^ (i >> 7);
    return (unsigned char)(x ^ (x >> 11));
}

static inline void fill(unsigned char *b, unsigned long n, unsigned long seed) {
    for (unsigned long i = 0; i < n; i++) b[i] = pat(seed, i);
}

/* Index of the first wrong byte, or -1. */
static inline long verify(const unsigned char *b, unsigned long n, unsigned long seed) {
    for (unsigned long i = 0; i < n; i++)
        if (b[i] != pat(seed, i)) return (long)i;
    return -1;
}
#endif
