/* A receiver that dies: its senders fail with a clear error instead of hanging. Node 1 takes
 * one message and is killed; node 0 keeps sending small messages to it (csend must end the
 * process with an NX error); node 2 waits for a zero-copy send to it and for a message from it
 * (_msgwait and _crecvx return -1 with errno EQPEER). */
#include "nx.h"
#include "check.h"
#include <errno.h>
#include <signal.h>

int main(void) {
    long me = mynode();
    char b[256];
    memset(b, 1, sizeof b);
    gsync(); /* every node has joined before node 1 dies */
    if (me == 1) {
        crecv(1, b, sizeof b);
        raise(SIGKILL);
    } else if (me == 0) {
        for (long i = 0; i < 10000000; i++) csend(1, b, sizeof b, 1, 0);
        printf("dead node 0: sent everything to a dead node\n");
        return 3;
    } else {
        long len = 4L << 20, info[4];
        char *big = calloc(1, len);
        /* The scout fails at once if node 1 is already gone, else the wait for its reply. */
        long r = _isend(2, big, len, 1, 0);
        if (r >= 0) r = _msgwait(r);
        CHECK(r == -1 && errno == EQPEER, "large send to a dead node: %ld, errno %d (%s)", r,
              errno, nx_strerror(errno));
        r = _crecvx(5, b, sizeof b, 1, -1, info);
        CHECK(r == -1 && errno == EQPEER, "receive from a dead node: %ld, errno %d (%s)", r,
              errno, nx_strerror(errno));
        printf("dead node 2: ok (%s)\n", nx_strerror(errno));
        return 0;
    }
    return 0;
}
