/* libtirpc TCP client for the tcp_bench example and bench-rpc. Usage: bench_client PORT PROG SIZE COUNT.
 * SIZE 0 calls the null procedure, otherwise echoes SIZE bytes. Prints the median nanoseconds
 * per call (the median, not the mean: the machine may be shared). */
#include <rpc/rpc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>

struct blob {
    u_int len;
    char *data;
};

static bool_t xdr_blob(XDR *x, struct blob *b)
{
    return xdr_bytes(x, &b->data, &b->len, ~0u);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc != 5)
        return 2;
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((unsigned short)atoi(argv[1]));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    u_long prog = strtoul(argv[2], NULL, 0);
    u_int size = (u_int)atoi(argv[3]);
    long count = atol(argv[4]);
    int sock = RPC_ANYSOCK;
    CLIENT *clnt = clnttcp_create(&addr, prog, 1, &sock, 0, 0);
    if (clnt == NULL) {
        clnt_pcreateerror("bench_client");
        return 1;
    }
    struct timeval timeout = {25, 0};
    struct blob in = {size, malloc(size ? size : 1)};
    memset(in.data, 0x5a, size);
    double *lat = malloc(sizeof(double) * (count > 0 ? count : 1));
    for (long i = -count / 10 - 1; i < count; i++) {
        double start = now_ns();
        enum clnt_stat st;
        if (size == 0) {
            st = clnt_call(clnt, 0, (xdrproc_t)xdr_void, NULL, (xdrproc_t)xdr_void, NULL, timeout);
        } else {
            struct blob out = {0, NULL};
            st = clnt_call(clnt, 1, (xdrproc_t)xdr_blob, (char *)&in, (xdrproc_t)xdr_blob,
                           (char *)&out, timeout);
            if (st == RPC_SUCCESS && out.len != size) {
                fprintf(stderr, "echo returned %u bytes\n", out.len);
                return 1;
            }
            xdr_free((xdrproc_t)xdr_blob, (char *)&out);
        }
        if (st != RPC_SUCCESS) {
            clnt_perror(clnt, "bench_client");
            return 1;
        }
        if (i >= 0)
            lat[i] = now_ns() - start;
    }
    qsort(lat, count, sizeof(double), cmp_double);
    printf("%.0f\n", lat[count / 2]);
    clnt_destroy(clnt);
    return 0;
}
