/* Every node leaves with zero-copy messages for the next node that it never receives
 * (a csend and an isend, in a cycle): NX discards them at exit, and no node may wait at
 * exit for a node that is leaving too. A message that is received still arrives whole.
 * Then node 0 fills node 1's packet buffers with messages node 1 never receives and leaves
 * while node 1, outside NX, waits for it to be gone (the end of a FIFO). */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include "nx.h"
#include "check.h"

int main(void) {
    long me = mynode(), n = numnodes();
    long len = 1L << 20, next = (me + 1) % n, prev = (me + n - 1) % n;
    unsigned char *a = malloc(len), *b = malloc(len), *in = malloc(len);
    CHECK(a && b && in, "malloc");
    fill(a, len, 10 + me);
    fill(b, len, 20 + me);
    csend(5, a, len, next, 0);
    msgignore(isend(6, a, len, next, 0));
    /* One message that is received: from the previous node, sent after the others. */
    csend(7, b, len, next, 0);
    crecv(7, in, len);
    long bad = verify(in, len, 20 + prev);
    CHECK(infocount() == len && bad < 0, "byte %ld wrong", bad);
    printf("exit_unreceived node %ld: ok\n", me);
    fflush(stdout);
    return 0;
}
