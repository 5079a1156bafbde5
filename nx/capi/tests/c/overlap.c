/* Zero-copy receives in flight at once into memory that overlaps (one array, each receive
 * allowed the rest of it): with the registration cache, which exports whole receive
 * buffers, each still gets its message (exported in part, or through the library's memory).
 * Run with a threshold below the messages' lengths. */
#include "nx.h"
#include "check.h"

#define PIECE (512L * 1024)

static unsigned char *a;

/* Node 1 sends the messages of types t[0], t[1], t[2] (lengths len[], seeds 30 + type) in
 * that order; node 0 has posted their receives, type 1 at a + at[0] and so on. */
static void round_of(const long at[3], const long len[3], const long order[3]) {
    long me = mynode(), total = 3 * PIECE;
    if (me == 0) {
        long m[3];
        memset(a, 0, total);
        for (long t = 0; t < 3; t++) m[t] = irecv(t + 1, a + at[t], total - at[t]);
        gsync();
        for (long t = 0; t < 3; t++) {
            msgwait(m[t]);
            CHECK(infocount() == len[t], "type %ld: %ld bytes", t + 1, infocount());
        }
        for (long t = 0; t < 3; t++) {
            long bad = verify(a + at[t], len[t], 31 + t);
            CHECK(bad < 0, "type %ld at %ld: byte %ld wrong", t + 1, at[t], bad);
        }
    } else if (me == 1) {
        unsigned char *out = malloc(total);
        CHECK(out, "malloc");
        gsync();
        long m[3];
        for (long k = 0; k < 3; k++) {
            long t = order[k];
            fill(out + at[t], len[t], 31 + t);
            m[k] = isend(t + 1, out + at[t], len[t], 0, 0);
        }
        for (long k = 0; k < 3; k++) msgwait(m[k]);
        free(out);
    } else {
        gsync();
    }
    gsync();
}

int main(void) {
    a = malloc(3 * PIECE);
    CHECK(a, "malloc");
    /* Pieces side by side, each receive's buffer running to the end of the array. */
    long side[3] = {0, PIECE, 2 * PIECE}, full[3] = {PIECE, PIECE, PIECE};
    long in_order[3] = {0, 1, 2}, reversed[3] = {2, 1, 0};
    round_of(side, full, in_order);
    round_of(side, full, reversed);
    /* Shorter messages than their pieces. */
    long half[3] = {PIECE / 2, PIECE / 2 + 3, 4097};
    round_of(side, half, in_order);
    round_of(side, half, reversed);
    /* Nested: a short message at the start, the others inside the first one's buffer. */
    long nested[3] = {0, 8192, 8192 + PIECE}, nlen[3] = {8192, PIECE, PIECE - 5};
    round_of(nested, nlen, in_order);
    round_of(nested, nlen, reversed);
    printf("overlap node %ld: ok\n", mynode());
    return 0;
}
