/* Encodes a fixed list of values with libtirpc's xdrmem and prints the bytes in hex.
 * tests/xdr_c.rs encodes the same values with rpc::xdr and compares. */
#include <rpc/rpc.h>
#include <stdio.h>
#include <string.h>

struct node {
    int value;
    struct node *next;
};

static bool_t xdr_node(XDR *x, struct node *n)
{
    return xdr_int(x, &n->value) &&
           xdr_pointer(x, (char **)&n->next, sizeof(struct node), (xdrproc_t)xdr_node);
}

/* union switch (int kind) { case 0: unsigned num; case 1: string msg<8>; case 2: void;
 * default: hyper other; } */
struct shape {
    int kind;
    union {
        u_int num;
        char *msg;
        quad_t other;
    } u;
};

static bool_t xdr_msg8(XDR *x, char **s) { return xdr_string(x, s, 8); }

static const struct xdr_discrim shape_arms[] = {
    {0, (xdrproc_t)xdr_u_int},
    {1, (xdrproc_t)xdr_msg8},
    {2, (xdrproc_t)xdr_void},
    {__dontcare__, NULL},
};

static bool_t xdr_shape(XDR *x, struct shape *s)
{
    return xdr_union(x, (enum_t *)&s->kind, (char *)&s->u, shape_arms, (xdrproc_t)xdr_hyper);
}

int main(void)
{
    static char buf[8192];
    XDR x;
    xdrmem_create(&x, buf, sizeof buf, XDR_ENCODE);

    int i = -5;
    u_int u = 0xdeadbeef;
    quad_t h = -1234567890123LL;
    u_quad_t uh = 0xfedcba9876543210ULL;
    float f = 3.25f;
    double d = -0.125;
    bool_t t = TRUE, fa = FALSE;
    enum_t e = 7;
    short sh = -3;
    u_short ush = 65000;
    char c = -1;
    u_char uc = 200;
    char fixed[5] = {1, 2, 3, 4, 5};
    char var[3] = {9, 8, 7};
    char *pvar = var;
    u_int vlen = 3;
    char *s = "hello";
    char *empty = "";
    int arr[3] = {1, -2, 3};
    int *parr = arr;
    u_int alen = 3;
    int vec[4] = {4, 5, 6, 7};
    struct node n2 = {2, NULL}, n1 = {1, &n2};
    struct node *list = &n1, *none = NULL;
    struct shape s0 = {0}, s1 = {1}, s2 = {2}, s9 = {-9};
    s0.u.num = 5;
    s1.u.msg = "hi";
    s9.u.other = 3;

    bool_t ok = xdr_int(&x, &i) && xdr_u_int(&x, &u) && xdr_hyper(&x, &h) &&
                xdr_u_hyper(&x, &uh) && xdr_float(&x, &f) && xdr_double(&x, &d) &&
                xdr_bool(&x, &t) && xdr_bool(&x, &fa) && xdr_enum(&x, &e) &&
                xdr_short(&x, &sh) && xdr_u_short(&x, &ush) && xdr_char(&x, &c) &&
                xdr_u_char(&x, &uc) && xdr_opaque(&x, fixed, 5) &&
                xdr_bytes(&x, &pvar, &vlen, 16) && xdr_string(&x, &s, 16) &&
                xdr_string(&x, &empty, 16) &&
                xdr_array(&x, (char **)&parr, &alen, 8, sizeof(int), (xdrproc_t)xdr_int) &&
                xdr_vector(&x, (char *)vec, 4, sizeof(int), (xdrproc_t)xdr_int) &&
                xdr_pointer(&x, (char **)&list, sizeof(struct node), (xdrproc_t)xdr_node) &&
                xdr_pointer(&x, (char **)&none, sizeof(struct node), (xdrproc_t)xdr_node) &&
                xdr_shape(&x, &s0) && xdr_shape(&x, &s1) && xdr_shape(&x, &s2) &&
                xdr_shape(&x, &s9) && xdr_void();
    if (!ok) {
        fprintf(stderr, "xdr encoding failed\n");
        return 1;
    }
    u_int len = xdr_getpos(&x);
    for (u_int k = 0; k < len; k++)
        printf("%02x", (unsigned char)buf[k]);
    printf("\n");
    return 0;
}
