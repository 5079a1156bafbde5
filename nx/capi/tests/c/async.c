/* isend/irecv overlap: every receive posted, then every send, completed with msgdone and
 * msgwait in mixed order; irecvx info; msgcancel and msgignore. */
#include "nx.h"
#include "check.h"

#define K 6

int main(void) {
    long me = mynode(), other = 1 - me;
    static const long sizes[K] = {5, 16384, 16385, 100000, 1 << 20, 77};
    unsigned char *out[K], *in[K];
    long rmid[K], smid[K], info[K][4];
    for (int k = 0; k < K; k++) {
        out[k] = malloc(sizes[k] + 1);
        in[k] = malloc(sizes[k] + 1);
        CHECK(out[k] && in[k], "malloc");
        fill(out[k], sizes[k], me * 10 + k);
        rmid[k] = irecvx(200 + k, in[k], sizes[k], other, -1, info[k]);
    }
    for (int k = K - 1; k >= 0; k--) smid[k] = isend(200 + k, out[k], sizes[k], other, 0);
    int done[K] = {0}, left = K;
    while (left > 0) {
        for (int k = 0; k < K; k++) {
            if (!done[k] && msgdone(rmid[k])) {
                done[k] = 1;
                left--;
                CHECK(info[k][0] == 200 + k && info[k][1] == sizes[k] && info[k][2] == other,
                      "info of %d", k);
                long bad = verify(in[k], sizes[k], other * 10 + k);
                CHECK(bad < 0, "message %d: byte %ld", k, bad);
            }
        }
    }
    for (int k = 0; k < K; k++) msgwait(smid[k]);
    CHECK(_msgdone(rmid[0]) == -1, "a released id");
    /* A receive nobody sends to, cancelled; one ignored that completes later. */
    char c[8];
    long m = irecv(500, c, 8);
    CHECK(msgdone(m) == 0, "nothing sent yet");
    msgcancel(m);
    long m2 = irecv(501, c, 8);
    msgignore(m2);
    csend(501, "ignored", 8, other, 0);
    gsync();
    printf("async node %ld: ok\n", me);
    return 0;
}
