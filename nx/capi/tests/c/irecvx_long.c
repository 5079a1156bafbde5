/* irecvx of a message too long for its buffer: msgwait (or msgdone) fails with EQMSGLONG
 * and still fills the info array (type, whole length, node, ptype), as NX does; one-copy
 * and zero-copy messages (run with a threshold under 64 KiB). */
#include <errno.h>
#include "nx.h"
#include "check.h"

int main(void) {
    long me = mynode(), big = 64L << 10;
    unsigned char *buf = malloc(big);
    CHECK(buf, "malloc");
    long lens[2] = {100, big};
    for (int k = 0; k < 2; k++) {
        for (int done = 0; done < 2; done++) {
            long t = 10 + 2 * k + done, len = lens[k];
            if (me == 1) {
                long info[4] = {-1, -1, -1, -1};
                long m = irecvx(t, buf, 8, -1, -1, info);
                long r;
                if (done) {
                    while ((r = _msgdone(m)) == 0) {
                    }
                } else {
                    r = _msgwait(m);
                }
                CHECK(r == -1 && errno == EQMSGLONG, "type %ld: %ld errno %d", t, r, errno);
                CHECK(info[0] == t && info[1] == len && info[2] == 0 && info[3] == 0,
                      "type %ld: info %ld %ld %ld %ld", t, info[0], info[1], info[2], info[3]);
                CHECK(verify(buf, 8, t) < 0, "type %ld: the first bytes", t);
                CHECK(_msgwait(m) == -1 && errno == EQMID, "type %ld: the id is released", t);
            } else if (me == 0) {
                fill(buf, len, t);
                csend(t, buf, len, 1, 0);
            }
        }
    }
    gsync();
    printf("irecvx_long node %ld: ok\n", me);
    return 0;
}
