/* 16 MiB messages both ways, and into a short buffer. */
#include "nx.h"
#include "check.h"

int main(void) {
    long me = mynode(), other = 1 - me;
    long len = 16L << 20;
    unsigned char *out = malloc(len), *in = malloc(len);
    CHECK(out && in, "malloc");
    fill(out, len, 7 + me);
    double t0 = dclock();
    if (me == 0) {
        csend(1, out, len, other, 0);
        crecv(2, in, len);
    } else {
        crecv(1, in, len);
        csend(2, out, len, other, 0);
    }
    double t = dclock() - t0;
    CHECK(infocount() == len, "length %ld", infocount());
    long bad = verify(in, len, 7 + other);
    CHECK(bad < 0, "byte %ld wrong", bad);
    if (me == 0) {
        csend(3, out, len, other, 0);
    } else {
        unsigned char small[1001];
        CHECK(_crecv(3, small, 1001) == -1, "a 16 MiB message into 1001 bytes must fail");
        CHECK(infocount() == len && verify(small, 1001, 7) < 0, "start of a long message");
    }
    gsync();
    printf("big node %ld: ok (%.1f MB/s)\n", me, 2.0 * len / t / 1e6);
    return 0;
}
