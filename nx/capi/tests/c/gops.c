/* Every global operation against the sequential result computed locally. */
#include "nx.h"
#include "check.h"
#include <errno.h>

#define M 5

static double dv(long r, int k) { return 0.25 * (r * 7 + k) + 1.0 / (k + 3); }
static long lv(long r, int k) { return (r + 3) * (k + 1) - 2 * k + (r << (k + 4)); }

static long concat(void *x, void *y) {
    char *a = x, *b = y;
    for (int i = 0; i < 3; i++) a[i] = (char)(a[i] * 10 + b[i]);
    return 0;
}

int main(void) {
    long me = mynode(), n = numnodes();
    double x[M], want[M], work[M];
    long l[M], lw[M], lwork[M];
    float f[M], fw[M], fwork[M];
#define DOP(call, init, comb)                                               \
    do {                                                                    \
        for (int k = 0; k < M; k++) { x[k] = dv(me, k); want[k] = dv(0, k); } \
        for (long r = 1; r < n; r++)                                        \
            for (int k = 0; k < M; k++) { double a = want[k], b = dv(r, k); want[k] = (comb); } \
        call(x, M, work);                                                   \
        for (int k = 0; k < M; k++) CHECK(x[k] == want[k], #call " [%d]: %g vs %g", k, x[k], want[k]); \
    } while (0)
#define LOP(call, comb)                                                     \
    do {                                                                    \
        for (int k = 0; k < M; k++) { l[k] = lv(me, k); lw[k] = lv(0, k); } \
        for (long r = 1; r < n; r++)                                        \
            for (int k = 0; k < M; k++) { long a = lw[k], b = lv(r, k); lw[k] = (comb); } \
        call(l, M, lwork);                                                  \
        for (int k = 0; k < M; k++) CHECK(l[k] == lw[k], #call " [%d]: %ld vs %ld", k, l[k], lw[k]); \
    } while (0)
    DOP(gdsum, 0, a + b);
    DOP(gdprod, 0, a * b);
    DOP(gdhigh, 0, a > b ? a : b);
    DOP(gdlow, 0, a < b ? a : b);
    LOP(gisum, a + b);
    LOP(giprod, a * b);
    LOP(gihigh, a > b ? a : b);
    LOP(gilow, a < b ? a : b);
    LOP(giand, a & b);
    LOP(gior, a | b);
    LOP(gixor, a ^ b);
    LOP(_gisum, a + b);
    LOP(_gixor, a ^ b);
    for (int k = 0; k < M; k++) l[k] = (k == 0) ? 1 : (k == 1) ? 0 : (k == 2) ? (me == 0) : (k == 3) ? me + 7 : (me == n - 1) * 5;
    gland(l, M, lwork);
    CHECK(l[0] == 1 && l[1] == 0 && l[2] == (n == 1) && l[3] == 1 && l[4] == (n == 1), "gland");
    for (int k = 0; k < M; k++) l[k] = (k == 0) ? 1 : (k == 1) ? 0 : (k == 2) ? (me == 0) : (k == 3) ? me + 7 : (me == n - 1) * 5;
    glor(l, M, lwork);
    CHECK(l[0] == 1 && l[1] == 0 && l[2] == 1 && l[3] == 1 && l[4] == 1, "glor");
    for (int k = 0; k < M; k++) l[k] = (k == 0) ? 1 : (k == 1) ? 0 : (k == 2) ? (me == 0) : (k == 3) ? me + 7 : (me == n - 1) * 5;
    CHECK(_glxor(l, M, lwork) == 0, "_glxor");
    CHECK(l[0] == (n % 2) && l[1] == 0 && l[2] == 1 && l[3] == (n % 2) && l[4] == 1, "glxor");
    CHECK(_gdsum(NULL, 3, NULL) == -1 && errno == EQLEN, "_gdsum of NULL");
    for (int k = 0; k < M; k++) { f[k] = (float)dv(me, k); fw[k] = (float)dv(0, k); }
    for (long r = 1; r < n; r++) for (int k = 0; k < M; k++) fw[k] += (float)dv(r, k);
    gssum(f, M, fwork);
    for (int k = 0; k < M; k++) CHECK(f[k] == fw[k], "gssum [%d]", k);
    for (int k = 0; k < M; k++) { f[k] = (float)dv(me, k); fw[k] = (float)dv(0, k); }
    for (long r = 1; r < n; r++) for (int k = 0; k < M; k++) fw[k] *= (float)dv(r, k);
    gsprod(f, M, fwork);
    for (int k = 0; k < M; k++) CHECK(f[k] == fw[k], "gsprod [%d]", k);
    for (int k = 0; k < M; k++) { f[k] = (float)dv(me, k); fw[k] = (float)dv(n - 1, k); }
    gshigh(f, M, fwork);
    for (int k = 0; k < M; k++) CHECK(f[k] == fw[k], "gshigh [%d]", k);
    for (int k = 0; k < M; k++) { f[k] = (float)dv(me, k); fw[k] = (float)dv(0, k); }
    gslow(f, M, fwork);
    for (int k = 0; k < M; k++) CHECK(f[k] == fw[k], "gslow [%d]", k);
    char c[3] = {(char)(me + 1), (char)(me + 1), (char)(me + 1)}, cw = 0;
    for (long r = 0; r < n; r++) cw = (char)(cw * 10 + r + 1);
    gopf(c, 3, NULL, concat);
    CHECK(c[0] == cw && c[2] == cw, "gopf: %d vs %d", c[0], cw);
    char mine[8], all[64];
    long lens[8], total = 0, cnt = 0;
    for (long r = 0; r < n; r++) { lens[r] = r + 1; total += r + 1; }
    memset(mine, 'a' + (int)me, sizeof mine);
    gcol(mine, me + 1, all, sizeof all, &cnt);
    CHECK(cnt == total, "gcol count %ld", cnt);
    for (long r = 0, o = 0; r < n; o += r + 1, r++)
        for (long i = 0; i <= r; i++) CHECK(all[o + i] == 'a' + r, "gcol part %ld", r);
    memset(all, 0, sizeof all);
    gcolx(mine, lens, all);
    CHECK(all[0] == 'a' && all[total - 1] == 'a' + n - 1, "gcolx");
    CHECK(iprobe(-1) == 0, "global operations leave no user message");
    gsync();
    printf("gops node %ld: ok\n", me);
    return 0;
}
