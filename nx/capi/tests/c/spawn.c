/* Process creation: started on its own (not under vmmc-run) as "spawn -sz 3 extra", the
 * program becomes the controlling process of an application of 3 nodes, forks them with
 * nx_nfork, waits for them with nx_waitall, then loads itself on 2 nodes with nx_loadve. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "nx.h"

#define PCHECK(c, what)                                                      \
    do {                                                                     \
        if (!(c)) {                                                          \
            fprintf(stderr, "spawn parent: check failed: %s (%s)\n", #c, what); \
            exit(2);                                                         \
        }                                                                    \
    } while (0)

static int node_main(const char *how, long ptype) {
    long me = mynode(), n = numnodes(), from = -1;
    double s = (double)me, w;
    csend(1, &me, sizeof me, (me + 1) % n, 0);
    crecv(1, &from, sizeof from);
    gdsum(&s, 1, &w);
    if (from != (me + n - 1) % n || s != (double)(n * (n - 1) / 2) || myptype() != ptype) {
        fprintf(stderr, "spawn %s node %ld: wrong: from %ld sum %g ptype %ld\n", how, me, from,
                s, myptype());
        return 2;
    }
    printf("spawn %s node %ld of %ld: ok\n", how, me, n);
    return 0;
}

int main(int argc, char **argv) {
    long size, r, pids[8], one[1];
    char *av[3];
    if (argc > 1 && strcmp(argv[1], "loaded") == 0) return node_main("load", 3);
    size = nx_initve(NULL, 0, NULL, &argc, argv);
    PCHECK(size == 3, "size from -sz");
    PCHECK(argc == 2 && strcmp(argv[1], "extra") == 0 && argv[2] == NULL, "-sz taken out");
    fflush(stdout);
    r = nx_nfork(NULL, -1, 4, pids);
    if (r == 0) return node_main("nfork", 4);
    PCHECK(r == 3 && pids[0] > 0 && pids[2] > 0, "nx_nfork");
    PCHECK(nx_waitall() == 0, "nx_waitall");
    errno = 0;
    PCHECK(nx_waitall() == -1 && errno == EQNOTSUP, "nothing more to wait for");

    PCHECK(nx_initve(NULL, 2, NULL, NULL, NULL) == 2, "second application");
    one[0] = 0;
    PCHECK(nx_nfork(one, 1, 0, pids) == -1 && errno == EQNOTSUP, "one node alone");
    PCHECK(nx_initve("mypart", 2, NULL, NULL, NULL) == -1 && errno == EQNOTSUP, "partition");
    av[0] = argv[0];
    av[1] = "loaded";
    av[2] = NULL;
    r = nx_loadve(NULL, -1, 3, pids, argv[0], av, NULL);
    PCHECK(r == 2, "nx_loadve");
    PCHECK(nx_waitall() == 0, "nx_waitall after nx_loadve");
    /* A message-passing call makes this process a job of one node: it cannot create more. */
    PCHECK(_mynode() == 0 && _numnodes() == 1, "alone, a job of one node");
    PCHECK(nx_initve(NULL, 2, NULL, NULL, NULL) == -1 && errno == EQNOTSUP, "a node creates none");
    printf("spawn parent: ok\n");
    return 0;
}
