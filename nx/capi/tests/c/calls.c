/* The combined and handler sends, merged ids, gsendx, flushmsg, and the underscore forms'
 * errors, across 2-4 nodes. */
#include <errno.h>
#include "nx.h"
#include "check.h"

#define BIG 300000 /* over the default threshold: zero-copy */

static volatile long hs_done = 0, hs_last = -1, hsx_param = -1, hsr_count = -1, hsr_node = -1;
static unsigned char big[BIG], bigin[BIG], small[100], rep[64];

static void on_sent(long type, long count, long node, long ptype) {
    (void)type; (void)node; (void)ptype;
    hs_last = count;
    hs_done++;
}

static void on_sentx(long type, long count, long node, long ptype, long hparam) {
    (void)type; (void)count; (void)node; (void)ptype;
    hsx_param = hparam;
    hs_done++;
}

static void on_reply(long type, long count, long node, long ptype) {
    (void)type; (void)ptype;
    hsr_node = node;
    hsr_count = count;
}

/* Spins without calling NX until *flag reaches want (handlers run from notifications). */
static void spin_until(volatile long *flag, long want, const char *what) {
    double t0 = dclock();
    while (*flag < want && dclock() - t0 < 60.0) {
    }
    CHECK(*flag >= want, "%s: the handler did not run", what);
}

int main(void) {
    long me = mynode(), n = numnodes();
    long right = (me + 1) % n, left = (me + n - 1) % n;
    long req[4], ans[4], mid, rq, len, i;

    /* isendrecv around the ring: ask the right neighbour, answer the left one. */
    rq = irecv(100, req, sizeof req);
    ans[0] = me * 10;
    mid = isendrecv(100, ans, sizeof(long), right, 0, 200, rep, sizeof rep);
    msgwait(rq);
    CHECK(infonode() == left && req[0] == left * 10, "isendrecv request from %ld", left);
    req[1] = req[0] + 1;
    csend(200, &req[1], sizeof(long), left, 0);
    len = _msgwait(mid);
    CHECK(len == sizeof(long) && infonode() == right && infotype() == 200, "isendrecv reply");
    CHECK(*(long *)rep == me * 10 + 1, "isendrecv reply %ld", *(long *)rep);

    /* msgmerge: node 0 takes one message of every other node under one id. */
    if (me == 0) {
        static long got[8];
        long m = -1, done = 0;
        for (i = 1; i < n; i++) m = msgmerge(m, irecvx(300, &got[i], sizeof(long), i, -1, NULL));
        while (!(done = msgdone(m))) {
        }
        for (i = 1; i < n; i++) CHECK(got[i] == i * i, "merged receive from %ld", i);
        CHECK(_msgmerge(-1, -1) == -1 && errno == EQMID, "msgmerge of nothing");
    } else {
        long v = me * me;
        long a = isend(300, &v, sizeof v, 0, 0), b = isend(301, &v, sizeof v, 0, 0);
        msgwait(msgmerge(a, b));
    }
    if (me == 0) {
        long v[8];
        for (i = 1; i < n; i++) crecv(301, &v[i], sizeof(long));
    }
    gsync();

    /* hsend: a one-copy and a zero-copy message to the right; hsendx with hparam. The
     * handlers run while this node computes without calling NX. */
    fill(big, BIG, 7 + me);
    fill(small, sizeof small, 8 + me);
    hsend(400, small, sizeof small, right, 0, on_sent);
    hsend(401, big, BIG, right, 0, on_sent);
    hsendx(402, small, 10, right, 0, on_sentx, 4242 + me);
    {
        unsigned char b1[100];
        crecvx(400, b1, sizeof b1, left, -1, NULL);
        CHECK(verify(b1, sizeof b1, 8 + left) < 0, "hsend small data");
        crecvx(401, bigin, BIG, left, -1, NULL);
        CHECK(infocount() == BIG && verify(bigin, BIG, 7 + left) < 0, "hsend big data");
        crecvx(402, b1, sizeof b1, left, -1, NULL);
        CHECK(infocount() == 10, "hsendx data");
    }
    spin_until(&hs_done, 3, "hsend");
    CHECK(hsx_param == 4242 + me, "hsendx hparam %ld", hsx_param);
    gsync();

    /* hsendrecv: node 0 asks node n-1, whose answer runs node 0's handler; first with a
     * one-copy request, then a zero-copy one, which must go on while node 0 computes. */
    if (me == 0) {
        long q = 77;
        hsendrecv(500, &q, sizeof q, n - 1, 0, 501, rep, sizeof rep, on_reply);
        spin_until(&hsr_count, 3, "hsendrecv");
        CHECK(hsr_count == 3 && hsr_node == n - 1 && memcmp(rep, "yes", 3) == 0,
              "hsendrecv reply %ld from %ld", hsr_count, hsr_node);
        hsr_count = -1;
        fill(big, BIG, 99);
        hsendrecv(502, big, BIG, n - 1, 0, 503, rep, sizeof rep, on_reply);
        spin_until(&hsr_count, 2, "zero-copy hsendrecv");
        CHECK(hsr_count == 2 && memcmp(rep, "ok", 2) == 0, "zero-copy hsendrecv reply");
    } else if (me == n - 1) {
        long q = 0;
        crecv(500, &q, sizeof q);
        CHECK(q == 77, "hsendrecv request");
        csend(501, "yes", 3, 0, 0);
        crecv(502, bigin, BIG);
        CHECK(infocount() == BIG && verify(bigin, BIG, 99) < 0, "zero-copy hsendrecv request");
        csend(503, "ok", 2, 0, 0);
    }
    gsync();

    /* gsendx to every other node. */
    if (me == 0) {
        long nodes[8], k = 0;
        for (i = 1; i < n; i++) nodes[k++] = i;
        CHECK(_gsendx(600, small, 5, nodes, k) == 0, "gsendx");
        nodes[0] = n + 3;
        CHECK(_gsendx(600, small, 5, nodes, k) == -1 && errno == EQNODE, "gsendx bad node");
    } else {
        unsigned char b1[8];
        crecv(600, b1, sizeof b1);
        CHECK(infocount() == 5 && infonode() == 0 && verify(b1, 5, 8) < 0, "gsendx data");
    }
    gsync();

    /* flushmsg: three type-700 messages go, the 701 stays. */
    if (me == 1) {
        csend(700, small, 10, 0, 0);
        csend(700, small, 20, 0, 0);
        csend(700, small, 30, 0, 0);
        csend(701, small, 40, 0, 0);
    } else if (me == 0) {
        long d;
        cprobe(701); /* sent last by node 1: the others are here */
        CHECK(infocount() == 40, "probe 701");
        d = _flushmsg(700, -1, -1);
        CHECK(d == 3, "flushmsg discarded %ld", d);
        CHECK(infocount() == 40, "flushmsg keeps the info");
        CHECK(iprobe(700) == 0 && iprobe(701) == 1, "flushmsg took the wrong ones");
        flushmsg(-1, 1, -1);
        CHECK(iprobe(-1) == 0, "flushmsg by node");
    }

    /* The underscore forms return -1 with NX's errno. */
    errno = 0;
    CHECK(_csend(1, small, 1, n + 1, 0) == -1 && errno == EQNODE, "_csend bad node");
    CHECK(_crecv(1000000000L, small, 1) == -1 && errno == EQTYPE, "_crecv bad type");
    CHECK(_msgwait(123456789) == -1 && errno == EQMID, "_msgwait bad id");
    CHECK(_msgdone(123456789) == -1 && errno == EQMID, "_msgdone bad id");
    CHECK(_msgignore(123456789) == -1 && errno == EQMID, "_msgignore bad id");
    CHECK(_setptype(-5) == -1 && errno == EQPTYPE, "_setptype");
    CHECK(_isendrecv(1, small, -1, right, 0, 2, rep, 1) == -1 && errno == EQLEN, "_isendrecv");
    CHECK(_hsend(1, small, 1, n, 0, on_sent) == -1 && errno == EQNODE, "_hsend bad node");
    CHECK(_hsendrecv(1, small, 1, right, -3, 2, rep, 1, on_reply) == -1 && errno == EQPTYPE,
          "_hsendrecv bad ptype");
    CHECK(_cprobex(-1, n + 2, -1, NULL) == -1 && errno == EQNODE, "_cprobex");
    CHECK(_iprobex(-1, -1, -7, NULL) == -1 && errno == EQPTYPE, "_iprobex");
    CHECK(_mynode() == me && _numnodes() == n && _myptype() == 0, "identity");
    CHECK(_nodedim() == nodedim() && _myhost() == -1 && _flick() == 0, "small calls");
    CHECK(_masktrap(1) == 0 && _masktrap(0) == 1, "_masktrap");
    CHECK(_dclock() > 0.0, "_dclock");
    gsync();
    printf("calls node %ld: ok\n", me);
    return 0;
}
