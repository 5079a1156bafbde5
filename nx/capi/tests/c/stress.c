/* 100,000 messages of random sizes and types between all nodes, received with random
 * selectors: every message arrives once, intact, and in order per (sender, type). */
#include "nx.h"
#include "check.h"

#define TYPES 4
#define MAXLEN 100000

static unsigned long mix(unsigned long x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdUL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53UL;
    return x ^ (x >> 33);
}
/* Message k from src: its destination, type and length. */
static long n_nodes, per_node;
static long dest_of(long src, long k) {
    long d = (long)(mix(src * 1000003UL + k) % (n_nodes - 1));
    return d >= src ? d + 1 : d;
}
static long type_of(long src, long k) { return 1 + (long)(mix(src * 7919UL + k * 31UL) % TYPES); }
static long len_of(long src, long k) {
    unsigned long h = mix(src * 104729UL + k * 13UL), r = h % 1000;
    if (r < 900) return (long)((h >> 10) % 257);
    if (r < 985) return 257 + (long)((h >> 10) % 8000);
    return 8193 + (long)((h >> 10) % (MAXLEN - 8193));
}
static unsigned long seed_of(long src, long k) { return (unsigned long)src << 32 | (unsigned long)k; }

int main(void) {
    long me = mynode();
    n_nodes = numnodes();
    long total = getenv("STRESS_TOTAL") ? atol(getenv("STRESS_TOTAL")) : 100000;
    per_node = total / n_nodes;
    /* For each (src, type): the message indices meant for me, in send order. */
    long *idx[64][TYPES], cnt[64][TYPES], pos[64][TYPES], remaining = 0;
    for (long s = 0; s < n_nodes; s++)
        for (int t = 0; t < TYPES; t++) {
            idx[s][t] = malloc(sizeof(long) * per_node);
            cnt[s][t] = pos[s][t] = 0;
        }
    for (long s = 0; s < n_nodes; s++)
        if (s != me)
            for (long k = 0; k < per_node; k++)
                if (dest_of(s, k) == me) {
                    long t = type_of(s, k) - 1;
                    idx[s][t][cnt[s][t]++] = k;
                    remaining++;
                }
    unsigned char *out = malloc(MAXLEN), *in = malloc(MAXLEN);
    unsigned long rnd = 12345 + me;
    long info[4], received = 0;
    long k = 0;
    while (k < per_node || remaining > 0) {
        if (k < per_node) {
            long len = len_of(me, k);
            fill(out, len, seed_of(me, k));
            csend(type_of(me, k), out, len, dest_of(me, k), 0);
            k++;
            if (!iprobe(-1)) continue;
        }
        if (remaining == 0) continue;
        rnd = mix(rnd);
        if (k < per_node) {
            /* Still sending (so are the others): only selectors that the message just
             * probed satisfies, or a receive could wait for a message not sent yet. */
            long pt = infotype(), pn = infonode(), other = pt % TYPES + 1;
            switch (rnd % 4) {
            case 0: crecvx(-1, in, MAXLEN, -1, -1, info); break;
            case 1: crecvx(pt, in, MAXLEN, -1, -1, info); break;
            case 2: crecvx(pt, in, MAXLEN, pn, -1, info); break;
            default: crecvx(~other, in, MAXLEN, pn, -1, info); break;
            }
        } else {
            /* A selector that some remaining message satisfies. */
            long s, t;
            do { s = (long)(rnd % n_nodes); t = (long)((rnd >> 8) % TYPES); rnd = mix(rnd); }
            while (pos[s][t] == cnt[s][t]);
            long other = 0;
            for (int u = 0; u < TYPES; u++) if (u != t) other += cnt[s][u] - pos[s][u];
            switch (rnd % 4) {
            case 0: crecvx(-1, in, MAXLEN, -1, -1, info); break;
            case 1: crecvx(t + 1, in, MAXLEN, s, -1, info); break;
            case 2:
                if (other > 0) { crecvx(~(t + 1), in, MAXLEN, s, -1, info); break; }
                /* fall through */
            default: crecvx(t + 1, in, MAXLEN, -1, -1, info); break;
            }
        }
        long src = info[2], ty = info[0] - 1;
        CHECK(src >= 0 && src < n_nodes && src != me && ty >= 0 && ty < TYPES, "bad info");
        CHECK(pos[src][ty] < cnt[src][ty], "duplicate or unexpected message from %ld type %ld", src, ty + 1);
        long want = idx[src][ty][pos[src][ty]++];
        CHECK(info[1] == len_of(src, want), "from %ld type %ld: length %ld, expected message %ld (%ld bytes): lost or out of order",
              src, ty + 1, info[1], want, len_of(src, want));
        long bad = verify(in, info[1], seed_of(src, want));
        CHECK(bad < 0, "from %ld message %ld: byte %ld corrupted", src, want, bad);
        remaining--;
        received++;
    }
    gsync();
    CHECK(iprobe(-1) == 0, "a message too many");
    printf("stress node %ld: ok (sent %ld, received %ld)\n", me, per_node, received);
    return 0;
}
