/* Bad input at the underscore forms of nx.h: NULL buffers with a length, negative lengths and
 * counts, unknown nodes, process types, types and message ids. Each returns -1 with its EQ*
 * errno and the process goes on (nothing crashes, the job still works after). */
#include <errno.h>
#include "nx.h"
#include "check.h"

#define BAD(call, code)                                                            \
    do {                                                                           \
        errno = 0;                                                                 \
        long r_ = (call);                                                          \
        CHECK(r_ == -1 && errno == (code), "%s: returned %ld errno %d, want -1 %d", \
              #call, r_, errno, (code));                                           \
    } while (0)

int main(void) {
    long me = mynode(), n = numnodes();
    long right = (me + 1) % n, left = (me + n - 1) % n;
    long x[4] = {1, 2, 3, 4}, w[4], info[4], nodes[2] = {right, n + 7};
    char buf[64];

    BAD(_csend(1, NULL, 8, right, 0), EQLEN);
    BAD(_csend(1, buf, -1, right, 0), EQLEN);
    BAD(_csend(1, buf, 8, -2, 0), EQNODE);
    BAD(_csend(1, buf, 8, n, 0), EQNODE);
    BAD(_csend(1, buf, 8, 1L << 40, 0), EQNODE);
    BAD(_csend(-1, buf, 8, right, 0), EQTYPE);
    BAD(_csend(1, buf, 8, right, -9), EQPTYPE);
    BAD(_isend(1, NULL, 8, right, 0), EQLEN);
    BAD(_isend(1, buf, -100, right, 0), EQLEN);
    BAD(_gsendx(1, buf, 8, nodes, 2), EQNODE);
    BAD(_gsendx(1, buf, 8, NULL, 2), EQLEN);
    BAD(_gsendx(1, buf, 8, nodes, -1), EQLEN);
    BAD(_crecv(1, NULL, 8), EQLEN);
    BAD(_crecv(1, buf, -8), EQLEN);
    BAD(_crecvx(1, buf, 8, n + 3, -1, info), EQNODE);
    BAD(_crecvx(1, buf, 8, -1, -5, info), EQPTYPE);
    BAD(_irecv(1, NULL, 8), EQLEN);
    BAD(_irecv(1, buf, -1), EQLEN);
    BAD(_irecvx(1, buf, 8, -3, -1, NULL), EQNODE);
    BAD(_csendrecv(1, NULL, 4, right, 0, 2, buf, 8), EQLEN);
    BAD(_csendrecv(1, buf, 4, right, 0, 2, NULL, 8), EQLEN);
    BAD(_csendrecv(1, buf, 4, right, 0, 2, buf, -8), EQLEN);
    BAD(_msgwait(-1), EQMID);
    BAD(_msgdone(-7), EQMID);
    BAD(_msgcancel(1L << 50), EQMID);
    BAD(_msgignore(-1), EQMID);
    BAD(_cprobex(1, -2, -1, info), EQNODE);
    BAD(_iprobex(1, n + 1, -1, info), EQNODE);
    BAD(_setptype(-2), EQPTYPE);
    BAD(_gdsum(NULL, 4, NULL), EQLEN);
    BAD(_gisum(x, -1, w), EQLEN);
    CHECK(_gisum(x, 4, NULL) == 0, "work is not needed: NULL is fine");
    BAD(_gcol(NULL, 8, buf, 64, info), EQLEN);
    BAD(_gcol(buf, -8, buf, 64, info), EQLEN);
    BAD(_gcol(buf, 8, buf, -64, info), EQLEN);
    long lens[64];
    for (long k = 0; k < n; k++) lens[k] = 8;
    BAD(_gcolx(buf, lens, NULL), EQLEN);
    BAD(_gcolx(NULL, lens, buf), EQLEN);
    BAD(_gcolx(buf, NULL, buf), EQLEN);
    BAD(_flushmsg(-1, n + 5, -1), EQNODE);

    /* The job still works: a ring, then a global sum. */
    long token = me * 3, got = -1;
    csend(10, &token, sizeof token, right, 0);
    crecv(10, &got, sizeof got);
    CHECK(got == left * 3, "ring after bad input: got %ld", got);
    long s[1] = {1}, ws[1];
    gisum(s, 1, ws);
    CHECK(s[0] == n, "gisum after bad input: %ld", s[0]);
    printf("bad_input node %ld: ok\n", me);
    return 0;
}
