/* Handler receives: a handler runs while its node computes without calling NX (the sender's
 * notification), a handler with hparam and node selection, and a handler that calls NX. */
#include "nx.h"
#include "check.h"

static volatile long got_type = -1, got_count = -1, got_node = -1, got_param = -1;
static char buf1[64], buf2[64], buf3[64];

static void h1(long type, long count, long node, long ptype) {
    (void)ptype;
    got_count = count;
    got_node = node;
    got_type = type;
}

static void h2(long type, long count, long node, long ptype, long hparam) {
    (void)type; (void)count; (void)node; (void)ptype;
    got_param = hparam;
}

static void h3(long type, long count, long node, long ptype) {
    (void)type; (void)ptype;
    /* Answer from inside the handler. */
    csend(7, buf3, count, node, 0);
}

int main(void) {
    long me = mynode();
    if (me == 0) {
        hrecv(5, buf1, sizeof buf1, h1);
        hrecvx(-1, buf2, sizeof buf2, 1, -1, h2, 4242);
        hrecv(6, buf3, sizeof buf3, h3);
        gsync(); /* node 1 sends after this */
        /* Compute without calling NX: the handlers must still run. */
        double t0 = dclock();
        while ((got_type < 0 || got_param < 0) && dclock() - t0 < 20.0) {
        }
        CHECK(got_type == 5 && got_count == 11 && got_node == 1, "handler 1 did not run");
        CHECK(memcmp(buf1, "for handler", 11) == 0, "handler 1 data");
        CHECK(got_param == 4242 && memcmp(buf2, "second", 6) == 0, "handler 2");
        gsync(); /* node 1 has its answer from h3 */
        /* Masked handlers wait until unmasked. */
        got_type = -1;
        CHECK(masktrap(1) == 0, "masktrap: not masked before");
        hrecv(9, buf1, sizeof buf1, h1);
        gsync(); /* node 1 sends type 9 */
        crecv(10, buf2, sizeof buf2); /* node 1 sends this after type 9 */
        CHECK(got_type == -1, "a masked handler ran");
        CHECK(masktrap(0) == 1, "masktrap: masked before");
        CHECK(got_type == 9, "the handler did not run when unmasked");
    } else {
        gsync();
        csend(5, "for handler", 11, 0, 0);
        csend(8, "second", 6, 0, 0);
        csend(6, "echo me", 7, 0, 0);
        char b[16];
        crecv(7, b, sizeof b);
        CHECK(infocount() == 7 && memcmp(b, "echo me", 7) == 0, "answer from a handler");
        gsync();
        gsync();
        csend(9, "masked", 6, 0, 0);
        csend(10, "after", 5, 0, 0);
    }
    printf("handler node %ld: ok\n", me);
    return 0;
}
