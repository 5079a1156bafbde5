/* Handler receives under load: node 0 serves every other node's requests from an hrecv
 * handler (re-posted by the handler) while it computes, with masktrap around the part of
 * its computation that the handler must not see half done. */
#include "nx.h"
#include "check.h"

#define REQ 10
#define ANS 11
#define K 300

static long reqbuf[2];
static volatile long served = 0, a = 0, b = 0, bad = 0, cur = -1;

static void serve(long type, long count, long node, long ptype) {
    long x = reqbuf[0], ans[2];
    (void)type; (void)ptype;
    if (a != b || count != sizeof reqbuf) bad++;
    ans[0] = x * x + 1;
    ans[1] = a;
    served++;
    cur = _hrecv(REQ, reqbuf, sizeof reqbuf, serve); /* the next request */
    csend(ANS, ans, sizeof ans, node, 0);
}

int main(void) {
    long me = mynode(), n = numnodes(), k;
    if (me == 0) {
        long total = (n - 1) * K, i, rounds = 0;
        double t0, acc = 0.0, acc2 = 0.0;
        cur = _hrecv(REQ, reqbuf, sizeof reqbuf, serve);
        CHECK(cur >= 0, "_hrecv id");
        gsync();
        t0 = dclock();
        while (served < total && dclock() - t0 < 100.0) {
            CHECK(masktrap(1) == 0, "masktrap was set");
            a++;
            for (i = 0; i < 2000; i++) acc += (double)i * 0.5;
            b++;
            CHECK(masktrap(0) == 1, "masktrap was not set");
            for (i = 0; i < 2000; i++) acc2 += (double)i * 0.25; /* no NX call */
            rounds++;
        }
        CHECK(served == total, "served %ld of %ld", served, total);
        CHECK(bad == 0, "%ld handlers ran inside a masked section", bad);
        CHECK(acc > 0 && acc2 > 0 && rounds > 0, "computed");
        masktrap(1);
        msgcancel(cur);
        masktrap(0);
        printf("hload: %ld requests served over %ld rounds\n", total, rounds);
    } else {
        gsync();
        for (k = 0; k < K; k++) {
            long q[2], ans[2];
            q[0] = me * 1000 + k;
            q[1] = me;
            csend(REQ, q, sizeof q, 0, 0);
            crecv(ANS, ans, sizeof ans);
            CHECK(ans[0] == q[0] * q[0] + 1, "answer %ld to %ld", ans[0], q[0]);
        }
    }
    gsync();
    printf("hload node %ld: ok\n", me);
    return 0;
}
