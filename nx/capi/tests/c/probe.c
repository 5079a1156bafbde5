/* Probes and the info calls, with process types. */
#include "nx.h"
#include "check.h"

int main(void) {
    long me = mynode();
    CHECK(numnodes() == 3, "3 nodes");
    CHECK(myptype() == 0, "ptype 0 at start");
    setptype(40 + me);
    CHECK(myptype() == 40 + me, "setptype");
    if (me != 0) {
        char b[64];
        memset(b, (int)me, sizeof b);
        csend(7 + me, b, 10 * me, 0, 0);
    } else {
        long info[4];
        cprobex(-1, 2, -1, info);
        CHECK(info[0] == 9 && info[1] == 20 && info[2] == 2 && info[3] == 42, "probe node 2");
        CHECK(infotype() == 9 && infocount() == 20 && infonode() == 2 && infoptype() == 42,
              "info after probe");
        cprobe(8);
        CHECK(infonode() == 1 && infocount() == 10 && infoptype() == 41, "probe type 8");
        CHECK(iprobe(5) == 0, "no type 5");
        CHECK(iprobex(-1, 1, 40, info) == 0, "ptype selection");
        CHECK(iprobex(-1, 1, 41, info) == 1 && info[0] == 8, "ptype 41");
        char b[64];
        crecvx(-1, b, sizeof b, -1, 42, info);
        CHECK(info[2] == 2 && info[1] == 20 && b[19] == 2, "receive by ptype");
        char small[4];
        CHECK(_crecv(8, small, 4) == -1, "too long must fail");
        CHECK(small[0] == 1 && small[3] == 1 && infocount() == 10, "truncated start");
        csend(3, "self", 4, 0, 0);
        CHECK(iprobe(3) == 1 && infonode() == 0, "message to self");
        crecv(3, b, sizeof b);
        CHECK(memcmp(b, "self", 4) == 0, "self contents");
    }
    gsync();
    printf("probe node %ld: ok\n", me);
    return 0;
}
