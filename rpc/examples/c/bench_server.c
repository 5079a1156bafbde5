/* libtirpc TCP server for the tcp_bench example and bench-rpc: procedure 0 is null, procedure 1 echoes an
 * opaque<>. Usage: bench_server PROG. Prints its port, then serves (not registered with
 * rpcbind). */
#include <rpc/rpc.h>
#include <stdio.h>
#include <stdlib.h>

struct blob {
    u_int len;
    char *data;
};

static bool_t xdr_blob(XDR *x, struct blob *b)
{
    return xdr_bytes(x, &b->data, &b->len, ~0u);
}

static void dispatch(struct svc_req *req, SVCXPRT *xprt)
{
    struct blob b = {0, NULL};
    switch (req->rq_proc) {
    case 0:
        svc_sendreply(xprt, (xdrproc_t)xdr_void, NULL);
        return;
    case 1:
        if (!svc_getargs(xprt, (xdrproc_t)xdr_blob, (char *)&b)) {
            svcerr_decode(xprt);
            return;
        }
        svc_sendreply(xprt, (xdrproc_t)xdr_blob, (char *)&b);
        svc_freeargs(xprt, (xdrproc_t)xdr_blob, (char *)&b);
        return;
    default:
        svcerr_noproc(xprt);
    }
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    u_long prog = strtoul(argv[1], NULL, 0);
    SVCXPRT *xprt = svctcp_create(RPC_ANYSOCK, 0, 0);
    if (xprt == NULL || !svc_register(xprt, prog, 1, dispatch, 0)) {
        fprintf(stderr, "cannot create the server\n");
        return 1;
    }
    printf("%u\n", (unsigned)xprt->xp_port);
    fflush(stdout);
    svc_run();
    return 0;
}
