/* An NX program as the 1990s wrote them: K&R function definitions, the calls redeclared
 * without prototypes, char * buffers, int arguments and int-typed handlers. Built with
 * -std=gnu89 and with the compiler's default. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "nx.h"

extern long mynode(), numnodes(), infocount(), infonode(), irecv();
extern double dclock();
extern void csend(), crecv(), gdsum(), gsync(), msgwait(), hrecv();

static int hcount = -1, htype = -1;
static char hbuf[32];

static void fail(what)
char *what;
{
    fprintf(stderr, "knr node %ld: %s\n", mynode(), what);
    exit(2);
}

/* A handler with int parameters, defined K&R-style. */
static void handler(type, count, node, ptype)
int type, count, node, ptype;
{
    htype = type;
    hcount = count;
}

static long fold(x, y)
char *x, *y;
{
    long a, b;
    memcpy((char *)&a, x, sizeof a);
    memcpy((char *)&b, y, sizeof b);
    a = a * 10 + b;
    memcpy(x, (char *)&a, sizeof a);
    return 0;
}

int main(argc, argv)
int argc;
char **argv;
{
    int me, n, right, left, i, mid;
    double x[2], work[2], t0;
    char sbuf[64], rbuf[64];
    long v;

    me = mynode();
    n = numnodes();
    right = (me + 1) % n;
    left = (me + n - 1) % n;
    hrecv(60, hbuf, sizeof hbuf, handler);
    gsync();
    for (i = 0; i < 64; i++) sbuf[i] = (char)(me * 3 + i);
    csend(5, sbuf, 40, right, 0); /* int arguments */
    crecv(5, rbuf, 64);
    if (infocount() != 40 || infonode() != left || rbuf[39] != (char)(left * 3 + 39))
        fail("ring");
    x[0] = me;
    x[1] = 1.0;
    gdsum(x, 2, work);
    if (x[0] != n * (n - 1) / 2 || x[1] != n) fail("gdsum");
    mid = irecv(6, (char *)x, sizeof x);
    csend(6, (char *)work, sizeof work, right, 0);
    msgwait(mid);
    v = me + 1;
    gopf((char *)&v, (long)sizeof v, (char *)0, fold);
    {
        long want = 0;
        for (i = 0; i < n; i++) want = want * 10 + i + 1;
        if (v != want) fail("gopf");
    }
    csend(60, "hello", 5, right, 0);
    t0 = dclock();
    while (htype < 0 && dclock() - t0 < 30.0) flick();
    if (htype != 60 || hcount != 5 || memcmp(hbuf, "hello", 5) != 0) fail("handler");
    gsync();
    printf("knr node %d: ok\n", me);
    return 0;
}
