/*
 * The C peer's server for stubgen's interoperability tests: rpcgen -N -m generates the
 * dispatcher; this file has the procedures and a main that registers on UDP and TCP with
 * rpcbind, prints READY once registered and serves until killed. The procedures compute the
 * same results as the Rust server in logic.rs.
 */
#include "interop.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern void interop_prog_1(struct svc_req *, SVCXPRT *);

static color next_color(color c)
{
	return c == RED ? GREEN : c == GREEN ? BLUE : RED;
}

static void bump_scalars(scalars *out, const scalars *s)
{
	out->i = s->i + 1;
	out->u = s->u + 1;
	out->ui = s->ui + 1;
	out->h = s->h + 1;
	out->uh = s->uh + 1;
	out->f = s->f * 2;
	out->d = s->d * 2;
	out->b = !s->b;
	out->c = next_color(s->c);
}

void *null_proc_1_svc(struct svc_req *rq)
{
	static char dummy;
	(void)rq;
	return &dummy;
}

scalars *echo_scalars_1_svc(scalars s, struct svc_req *rq)
{
	static scalars out;
	(void)rq;
	bump_scalars(&out, &s);
	return &out;
}

/* The reply is encoded before the arguments are freed, so it may point into them. */
containers *echo_containers_1_svc(containers c, struct svc_req *rq)
{
	static containers out;
	static char name[NAME_MAX_LEN + 1];
	u_int i, n;
	(void)rq;
	out = c;
	for (i = 0; i < FIXED_LEN; i++)
		out.fixed_bytes[i] = c.fixed_bytes[i] + 1;
	n = c.blob.blob_t_len;
	for (i = 0; i < n / 2; i++) {
		char t = c.blob.blob_t_val[i];
		c.blob.blob_t_val[i] = c.blob.blob_t_val[n - 1 - i];
		c.blob.blob_t_val[n - 1 - i] = t;
	}
	snprintf(name, sizeof name, "%s!", c.name);
	out.name = name;
	for (i = 0; i < 3; i++)
		out.fixed_ints[i] = c.fixed_ints[2 - i];
	for (i = 0; i < c.var_ints.var_ints_len; i++)
		c.var_ints.var_ints_val[i] *= 2;
	for (i = 0; i < c.bigs.bigs_len; i++)
		c.bigs.bigs_val[i] = -c.bigs.bigs_val[i];
	for (i = 0; i < 3; i++)
		out.t[i] = c.t[i] + 10;
	for (i = 0; i < c.colors.colors_len; i++)
		c.colors.colors_val[i] = next_color(c.colors.colors_val[i]);
	bump_scalars(&out.inner, &c.inner);
	return &out;
}

list *reverse_1_svc(list l, struct svc_req *rq)
{
	static list out;
	list prev = NULL;
	(void)rq;
	while (l) {
		list next = l->next;
		l->next = prev;
		prev = l;
		l = next;
	}
	out = prev;
	return &out;
}

int *sum_1_svc(list l, struct svc_req *rq)
{
	static int out;
	(void)rq;
	out = 0;
	for (; l; l = l->next)
		out += l->value;
	return &out;
}

classify_res *classify_1_svc(color c, struct svc_req *rq)
{
	static classify_res out;
	(void)rq;
	out.c = c;
	if (c == RED)
		out.classify_res_u.code = 42;
	else
		out.classify_res_u.msg = c == GREEN ? "green" : "blue";
	return &out;
}

maybe_name *lookup_1_svc(int n, struct svc_req *rq)
{
	static maybe_name out;
	static char name[NAME_MAX_LEN + 1];
	(void)rq;
	out.present = n > 0;
	if (n > 0) {
		snprintf(name, sizeof name, "user%d", n);
		out.maybe_name_u.name = name;
	}
	return &out;
}

num_res *negate_1_svc(num_res r, struct svc_req *rq)
{
	static num_res out;
	(void)rq;
	out = r;
	if (r.kind == 0)
		out.num_res_u.small = -r.num_res_u.small;
	else if (r.kind == 1)
		out.num_res_u.large = -r.num_res_u.large;
	return &out;
}

tagged *echo_tagged_1_svc(tagged t, struct svc_req *rq)
{
	static tagged out;
	u_int i, n;
	(void)rq;
	out = t;
	if (t.tag == 7) {
		out.tagged_u.value = t.tagged_u.value * 2;
	} else {
		n = t.tagged_u.raw.raw_len;
		for (i = 0; i < n / 2; i++) {
			char c = t.tagged_u.raw.raw_val[i];
			t.tagged_u.raw.raw_val[i] = t.tagged_u.raw.raw_val[n - 1 - i];
			t.tagged_u.raw.raw_val[n - 1 - i] = c;
		}
	}
	return &out;
}

quad_t *add3_1_svc(int a, quad_t b, u_int c, struct svc_req *rq)
{
	static quad_t out;
	(void)rq;
	out = (quad_t)a + b + (quad_t)c;
	return &out;
}

char **concat_1_svc(char *a, char *b, struct svc_req *rq)
{
	static char *out;
	(void)rq;
	free(out);
	out = malloc(strlen(a) + strlen(b) + 1);
	strcpy(out, a);
	strcat(out, b);
	return &out;
}

bool_t *same_color_1_svc(scalars s, color c, struct svc_req *rq)
{
	static bool_t out;
	(void)rq;
	out = s.c == c;
	return &out;
}

static int stored;

void *set_value_1_svc(int v, struct svc_req *rq)
{
	static char dummy;
	(void)rq;
	stored = v;
	return &dummy;
}

int *get_value_1_svc(struct svc_req *rq)
{
	(void)rq;
	return &stored;
}

int main(void)
{
	SVCXPRT *udp, *tcp;

	pmap_unset(INTEROP_PROG, INTEROP_V1);
	udp = svcudp_create(RPC_ANYSOCK);
	tcp = svctcp_create(RPC_ANYSOCK, 0, 0);
	if (!udp || !tcp) {
		fprintf(stderr, "cannot create transports\n");
		return 1;
	}
	if (!svc_register(udp, INTEROP_PROG, INTEROP_V1, interop_prog_1, IPPROTO_UDP) ||
	    !svc_register(tcp, INTEROP_PROG, INTEROP_V1, interop_prog_1, IPPROTO_TCP)) {
		fprintf(stderr, "cannot register with rpcbind\n");
		return 1;
	}
	printf("READY\n");
	fflush(stdout);
	svc_run();
	fprintf(stderr, "svc_run returned\n");
	return 1;
}
