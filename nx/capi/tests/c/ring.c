/* A token around a ring of all nodes, at sizes on both sides of the protocol threshold. */
#include "nx.h"
#include "check.h"

int main(void) {
    long me = mynode(), n = numnodes();
    long right = (me + 1) % n, left = (me + n - 1) % n;
    static const long sizes[] = {0, 1, 7, 64, 1000, 16383, 16384, 16385, 65536, 1 << 20};
    long max = 1 << 20;
    unsigned char *out = malloc(max), *in = malloc(max + 16);
    CHECK(out && in, "malloc");
    for (int round = 0; round < 3; round++) {
        for (unsigned k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            long len = sizes[k], type = 100 + k;
            fill(out, len, me * 1000 + k);
            if (me == 0) {
                csend(type, out, len, right, 0);
                crecv(type, in, max + 16);
            } else {
                crecv(type, in, max + 16);
                csend(type, out, len, right, 0);
            }
            CHECK(infocount() == len, "size %ld: got %ld", len, infocount());
            CHECK(infonode() == left, "from %ld", infonode());
            CHECK(infotype() == type, "type %ld", infotype());
            long bad = verify(in, len, left * 1000 + k);
            CHECK(bad < 0, "size %ld: byte %ld wrong", len, bad);
        }
    }
    gsync();
    printf("ring node %ld: ok\n", me);
    return 0;
}
