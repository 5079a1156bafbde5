/* Type selection with out-of-order receives: specific types, ~type (all but one), -1, and
 * node selection, with more messages than packet buffers and some zero-copy ones. */
#include "nx.h"
#include "check.h"
#include <errno.h>

static int errno_is(int e) { return errno == e; }

#define N 30

static long len_of(long i) { return (i % 7 == 6) ? 40000 + i : 3 + 5 * i; }

int main(void) {
    long me = mynode();
    unsigned char *b = malloc(65536);
    CHECK(b, "malloc");
    if (me != 0) {
        for (long i = 0; i < N; i++) {
            fill(b, len_of(i), me * 100 + i);
            csend(10 + i % 3, b, len_of(i), 0, 0);
        }
        csend(99, "end", 3, 0, 0);
    } else {
        long info[4];
        /* The last message of node 2 first (node selection, specific type). */
        crecvx(99, b, 65536, 2, -1, info);
        CHECK(info[0] == 99 && info[1] == 3 && info[2] == 2, "end of node 2");
        for (long src = 1; src <= 2; src++) {
            long seen[3] = {0, 0, 0};
            /* type 12 only, in order: i = 2, 5, 8, ... */
            for (long i = 2; i < N; i += 3) {
                crecvx(12, b, 65536, src, -1, info);
                CHECK(info[1] == len_of(i), "len %ld for message %ld", info[1], i);
                CHECK(verify(b, info[1], src * 100 + i) < 0, "message %ld of %ld", i, src);
                seen[2]++;
            }
            /* all but type 10: type 11 now, in order */
            for (long i = 1; i < N; i += 3) {
                crecvx(~10L, b, 65536, src, -1, info);
                CHECK(info[0] == 11, "type %ld", info[0]);
                CHECK(verify(b, info[1], src * 100 + i) < 0, "message %ld of %ld", i, src);
                seen[1]++;
            }
            /* any type from src: the type-10 ones, in order */
            for (long i = 0; i < N; i += 3) {
                crecvx(-1, b, 65536, src, -1, info);
                CHECK(info[0] == 10, "type %ld", info[0]);
                CHECK(verify(b, info[1], src * 100 + i) < 0, "message %ld of %ld", i, src);
                seen[0]++;
            }
            CHECK(seen[0] + seen[1] + seen[2] == N, "count");
        }
        crecv(99, b, 65536);
        CHECK(infonode() == 1, "end of node 1");
        CHECK(iprobe(-1) == 0, "nothing left");
        /* Errors as NX reports them, through the underscore forms. */
        CHECK(_crecv(-5000000000L, b, 4) == -1, "bad typesel accepted");
        CHECK(_csend(-2, b, 4, 1, 0) == -1 && errno_is(EQTYPE), "bad type");
        CHECK(_csend(1, b, 4, 77, 0) == -1 && errno_is(EQNODE), "bad node");
        CHECK(_csend(1, b, -4, 1, 0) == -1 && errno_is(EQLEN), "bad length");
        CHECK(_msgwait(424242) == -1 && errno_is(EQMID), "bad mid");
    }
    gsync();
    printf("typesel node %ld: ok\n", me);
    return 0;
}
