/* Blocking zero-copy sends whose receivers are not receiving yet must return on their safe
 * copies. Every node csends to the next, then crecvs (its receiver is sending too): long
 * messages (a safe copy of many pages), then many short ones. Then node 0 csends messages
 * one at a time to node 1 while node 1 is outside NX: each send's wait for a reply that
 * cannot come ends when its grace does, though nothing wakes it then. */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include "nx.h"
#include "check.h"

static void exchange(long len, long rounds, unsigned char *out, unsigned char *in, int check) {
    long me = mynode(), n = numnodes();
    long next = (me + 1) % n, prev = (me + n - 1) % n;
    for (long r = 0; r < rounds; r++) {
        if (check) fill(out, len, r * 64 + me);
        csend(5, out, len, next, 0);
        crecv(5, in, len);
        CHECK(infocount() == len && infonode() == prev, "round %ld: %ld bytes from %ld", r,
              infocount(), infonode());
        if (check) {
            long bad = verify(in, len, r * 64 + prev);
            CHECK(bad < 0, "round %ld of %ld bytes: byte %ld wrong", r, len, bad);
        }
    }
}

/* A FIFO of the job's (its ranks are children of one launcher) named `name`. */
static void fifo(char *path, size_t size, const char *name) {
    snprintf(path, size, "/tmp/nx-exchange-%ld-%s", (long)getppid(), name);
    CHECK(mkfifo(path, 0600) == 0 || errno == EEXIST, "mkfifo %s", path);
}

/* Node 0 csends `count` messages to node 1 one at a time, each while node 1 is outside NX
 * (blocked reading a FIFO): node 0 says on a FIFO that its csend returned, node 1 receives
 * the message and says on another that node 0 may go on. */
static void lone_sends(long len, long count, unsigned char *out, unsigned char *in) {
    long me = mynode();
    if (me > 1) return;
    char sent[96], again[96], w = 'x';
    fifo(sent, sizeof sent, "sent");
    fifo(again, sizeof again, "again");
    /* Every message is the same pattern but for its number in its first bytes. */
    fill(out, len, 77);
    if (me == 0) {
        int s = open(sent, O_WRONLY), a = open(again, O_RDONLY);
        CHECK(s >= 0 && a >= 0, "opening the FIFOs");
        for (long i = 0; i < count; i++) {
            memcpy(out, &i, sizeof i);
            csend(6, out, len, 1, 0);
            CHECK(write(s, &w, 1) == 1 && read(a, &w, 1) == 1, "FIFOs, message %ld", i);
        }
        close(s);
        close(a);
    } else {
        int s = open(sent, O_RDONLY), a = open(again, O_WRONLY);
        CHECK(s >= 0 && a >= 0, "opening the FIFOs");
        unlink(sent);
        unlink(again);
        for (long i = 0; i < count; i++) {
            CHECK(read(s, &w, 1) == 1, "FIFO, message %ld", i);
            crecv(6, in, len);
            long got;
            memcpy(&got, in, sizeof got);
            CHECK(infocount() == len && got == i, "message %ld: got %ld", i, got);
            CHECK(memcmp(in + sizeof i, out + sizeof i, len - sizeof i) == 0,
                  "message %ld: data wrong", i);
            CHECK(write(a, &w, 1) == 1, "FIFO, message %ld", i);
        }
        close(s);
        close(a);
    }
}

int main(void) {
    long big = 16L << 20, small = 64L << 10;
    unsigned char *out = malloc(big), *in = malloc(big);
    CHECK(out && in, "malloc");
    gsync();
    exchange(big, 3, out, in, 1);
    gsync();
    exchange(small, 3000, out, in, 0);
    exchange(small, 10, out, in, 1);
    gsync();
    lone_sends(1L << 20, 3000, out, in);
    gsync();
    printf("exchange node %ld: ok\n", mynode());
    return 0;
}
