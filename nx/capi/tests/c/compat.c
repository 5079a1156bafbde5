/* The compatibility calls, the application calls, and the calls that cannot exist on Linux
 * (they return -1 with errno EQNOTSUP, and nx_perror says why). */
#include <errno.h>
#include <unistd.h>
#include "nx.h"
#include "check.h"

int main(int argc, char **argv) {
    long me = mynode(), n = numnodes(), i, rows = 0, cols = 0, pids[8];
    unsigned long m0, m1, size = 0;
    double d0;
    esize_t h0, h1;
    nx_nodes_t list = NULL;

    CHECK(mypid() == 0, "mypid is the ptype");
    setptype(5);
    CHECK(mypid() == 5 && myptype() == 5, "mypid after setptype");
    for (i = 0; i < 5000; i++) {
        long g = gray(i), h = gray(i + 1) ^ g;
        CHECK(ginv(g) == i && _ginv(_gray(i)) == i, "ginv(gray(%ld))", i);
        CHECK(h != 0 && (h & (h - 1)) == 0, "gray codes of %ld and %ld differ in one bit", i, i + 1);
    }
    m0 = mclock();
    hwclock(&h0);
    d0 = dclock();
    while (dclock() - d0 < 0.05) {
    }
    m1 = _mclock();
    _hwclock(&h1);
    CHECK(m1 - m0 >= 45 && m1 - m0 < 5000, "mclock advanced %lu ms", m1 - m0);
    {
        double t0 = (double)h0.shigh * 4294967296.0 + (double)h0.slow;
        double t1 = (double)h1.shigh * 4294967296.0 + (double)h1.slow;
        CHECK(t1 - t0 >= 0.045 * HWHZ && t1 - t0 < 5.0 * HWHZ, "hwclock advanced %g", t1 - t0);
        CHECK(h0.slow >= 0 && h0.slow <= 0xffffffffL, "hwclock low word");
    }
    CHECK(mypart(&rows, &cols) == n && rows == 1 && cols == n, "mypart");
    CHECK(nx_app_rect(&rows, &cols) == 0 && rows == 1 && cols == n, "nx_app_rect");
    CHECK(nx_app_nodes(0, &list, &size) == 0 && size == (unsigned long)n, "nx_app_nodes");
    for (i = 0; i < n; i++) CHECK(list[i] == i, "nx_app_nodes[%ld]", i);
    free(list);
    CHECK(nx_app_nodes(getpid(), &list, &size) == 0, "nx_app_nodes of this process");
    free(list);
    CHECK(nx_app_nodes(1, &list, &size) == -1 && errno == EQNOTSUP, "nx_app_nodes of init");
    CHECK(_led(1) == 0 && _nodedim() == nodedim(), "led, nodedim");
    led(0);

    /* infopid: the sender's ptype. */
    csend(9, "x", 1, (me + 1) % n, 0);
    crecv(9, pids, sizeof pids);
    CHECK(infopid() == 5 && _infopid() == 5 && infoptype() == 5, "infopid");

    /* What cannot exist here. */
    errno = 0;
    CHECK(nx_initve(NULL, 0, NULL, &argc, argv) == -1 && errno == EQNOTSUP, "nx_initve");
    if (me == 0) nx_perror("nx_initve");
    CHECK(nx_nfork(NULL, -1, 0, pids) == -1 && errno == EQNOTSUP, "nx_nfork");
    CHECK(nx_load(NULL, -1, 0, pids, argv[0]) == -1 && errno == EQNOTSUP, "nx_load");
    CHECK(nx_loadve(NULL, -1, 0, pids, argv[0], argv, NULL) == -1, "nx_loadve");
    CHECK(nx_initve_rect("", 0, 1, 1, "", &argc, argv) == -1, "nx_initve_rect");
    CHECK(nx_initve_attr("", &argc, argv, 0) == -1, "nx_initve_attr");
    CHECK(load(argv[0], 0, 0) == -1 && _load(argv[0], 0, 0) == -1, "load");
    errno = 0;
    CHECK(nx_waitall() == -1 && errno == EQNOTSUP, "nx_waitall");
    if (me == 0) nx_perror("nx_waitall");
    CHECK(nx_mkpart("p", 2, 0) == -1 && errno == EQNOTSUP, "nx_mkpart");
    if (me == 0) nx_perror("nx_mkpart");
    CHECK(nx_rmpart("p", 0, 0) == -1 && nx_pri(0, 1) == -1, "nx_rmpart, nx_pri");
    CHECK(nx_chpart_name("p", "q") == -1 && nx_chpart_epl("p", 1) == -1, "nx_chpart_*");
    CHECK(nx_pspart("p", NULL, &size) == -1 && nx_mkpart_attr("p", 0) == -1, "nx_pspart");
    CHECK(restrictvol(0, 0, NULL) == -1 && errno == EQNOTSUP, "restrictvol");
    if (n > 1) {
        CHECK(_killproc((me + 1) % n, 0) == -1 && errno == EQNOTSUP, "_killproc of another node");
        if (me == 0) nx_perror("killproc");
        CHECK(_killcube(-1, -1) == -1 && errno == EQNOTSUP, "_killcube of every node");
    }
    CHECK(_killproc(n + 4, 0) == -1 && errno == EQNODE, "_killproc of no node");
    CHECK(_killproc(me, 77) == 0, "_killproc of no process of that type");
    gsync();
    printf("compat node %ld: ok\n", me);
    return 0;
}
