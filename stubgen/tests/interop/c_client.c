/*
 * The C peer's client for stubgen's interoperability tests: calls every procedure of the
 * server at HOST over PROTO (tcp or udp) through rpcgen -N's client stubs and checks each
 * result against what logic.rs computes. Prints OK and exits 0 when all match.
 */
#include "interop.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK(cond)                                                                    \
	do {                                                                           \
		if (!(cond)) {                                                         \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, \
				#cond);                                                \
			failures++;                                                    \
		}                                                                      \
	} while (0)

#define CALLED(p)                                                                      \
	do {                                                                           \
		if ((p) == NULL) {                                                     \
			clnt_perror(cl, #p);                                           \
			exit(2);                                                       \
		}                                                                      \
	} while (0)

static scalars sample_scalars(void)
{
	scalars s;
	s.i = -7;
	s.u = 4000000000u;
	s.ui = 17;
	s.h = -5000000000LL;
	s.uh = 18000000000000000000ULL;
	s.f = 1.5f;
	s.d = -2.25;
	s.b = TRUE;
	s.c = BLUE;
	return s;
}

static int check_scalars(const scalars *r, const scalars *s)
{
	return r->i == s->i + 1 && r->u == s->u + 1 && r->ui == s->ui + 1 && r->h == s->h + 1 &&
	       r->uh == s->uh + 1 && r->f == s->f * 2 && r->d == s->d * 2 && r->b == !s->b &&
	       r->c == (s->c == RED ? GREEN : s->c == GREEN ? BLUE : RED);
}

int main(int argc, char **argv)
{
	CLIENT *cl;
	void *v;
	scalars s, *sr;
	containers c, *cr;
	node n3 = {3, NULL}, n2 = {2, &n3}, n1 = {1, &n2};
	list l = &n1, *lr;
	int *ir;
	classify_res *clr;
	maybe_name *mr;
	num_res nr, *nrr;
	tagged t, *tr;
	quad_t *qr;
	char **strr;
	bool_t *br;
	char blob[] = {1, 2, 3, 4};
	char any[] = {9, 8};
	int var_ints[] = {5, -6, 7};
	quad_t bigs[] = {1LL << 40, -3};
	color colors[] = {RED, GREEN, BLUE};
	char raw[] = {10, 20, 30};

	if (argc != 3) {
		fprintf(stderr, "usage: %s HOST tcp|udp\n", argv[0]);
		return 2;
	}
	cl = clnt_create(argv[1], INTEROP_PROG, INTEROP_V1, argv[2]);
	if (!cl) {
		clnt_pcreateerror(argv[1]);
		return 2;
	}

	CALLED(v = null_proc_1(cl));

	s = sample_scalars();
	CALLED(sr = echo_scalars_1(s, cl));
	CHECK(check_scalars(sr, &s));

	memset(&c, 0, sizeof c);
	memcpy(c.fixed_bytes, "abcde", FIXED_LEN);
	c.blob.blob_t_len = sizeof blob;
	c.blob.blob_t_val = blob;
	c.any.any_len = sizeof any;
	c.any.any_val = any;
	c.name = "alice";
	c.text = "some text";
	c.fixed_ints[0] = 1;
	c.fixed_ints[1] = 2;
	c.fixed_ints[2] = 3;
	c.var_ints.var_ints_len = 3;
	c.var_ints.var_ints_val = var_ints;
	c.bigs.bigs_len = 2;
	c.bigs.bigs_val = bigs;
	c.t[0] = 100;
	c.t[1] = 200;
	c.t[2] = 300;
	c.colors.colors_len = 3;
	c.colors.colors_val = colors;
	c.inner = s;
	CALLED(cr = echo_containers_1(c, cl));
	CHECK(memcmp(cr->fixed_bytes, "bcdef", FIXED_LEN) == 0);
	CHECK(cr->blob.blob_t_len == 4 && cr->blob.blob_t_val[0] == 4 && cr->blob.blob_t_val[3] == 1);
	CHECK(cr->any.any_len == 2 && cr->any.any_val[0] == 9 && cr->any.any_val[1] == 8);
	CHECK(strcmp(cr->name, "alice!") == 0);
	CHECK(strcmp(cr->text, "some text") == 0);
	CHECK(cr->fixed_ints[0] == 3 && cr->fixed_ints[1] == 2 && cr->fixed_ints[2] == 1);
	CHECK(cr->var_ints.var_ints_len == 3 && cr->var_ints.var_ints_val[0] == 10 &&
	      cr->var_ints.var_ints_val[1] == -12 && cr->var_ints.var_ints_val[2] == 14);
	CHECK(cr->bigs.bigs_len == 2 && cr->bigs.bigs_val[0] == -(1LL << 40) && cr->bigs.bigs_val[1] == 3);
	CHECK(cr->t[0] == 110 && cr->t[1] == 210 && cr->t[2] == 310);
	CHECK(cr->colors.colors_len == 3 && cr->colors.colors_val[0] == GREEN &&
	      cr->colors.colors_val[1] == BLUE && cr->colors.colors_val[2] == RED);
	CHECK(check_scalars(&cr->inner, &s));

	CALLED(lr = reverse_1(l, cl));
	CHECK(*lr && (*lr)->value == 3 && (*lr)->next && (*lr)->next->value == 2 &&
	      (*lr)->next->next && (*lr)->next->next->value == 1 && !(*lr)->next->next->next);
	CALLED(lr = reverse_1(NULL, cl));
	CHECK(*lr == NULL);

	CALLED(ir = sum_1(l, cl));
	CHECK(*ir == 6);

	CALLED(clr = classify_1(RED, cl));
	CHECK(clr->c == RED && clr->classify_res_u.code == 42);
	CALLED(clr = classify_1(GREEN, cl));
	CHECK(clr->c == GREEN && strcmp(clr->classify_res_u.msg, "green") == 0);
	CALLED(clr = classify_1(BLUE, cl));
	CHECK(clr->c == BLUE && strcmp(clr->classify_res_u.msg, "blue") == 0);

	CALLED(mr = lookup_1(12, cl));
	CHECK(mr->present && strcmp(mr->maybe_name_u.name, "user12") == 0);
	CALLED(mr = lookup_1(0, cl));
	CHECK(!mr->present);

	nr.kind = 0;
	nr.num_res_u.small = 5;
	CALLED(nrr = negate_1(nr, cl));
	CHECK(nrr->kind == 0 && nrr->num_res_u.small == -5);
	nr.kind = 1;
	nr.num_res_u.large = 1LL << 33;
	CALLED(nrr = negate_1(nr, cl));
	CHECK(nrr->kind == 1 && nrr->num_res_u.large == -(1LL << 33));
	nr.kind = 99;
	CALLED(nrr = negate_1(nr, cl));
	CHECK(nrr->kind == 99);

	t.tag = 7;
	t.tagged_u.value = 0.75;
	CALLED(tr = echo_tagged_1(t, cl));
	CHECK(tr->tag == 7 && tr->tagged_u.value == 1.5);
	t.tag = 3;
	t.tagged_u.raw.raw_len = 3;
	t.tagged_u.raw.raw_val = raw;
	CALLED(tr = echo_tagged_1(t, cl));
	CHECK(tr->tag == 3 && tr->tagged_u.raw.raw_len == 3 && tr->tagged_u.raw.raw_val[0] == 30 &&
	      tr->tagged_u.raw.raw_val[2] == 10);

	CALLED(qr = add3_1(-1, 1LL << 35, 3000000000u, cl));
	CHECK(*qr == -1 + (1LL << 35) + 3000000000LL);

	CALLED(strr = concat_1("foo", "bar", cl));
	CHECK(strcmp(*strr, "foobar") == 0);

	CALLED(br = same_color_1(s, BLUE, cl));
	CHECK(*br);
	CALLED(br = same_color_1(s, RED, cl));
	CHECK(!*br);

	CALLED(v = set_value_1(31337, cl));
	CALLED(ir = get_value_1(cl));
	CHECK(*ir == 31337);

	clnt_destroy(cl);
	if (failures) {
		fprintf(stderr, "%d checks failed\n", failures);
		return 1;
	}
	printf("OK\n");
	return 0;
}
